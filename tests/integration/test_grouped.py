"""Group commit of escalations on PostgreSQL (signoff.store.runtime.grouped): escalations that wait
together are written by one call of the group function, each in its own subtransaction.
These tests form groups on purpose (escalations started in the same turn of the event
loop join one group) and check that a group stores exactly what lone statements store,
that later escalations of a group see the earlier ones, that a refused escalation undoes
only itself, and that a group that cannot be written is written alone, escalation by
escalation."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from alembic.script import ScriptDirectory

from signoff.domain.clock import ManualClock
from signoff.domain.json_output import compact_json
from signoff.domain.states import Role
from signoff.domain.tasks import Principal
from signoff.errors import Conflict, Unprocessable
from signoff.services import tasks as task_service
from signoff.services.context import ServiceContext
from signoff.settings import Settings
from signoff.store import oneshot
from signoff.store.runtime import grouped
from signoff.store.runtime.database import Database, create_engine
from signoff.store.runtime.migrate import alembic_config
from tests.conftest import reset_postgres
from tests.integration.test_lite import TABLES  # the tables an escalation writes
from tests.support import escalation

pytestmark = pytest.mark.postgres

PRODUCER = Principal(key_id=uuid.uuid4(), principal_id="bot-groups", role=Role.PRODUCER)


#: The migration that created the group function this version calls.
MIGRATION = "0020"


def migrated_definition() -> str:
    """The group function's definition as its migration carries it."""
    script = ScriptDirectory.from_config(alembic_config()).get_revision(MIGRATION)
    assert script is not None
    return Path(script.path).with_suffix(".sql").read_text(encoding="utf-8")


def emptied(postgres_database: str) -> Iterator[str]:
    """The session's database, emptied; a group function a test dropped or gave away is
    put back as its migration made it afterwards."""
    reset_postgres(postgres_database)
    yield postgres_database
    function = f"{grouped.FUNCTION}{grouped.SIGNATURE}"
    found = asyncio.run(
        _admin(
            postgres_database,
            "SELECT pg_get_userbyid(proowner) = current_user AS ours FROM pg_proc"
            f" WHERE oid = to_regprocedure('{function}')",
        )
    )
    if not found or not found[0]["ours"]:
        asyncio.run(_admin(postgres_database, f"DROP FUNCTION IF EXISTS {function};"))
        asyncio.run(_admin(postgres_database, migrated_definition()))


@pytest.fixture
def url(postgres_database: str) -> Iterator[str]:
    yield from emptied(postgres_database)


def _is_group_call(sql: str) -> bool:
    return sql.startswith("SELECT * FROM ") and grouped.FUNCTION in sql


