"""W1's second reference: pgbench writing **the rows one escalation writes**, in one
statement, as Signoff's own escalation does.

The first reference (``pgbench_insert_row``) inserts the task row alone; an escalation
also writes its idempotency record, the first entry of the task's trail (whose trigger
links it into the hash chain) and its outbox event. This script copies the rows of an
escalation Signoff itself wrote during the warm-up (read back from the database, so it
follows the schema as it changes), gives them fresh keys, and inserts all of them in one
statement — one round trip, committed with ``synchronous_commit = off`` as Signoff
commits an escalation (:data:`WRITES_OPTIONS`). Its rate is what the database allows for
an escalation's writes with no HTTP and no Python: the ceiling of W1 on the same machine,
in the same run. (Signoff sends a group of escalations in one transaction of four round
trips; a script of ``BEGIN``, ``SET LOCAL``, the statement and ``COMMIT`` per escalation
measured 0.74–0.90× of this one.)
"""

from __future__ import annotations

from bench.common import psql

#: What one escalation writes: the table and the column naming the task. The trail's
#: own keys and chain are computed by its sequence and trigger, as for Signoff.
WRITES = (
    ("idempotency_keys", "task_id"),
    ("review_tasks", "id"),
    ("task_events", "task_id"),
    ("outbox_events", "task_id"),
)
COMPUTED = {"task_events": ("prev_hash", "hash")}
#: The sessions' settings (pgbench's ``PGOPTIONS``): commit as Signoff commits.
WRITES_OPTIONS = "-c synchronous_commit=off"


def _insert(database: str, table: str, column: str, task_id: str) -> str:
    """The ``INSERT`` of ``table``'s row for ``task_id`` with its literal values, leaving
    columns that have a default (or are computed by a trigger) to the database."""
    skipped = ", ".join(f"'{name}'" for name in COMPUTED.get(table, ())) or "''"
    names, values = psql(
        database,
        "SELECT string_agg(quote_ident(e.key), ', ' ORDER BY a.attnum),"
        " string_agg(quote_nullable(e.value), ', ' ORDER BY a.attnum)"
        f" FROM {table} AS t, json_each_text(row_to_json(t)) AS e"
        " JOIN pg_attribute AS a ON a.attname = e.key"
        f" AND a.attrelid = '{table}'::regclass"
        f" WHERE t.{column} = '{task_id}' AND NOT a.atthasdef AND e.key NOT IN ({skipped})"
        " GROUP BY t.ctid ORDER BY t.ctid LIMIT 1",
    ).split("|")
    return f"INSERT INTO {table} ({names}) VALUES ({values}) RETURNING 1"


def escalation_writes_script(database: str) -> str:
    """A pgbench script inserting, per transaction, fresh copies of the rows the newest
    escalation wrote (fresh task id, idempotency key, entity and outbox id)."""
    task_id, key, entity, outbox_id = psql(
        database,
        "SELECT t.id, t.idempotency_key, t.entity_id, o.id FROM review_tasks AS t"
        " JOIN outbox_events AS o ON o.task_id = t.id"
        " WHERE t.idempotency_key LIKE 'wrk-%' ORDER BY t.created_at DESC LIMIT 1",
    ).split("|")
    inserts = [_insert(database, table, column, task_id) for table, column in WRITES]
    statement = (
        "WITH "
        + ", ".join(f"w{n} AS ({sql})" for n, sql in enumerate(inserts[:-1]))
        + f" {inserts[-1].removesuffix(' RETURNING 1')};"
    )
    for old, new in ((task_id, ":tid"), (key, "pgbench-:tid"), (entity, "txn_:tid")):
        statement = statement.replace(old, new)
    statement = statement.replace(outbox_id, ":oid")
    return "SELECT gen_random_uuid() AS tid, gen_random_uuid() AS oid \\gset\n" + statement + "\n"
