"""One thread hop per escalation on SQLite.

Through SQLAlchemy and aiosqlite every statement of a transaction is its own trip to the
driver's thread and back (``BEGIN``, the idempotency key, the task, its audit event, its
outbox event, ``COMMIT``), with a statement object built and compiled each time. Here the
common escalation's statements are written once, at import, from the columns of
:mod:`signoff.store.tables`, and the whole transaction runs as one function call in the
database's SQLite thread (:meth:`signoff.store.runtime.database.Database.sqlite_script`).

Values are converted by the columns' own SQLAlchemy types (the public
``dialect_impl(…).bind_processor`` and ``result_processor``), so rows are stored exactly
as the general path stores them (``tests/integration/test_lite.py`` holds the two
equal). JSON columns receive their text already encoded (as
:func:`signoff.store.oneshot.encode_json` makes it, the serialisation of
:class:`~signoff.store.tables.JsonText`).

The parameters and the answer are those of :data:`signoff.store.oneshot.ESCALATE`, so
both engines' one-step escalations are read alike
(:func:`signoff.store.writes.core.escalation_record`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Column, Table
from sqlalchemy.dialects import sqlite

from signoff.domain.states import Action, transition
from signoff.store.refused import TaskRefused
from signoff.store.tables import (
    JsonText,
    fanned_out_at_sql,
    idempotency_keys,
    outbox_events,
    review_tasks,
    task_events,
)

_DIALECT = sqlite.dialect()
Processor = Callable[[Any], Any] | None


def _bind(column: Column[Any]) -> Processor:
    if isinstance(column.type, JsonText):
        return None  # already the stored text
    processor: Processor = column.type.dialect_impl(_DIALECT).bind_processor(_DIALECT)
    return processor


def _result(column: Column[Any]) -> Processor:
    processor: Processor = column.type.dialect_impl(_DIALECT).result_processor(_DIALECT, None)
    return processor


@dataclass(frozen=True)
class LiteStatement:
    """SQL with named parameters, and for each parameter the column type's converter."""

    name: str
    sql: str
    binds: tuple[tuple[str, Processor], ...]

    def params(self, values: Mapping[str, Any]) -> dict[str, Any]:
        out = {}
        for name, processor in self.binds:
            value = values[name]
            out[name] = processor(value) if processor is not None and value is not None else value
        return out


def statement(name: str, sql: str, params: Mapping[str, Column[Any]]) -> LiteStatement:
    """A statement whose ``:param`` values are converted as ``params`` says (each
    parameter's column)."""
    return LiteStatement(name, sql, tuple((p, _bind(column)) for p, column in params.items()))


def _insert(
    name: str,
    table: Table,
    params: Mapping[str, str],
    tail: str = "",
    *,
    values: Mapping[str, str] | None = None,
) -> LiteStatement:
    """``INSERT INTO table (column, …) VALUES (:param, …) tail``; ``params`` maps each
    column to the value's name (``tail`` may use those names again); ``values`` gives
    further columns SQL of their own (over the same names)."""
    expressions = {column: f":{name}" for column, name in params.items()} | dict(values or {})
    sql = (
        f"INSERT INTO {table.name} ({', '.join(expressions)})"
        f" VALUES ({', '.join(expressions.values())}){tail}"
    )
    binds = tuple((params[c], _bind(table.c[c])) for c in params)
    return LiteStatement(name, sql, binds)


_KEY_COLUMNS = {
    "producer_id": "actor",
    "idempotency_key": "key",
    "request_fingerprint": "fingerprint",
    "task_id": "t_id",
    "response_status": "response_status",
    "response_body": "response",
    "created_at": "now",
    "expires_at": "expires_at",
}
_IK = idempotency_keys.c

TAKE_KEY = _insert(
    "take_key",
    idempotency_keys,
    _KEY_COLUMNS,
    " ON CONFLICT (producer_id, idempotency_key) DO UPDATE SET "
    + ", ".join(
        f"{c} = excluded.{c}" for c in _KEY_COLUMNS if c not in ("producer_id", "idempotency_key")
    )
    + " WHERE idempotency_keys.expires_at <= :now RETURNING 1",
)

_STORED = ("request_fingerprint", "task_id", "response_status", "response_body", "expires_at")
FIND_KEY = LiteStatement(
    "find_key",
    f"SELECT {', '.join(_STORED)} FROM idempotency_keys"
    " WHERE producer_id = :actor AND idempotency_key = :key",
    (("actor", _bind(_IK.producer_id)), ("key", _bind(_IK.idempotency_key))),
)
_STORED_RESULTS = tuple(_result(_IK[c]) for c in _STORED)

INSERT_TASK = _insert(
    "insert_task",
    review_tasks,
    {c.name: f"t_{c.name}" for c in review_tasks.c},
    " ON CONFLICT DO NOTHING RETURNING 1",
)

_STEP = transition(Action.ESCALATE)
_EVENT_TYPE, _ACTION = _STEP.event_type, _STEP.action.value

INSERT_AUDIT = _insert(
    "insert_audit",
    task_events,
    {
        "task_id": "t_id",
        "event_type": "event_type",
        "action": "action",
        "status": "t_status",
        "version": "t_version",
        "actor_id": "actor",
        "actor_role": "actor_role",
        "details": "details",
        "created_at": "now",
    },
)

INSERT_OUTBOX = _insert(
    "insert_outbox",
    outbox_events,
    {
        "id": "event_id",
        "event_type": "event_type",
        "task_id": "t_id",
        "payload": "payload",
        "task_version": "t_version",
        "created_at": "now",
    },
    values={"fanned_out_at": fanned_out_at_sql(":now")},
)


def escalate(values: Mapping[str, Any]) -> Callable[[sqlite3.Connection], dict[str, Any]]:
    """The escalation as one function of a SQLite connection (run it with
    :meth:`~signoff.store.runtime.database.Database.sqlite_script`). Its answer has the columns of
    :data:`signoff.store.oneshot.ESCALATE`'s: ``created`` (1 or 0) and, when the key was
    live, the stored key's row. Raises :class:`TaskRefused`."""
    values = {**values, "event_type": _EVENT_TYPE, "action": _ACTION, "response_status": 201}

    def run(connection: sqlite3.Connection) -> dict[str, Any]:
        connection.execute("BEGIN IMMEDIATE")
        try:
            if connection.execute(TAKE_KEY.sql, TAKE_KEY.params(values)).fetchone() is None:
                row = connection.execute(FIND_KEY.sql, FIND_KEY.params(values)).fetchone()
                connection.execute("ROLLBACK")
                return {"created": 0, **_stored(row)}
            if connection.execute(INSERT_TASK.sql, INSERT_TASK.params(values)).fetchone() is None:
                raise TaskRefused
            connection.execute(INSERT_AUDIT.sql, INSERT_AUDIT.params(values))
            connection.execute(INSERT_OUTBOX.sql, INSERT_OUTBOX.params(values))
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        return {"created": 1}

    return run


def _stored(row: Any) -> dict[str, Any]:
    if row is None:  # the key's row vanished (expired and purged) between the statements
        return dict.fromkeys(_STORED)
    return {
        name: processor(value) if processor is not None else value
        for name, processor, value in zip(_STORED, _STORED_RESULTS, row, strict=True)
    }