class Recorder:
    """The statements a group writer ran (the SQL text of each), through ``database``."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.calls: list[tuple[str, int]] = []

    async def __call__(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        items = len(json.loads(args[0])) if _is_group_call(sql) else 1
        self.calls.append((sql, items))
        return await self.database.one_statement(sql, *args)

    def groups(self) -> list[int]:
        """The sizes of the groups written by the group function."""
        return [items for sql, items in self.calls if _is_group_call(sql)]

    def alone(self) -> int:
        return sum(1 for sql, _ in self.calls if sql == grouped.ESCALATE.sql)


async def _admin(url: str, sql: str) -> Any:
    connection = await asyncpg.connect(url)
    try:
        if ";" in sql:  # several statements: the simple protocol, no rows
            return await connection.execute(sql)
        return await connection.fetch(sql)
    finally:
        await connection.close()


def _context(url: str) -> tuple[ServiceContext, Recorder]:
    settings = Settings(database_url=url, encryption_keys=None)
    database = Database(create_engine(settings))
    recorder = Recorder(database)
    database.escalations = grouped.EscalationGroups(recorder, lanes=1)
    return ServiceContext(database=database, settings=settings, clock=ManualClock()), recorder


async def _together(context: ServiceContext, bodies: list[dict[str, Any]]) -> list[Any]:
    """Escalate ``bodies`` in one turn of the event loop: they wait as one group."""
    return await asyncio.gather(
        *(task_service.escalate(context, PRODUCER, body) for body in bodies),
        return_exceptions=True,
    )


async def _rows(url: str, table: str, column: str, task_id: str) -> list[dict[str, Any]]:
    rows = await _admin(url, f"SELECT * FROM {table} WHERE {column} = '{task_id}'")
    return [dict(row) for row in rows]


def _comparable(row: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """The row with what differs by construction named, not valued."""
    out: dict[str, Any] = {}
    for column, value in row.items():
        if column in ("request_fingerprint", "hash"):  # the chain link is over the ids too
            value = f"<{len(value)} characters>"
        elif column == "id" and not isinstance(value, uuid.UUID):
            value = "<serial>"
        text = str(value) if isinstance(value, uuid.UUID) else value
        if isinstance(text, str):
            for original, label in names.items():
                text = text.replace(original, label)
            value = text
        out[column] = value
    return out


def _documented() -> dict[str, Any]:
    """An escalation whose every JSON document is its own (a summary and metadata that
    name its entity): a group that put one escalation's text in another's row shows."""
    body = escalation()
    entity = body["entity_id"]
    body["summary"] = {"recommendation": "REJECT", "rationale": f"{entity} looks wrong"}
    body["metadata"] = {"ticket": entity}
    return body


def test_a_group_stores_what_a_lone_statement_stores(url: str) -> None:
    alone, together = _documented(), [_documented(), _documented(), _documented()]

    async def run() -> dict[str, dict[str, Any]]:
        context, recorder = _context(url)
        try:
            first = await task_service.escalate(context, PRODUCER, alone)
            outcomes = await _together(context, together)
        finally:
            await context.database.dispose()
        assert first.status_code == 201
        assert [o.status_code for o in outcomes] == [201, 201, 201]
        assert recorder.alone() == 1  # the first waited alone: a statement of its own
        assert recorder.groups() == [3]  # the others: one call of the group function
        found: dict[str, dict[str, Any]] = {}
        labelled = [("alone", alone)] + [(f"grouped {n}", body) for n, body in enumerate(together)]
        for label, body in labelled:
            task = body["escalation_id"]
            names = {task: "<task>", body["entity_id"]: "<entity>"}
            names[body["idempotency_key"]] = "<key>"
            for table, column in TABLES.items():
                rows = await _rows(url, table, column, task)
                assert len(rows) == 1, (table, label)
                row = _comparable(rows[0], names)
                if table == "outbox_events":  # event ids are random: compare their shape
                    event_id = str(rows[0]["id"])
                    row = {
                        k: v.replace(event_id, "<event>") if isinstance(v, str) else v
                        for k, v in row.items()
                    }
                    row["id"] = "<event>"
                    # The writing transaction's id: set on every path, its value by construction.
                    assert isinstance(row["commit_xid"], int), label
                    row["commit_xid"] = "<xid>"
                found.setdefault(label, {})[table] = row
        return found

    found = asyncio.run(run())
    for label in ("grouped 0", "grouped 1", "grouped 2"):
        for table in TABLES:
            assert found["alone"][table] == found[label][table], (label, table)


def test_later_escalations_of_a_group_see_the_earlier_ones(url: str) -> None:
    first = escalation()
    replay = dict(first)
    reused = escalation(idempotency_key=first["idempotency_key"])  # the key, another body
    same_entity = escalation(entity_id=first["entity_id"])
    other = escalation()

    async def run() -> None:
        context, recorder = _context(url)
        try:
            outcomes = await _together(context, [first, replay, reused, same_entity, other])
        finally:
            await context.database.dispose()
        assert recorder.groups() == [5]
        assert recorder.alone() == 0  # the group itself was written, refusals and all
        created, replayed, refused_key, refused_entity, fresh = outcomes
        assert (created.status_code, created.replayed) == (201, False)
        assert (replayed.status_code, replayed.replayed) == (201, True)
        assert replayed.body == created.body
        assert isinstance(refused_key, Unprocessable)
        assert refused_key.error_code == "ERR_IDEMPOTENCY_KEY_REUSED"
        assert isinstance(refused_entity, Conflict)
        assert refused_entity.error_code == "ERR_TASK_CONFLICT"
        assert refused_entity.extra == {"task_id": first["escalation_id"]}
        assert (fresh.status_code, fresh.replayed) == (201, False)
        tasks = await _admin(url, "SELECT id FROM review_tasks")
        assert {str(r["id"]) for r in tasks} == {first["escalation_id"], other["escalation_id"]}
        keys = await _admin(url, "SELECT idempotency_key FROM idempotency_keys")
        # The refused escalation's key was undone with it; the others of the group stand.
        assert {r["idempotency_key"] for r in keys} == {
            first["idempotency_key"],
            other["idempotency_key"],
        }
        events = await _admin(url, "SELECT count(*) AS n FROM outbox_events")
        assert events[0]["n"] == 2

    asyncio.run(run())


def test_a_group_whose_commit_was_lost_is_answered_from_its_keys(url: str) -> None:
    """The group committed, but its answer never arrived (the connection broke): each
    escalation is sent again alone and answered from its key, as a replay."""
    bodies = [escalation(), escalation()]

    async def run() -> None:
        context, recorder = _context(url)
        answered = False

        async def lose_the_answer(sql: str, *args: Any) -> list[asyncpg.Record]:
            nonlocal answered
            rows = await recorder(sql, *args)
            if _is_group_call(sql) and not answered:
                answered = True
                raise asyncpg.ConnectionDoesNotExistError("connection was closed")
            return rows

        context.database.escalations = grouped.EscalationGroups(lose_the_answer, lanes=1)
        try:
            outcomes = await _together(context, bodies)
        finally:
            await context.database.dispose()
        assert [(o.status_code, o.replayed) for o in outcomes] == [(201, True), (201, True)]
        tasks = await _admin(url, "SELECT count(*) AS n FROM review_tasks")
        assert tasks[0]["n"] == 2  # written once, by the group

    asyncio.run(run())


def test_a_caller_that_gives_up_leaves_its_group_whole(url: str) -> None:
    async def run() -> None:
        context, recorder = _context(url)
        try:
            bodies = [escalation(), escalation(), escalation()]
            calls = [
                asyncio.ensure_future(task_service.escalate(context, PRODUCER, body))
                for body in bodies
            ]
            await asyncio.sleep(0)  # all three wait in the queue now
            calls[1].cancel()
            outcomes = await asyncio.gather(*calls, return_exceptions=True)
        finally:
            await context.database.dispose()
        assert isinstance(outcomes[1], asyncio.CancelledError)
        assert [outcomes[0].status_code, outcomes[2].status_code] == [201, 201]
        assert recorder.groups() == [2]  # the one who gave up was not written
        tasks = await _admin(url, "SELECT id FROM review_tasks")
        assert str(bodies[1]["escalation_id"]) not in {str(r["id"]) for r in tasks}

    asyncio.run(run())


def _seconds(setting: str) -> float:
    """A PostgreSQL duration setting (``1s``, ``200ms``) in seconds."""
    if setting.endswith("ms"):
        return float(setting[:-2]) / 1000
    if setting.endswith("s"):
        return float(setting[:-1])
    return float(setting) / 1000


class _Holder:
    """Another session with an open transaction that holds what its statement wrote."""

    def __init__(self, connection: asyncpg.Connection, transaction: Any) -> None:
        self._connection, self._transaction = connection, transaction

    async def rollback(self) -> None:
        await self._transaction.rollback()

    async def close(self) -> None:
        await self._connection.close()


async def _holder(url: str, sql: str, *args: Any) -> _Holder:
    connection = await asyncpg.connect(url)
    transaction = connection.transaction()
    await transaction.start()
    await connection.execute(sql, *args)
    return _Holder(connection, transaction)


async def _lock_waiters(url: str, at_least: int) -> None:
    """Until ``at_least`` sessions of this database wait on a lock."""
    sql = (
        "SELECT count(*) AS n FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    for _ in range(2000):
        if (await _admin(url, sql))[0]["n"] >= at_least:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"fewer than {at_least} sessions ever waited on a lock")


def test_a_locked_key_holds_up_its_own_escalation_not_its_group(url: str) -> None:
    """A session holds an escalation's idempotency key in an open transaction: that
    escalation waits (as it would alone), and the rest of its group is written and
    answered meanwhile."""
    blocked, others = escalation(), [escalation(), escalation()]

    async def run() -> None:
        context, recorder = _context(url)
        holder = await _holder(
            url,
            "INSERT INTO idempotency_keys (producer_id, idempotency_key, request_fingerprint,"
            " task_id, response_status, response_body, created_at, expires_at)"
            " VALUES ($1, $2, 'x', gen_random_uuid(), 201, '{}', now(),"
            " now() + interval '1 day')",
            PRODUCER.principal_id,
            blocked["idempotency_key"],
        )
        try:
            calls = [
                asyncio.ensure_future(task_service.escalate(context, PRODUCER, body))
                for body in [others[0], blocked, others[1]]
            ]
            answered = await asyncio.wait_for(asyncio.gather(calls[0], calls[2]), timeout=60)
            assert [o.status_code for o in answered] == [201, 201]
            assert not calls[1].done()  # still waiting for the holder, alone
            await _lock_waiters(url, 1)
            await holder.rollback()
            late = await asyncio.wait_for(calls[1], timeout=60)
            assert (late.status_code, late.replayed) == (201, False)
        finally:
            await holder.close()
            await context.database.dispose()
        assert recorder.groups() == [3]
        assert recorder.alone() == 1  # the one that met the lock

    asyncio.run(run())


def test_a_group_and_a_lone_statement_never_deadlock(url: str) -> None:
    """Process A writes ``b2`` alone (its key, then its task); process B writes the group
    ``[b, b2]`` (``b`` and ``b2`` share an entity). Were B's group to wait for A's key
    while holding the entity, and A to wait for the entity, PostgreSQL would end one of
    them with a deadlock error (a 500). The group gives up the lock wait instead, and
    ``b2`` is written alone after it: both answers are the entity's conflict."""
    b = escalation()
    b2 = escalation(entity_id=b["entity_id"])

    async def run() -> None:
        lone, _ = _context(url)
        lone.database.escalations = grouped.EscalationGroups(lone.database.one_statement, size=1)
        group, recorder = _context(url)
        await task_service.escalate(group, PRODUCER, escalation())  # a row to copy
        # The holder takes b2's task id, so A stops between b2's key and its task.
        holder = await _holder(
            url,
            "INSERT INTO review_tasks SELECT (jsonb_populate_record(NULL::review_tasks,"
            " to_jsonb(t) || jsonb_build_object('id', $1::text, 'entity_id', 'held',"
            " 'idempotency_key', 'held'))).* FROM review_tasks AS t LIMIT 1",
            b2["escalation_id"],
        )
        try:
            from_a = asyncio.ensure_future(_together(lone, [b2]))
            await _lock_waiters(url, 1)  # A holds b2's key and waits on the holder
            from_b = asyncio.ensure_future(_together(group, [b, b2]))
            await _lock_waiters(url, 2)  # B's b2 waits on A's key
            # Let B's deadlock check pass while A still waits on the holder: were B's
            # group still holding the entity, A would be the one to find the cycle.
            timeout = await _admin(url, "SELECT current_setting('deadlock_timeout') AS t")
            await asyncio.sleep(_seconds(timeout[0]["t"]) + 0.3)
            await holder.rollback()
            (a_answer,) = await asyncio.wait_for(from_a, timeout=60)
            b_answers = await asyncio.wait_for(from_b, timeout=60)
        finally:
            await holder.close()
            await lone.database.dispose()
            await group.database.dispose()
        assert isinstance(a_answer, Conflict), a_answer  # not a deadlock's error
        assert a_answer.extra == {"task_id": b["escalation_id"]}
        created, refused = b_answers
        assert created.status_code == 201
        assert isinstance(refused, Conflict), refused
        assert recorder.groups() == [2]
        assert recorder.alone() == 2  # the first escalation, then b2 after the group

    asyncio.run(run())


