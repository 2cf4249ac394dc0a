"""SQLite's one-hop escalation (signoff.store.lite) stores exactly what the general path
stores: the same columns, values, storage classes and text formats in every table an
escalation writes, and the same answers for replays and refused tasks."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

from signoff.domain.clock import ManualClock
from signoff.domain.states import Role
from signoff.domain.tasks import Principal
from signoff.errors import Conflict
from signoff.services import tasks as task_service
from signoff.services.context import ServiceContext
from signoff.settings import Settings
from signoff.store.runtime.database import Database, create_engine
from signoff.store.runtime.migrate import upgrade
from tests.support import escalation

PRODUCER = Principal(key_id=uuid.uuid4(), principal_id="bot-lite", role=Role.PRODUCER)
TABLES = {
    "review_tasks": "id",
    "idempotency_keys": "task_id",
    "task_events": "task_id",
    "outbox_events": "task_id",
}


def _escalate_both_ways(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[Any], dict[str, Any]]:
    """Escalate ``a`` through the one-hop path and ``b`` through the general one, at the
    same instant; return the outcomes and the bodies."""
    settings = Settings(database_url=f"sqlite:///{path}", encryption_keys=None)
    clock = ManualClock()
    bodies = {"a": escalation(), "b": escalation()}

    async def run() -> list[Any]:
        database = Database(create_engine(settings))
        await upgrade(database.engine)
        context = ServiceContext(database=database, settings=settings, clock=clock)
        try:
            first = await task_service.escalate(context, PRODUCER, bodies["a"])
            assert database._lite is not None  # the one-hop path ran
            with monkeypatch.context() as patch:
                # The write path is chosen when the database is built: build it without
                # a file to write through.
                patch.setattr(Database, "sqlite_file", property(lambda _self: None))
                general = Database(create_engine(settings))
                general_context = ServiceContext(database=general, settings=settings, clock=clock)
                try:
                    second = await task_service.escalate(general_context, PRODUCER, bodies["b"])
                finally:
                    await general.dispose()
            assert general._lite is None
            return [first, second]
        finally:
            await database.dispose()

    return asyncio.run(run()), bodies


def _rows(path: Path, table: str, column: str, task_id: str) -> list[dict[str, Any]]:
    connection = sqlite3.connect(path)
    connection.row_factory = sqlite3.Row
    try:
        names = [r[1] for r in connection.execute(f"PRAGMA table_info({table})")]
        select = ", ".join(f"{n}, typeof({n}) AS {n}__type" for n in names)
        rows = connection.execute(
            f"SELECT {select} FROM {table} WHERE {column} = ?", (uuid.UUID(task_id).hex,)
        ).fetchall()
        return [dict(row) for row in rows]
    finally:
        connection.close()


def _comparable(row: dict[str, Any], ids: dict[str, str]) -> dict[str, Any]:
    """The row with what differs by construction (ids, keys, entity) named, not valued."""
    out = {}
    for name, value in row.items():
        if name in ("id", "request_fingerprint"):  # of the body: differs by construction
            value = f"<{len(value)} characters>" if isinstance(value, str) else "<serial>"
        if name == "hash":  # the trail's chain link: over the ids too
            value = f"<{len(value)} characters>"
        if isinstance(value, str):
            for original, label in ids.items():
                value = value.replace(original, label)
        out[name] = value
    return out


def test_one_hop_rows_equal_the_general_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "lite.db"
    outcomes, bodies = _escalate_both_ways(path, monkeypatch)
    assert [o.status_code for o in outcomes] == [201, 201]
    for table, column in TABLES.items():
        found = {}
        for name in ("a", "b"):
            body = bodies[name]
            task = body["escalation_id"]
            ids = {
                task: "<task>",
                uuid.UUID(task).hex: "<task>",
                body["idempotency_key"]: "<key>",
                body["entity_id"]: "<entity>",
            }
            rows = _rows(path, table, column, task)
            assert len(rows) == 1, (table, name)
            found[name] = _comparable(rows[0], ids)
        if table == "outbox_events":  # event ids are random: compare their shape
            for name in found:
                event_id = found[name]["payload"].split('"id":"', 1)[1].split('"', 1)[0]
                found[name]["payload"] = found[name]["payload"].replace(event_id, "<event>")
        assert found["a"] == found["b"], table


def test_one_hop_replays_and_refusals(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'lite.db'}", encryption_keys=None)

    async def run() -> None:
        database = Database(create_engine(settings))
        await upgrade(database.engine)
        context = ServiceContext(database=database, settings=settings, clock=ManualClock())
        try:
            body = escalation()
            first = await task_service.escalate(context, PRODUCER, body)
            again = await task_service.escalate(context, PRODUCER, body)
            assert (again.status_code, again.body, again.replayed) == (201, first.body, True)
            same_entity = escalation(entity_id=body["entity_id"])
            with pytest.raises(Conflict) as refused:
                await task_service.escalate(context, PRODUCER, same_entity)
            assert refused.value.extra == {"task_id": body["escalation_id"]}
            async with database.transaction(write=False) as uow:
                keys = await uow.connection.exec_driver_sql("SELECT count(*) FROM idempotency_keys")
                assert keys.scalar() == 1  # the refused escalation left no key behind
        finally:
            await database.dispose()

    asyncio.run(run())