def test_a_refusal_in_a_group_names_the_refusing_task_as_a_lone_one_would(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The group function looks up the task that refused an escalation in its own
    transaction: no second statement, and the same answer (the task is named only to the
    producer who escalated it)."""
    other_producer = Principal(key_id=uuid.uuid4(), principal_id="bot-other", role=Role.PRODUCER)
    theirs, mine = escalation(), escalation()
    asked: list[str] = []
    real_run = oneshot.run

    async def counting_run(database: Any, stmt: Any, values: Any) -> Any:
        asked.append(stmt.name)
        return await real_run(database, stmt, values)

    monkeypatch.setattr(oneshot, "run", counting_run)

    async def run() -> None:
        context, recorder = _context(url)
        try:
            await task_service.escalate(context, other_producer, theirs)
            await task_service.escalate(context, PRODUCER, mine)
            outcomes = await _together(
                context,
                [
                    escalation(entity_id=theirs["entity_id"]),  # another producer's entity
                    escalation(entity_id=mine["entity_id"]),  # my own entity
                    escalation(escalation_id=mine["escalation_id"]),  # my own id
                    escalation(),
                ],
            )
        finally:
            await context.database.dispose()
        assert recorder.groups() == [4]
        assert recorder.alone() == 2  # the two escalations before the group
        refused_theirs, refused_entity, refused_id, created = outcomes
        assert isinstance(refused_theirs, Conflict)
        assert refused_theirs.extra == {}  # another producer's task is not named
        assert isinstance(refused_entity, Conflict)
        assert refused_entity.extra == {"task_id": mine["escalation_id"]}
        assert isinstance(refused_id, Conflict)
        assert refused_id.extra == {"task_id": mine["escalation_id"]}
        assert "already exists" in str(refused_id)
        assert created.status_code == 201
        assert "task_conflict" not in asked  # looked up inside the group's transaction

    asyncio.run(run())


def test_the_texts_of_a_group_travel_joined_and_never_hold_the_separator() -> None:
    """JSON text as Signoff writes it never holds the separator (JSON escapes control
    characters), so the joined texts split back exactly; a text that would not split
    back makes the group refuse to form (its escalations are then written alone)."""
    texts = {
        name: compact_json({"name": name, "odd": "\x1e\x00\n"}) for name in grouped.TEXT_PARAMS
    }
    assert not any(grouped.SEPARATOR in text for text in texts.values())
    values = texts | dict.fromkeys(grouped.ITEM_PARAMS, "v") | {"t_resolution_payload": None}
    items, joined = grouped.group_arguments([values, values])
    parts = joined.split(grouped.SEPARATOR)
    expected = [texts[name] if values[name] is not None else "" for name in grouped.TEXT_PARAMS]
    assert parts == expected * 2
    assert json.loads(items) == [["v"] * len(grouped.ITEM_PARAMS)] * 2
    for bad in ("", '{"a":"\x1e"}'):
        with pytest.raises(ValueError, match="cannot travel in a group"):
            grouped.group_arguments([values | {"details": bad}])
