"""The engines' write paths (signoff.store.writes) answer alike: a refused escalation
names the task that refused it, and a refused lease change comes back with the task as
it was read, for the service to explain."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from signoff.domain.clock import ManualClock
from signoff.domain.states import Role, TaskStatus
from signoff.domain.tasks import Principal, Task
from signoff.services import tasks as task_service
from signoff.services.context import ServiceContext
from signoff.settings import Settings
from signoff.store import tasks as task_store
from signoff.store.runtime.database import Database, create_engine
from signoff.store.runtime.migrate import upgrade
from signoff.store.writes import (
    Escalation,
    Lease,
    OverLimit,
    Refusal,
    TaskRefused,
)
from signoff.store.writes.postgres import PostgresWrites
from signoff.store.writes.sqlite import SqliteWrites
from tests.support import escalation

PRODUCER = Principal(key_id=uuid.uuid4(), principal_id="bot-writes", role=Role.PRODUCER)
ALICE = Principal(key_id=uuid.uuid4(), principal_id="alice", role=Role.SUPERVISOR)
BOB = Principal(key_id=uuid.uuid4(), principal_id="bob", role=Role.SUPERVISOR)


def _run(settings: Settings, clock: ManualClock, scenario: Any) -> None:
    async def run() -> None:
        database = Database(create_engine(settings))
        await upgrade(database.engine)
        context = ServiceContext(database=database, settings=settings, clock=clock)
        try:
            await scenario(context)
        finally:
            await database.dispose()

    asyncio.run(run())


async def _escalated(context: ServiceContext) -> Task:
    outcome = await task_service.escalate(context, PRODUCER, escalation())
    assert outcome.task_id is not None
    async with context.database.transaction(write=False) as uow:
        task = await task_store.find_task(uow.connection, outcome.task_id)
    assert task is not None
    return task


def _again(task: Task, context: ServiceContext, **changes: Any) -> Escalation:
    """An escalation of ``task`` changed by ``changes``, under a fresh key."""
    now = context.now()
    return Escalation(
        task=replace(task, **changes),
        principal=PRODUCER,
        idempotency_key=f"key-{uuid.uuid4()}",
        fingerprint="f" * 64,
        response="{}",
        now=now,
        expires_at=now + timedelta(hours=1),
        details="{}",
        event_id=uuid.uuid4(),
        payload="{}",
    )


def _lease(context: ServiceContext, principal: Principal, token_hash: str) -> Lease:
    now = context.now()
    return Lease(
        principal=principal, token_hash=token_hash, now=now, expires_at=now + timedelta(minutes=5)
    )


def test_the_write_path_is_the_engines_own(
    engine: str, make_settings: Any, clock: ManualClock
) -> None:
    async def scenario(context: ServiceContext) -> None:
        writes = context.database.writes
        assert isinstance(writes, PostgresWrites if engine == "postgresql" else SqliteWrites)

    _run(make_settings(), clock, scenario)


def test_a_refused_escalation_names_the_task_that_refused_it(
    engine: str, make_settings: Any, clock: ManualClock
) -> None:
    async def scenario(context: ServiceContext) -> None:
        writes = context.database.writes
        first = await _escalated(context)
        expected = {"id": first.id, "producer_id": PRODUCER.principal_id}
        with pytest.raises(TaskRefused) as same_entity:
            await writes.escalate(_again(first, context, id=uuid.uuid4()))
        assert same_entity.value.looked
        assert dict(same_entity.value.refusing or {}) == expected | {"same_id": False}
        with pytest.raises(TaskRefused) as same_id:
            await writes.escalate(_again(first, context, entity_id=f"other-{uuid.uuid4()}"))
        assert dict(same_id.value.refusing or {}) == expected | {"same_id": True}
        async with context.database.transaction(write=False) as uow:
            keys = await uow.connection.exec_driver_sql("SELECT count(*) FROM idempotency_keys")
            assert keys.scalar_one() == 1  # each refusal took its key back

    _run(make_settings(), clock, scenario)


def test_refused_lease_changes_come_back_with_the_task_as_read(
    engine: str, make_settings: Any, clock: ManualClock
) -> None:
    async def scenario(context: ServiceContext) -> None:
        writes = context.database.writes
        task = await _escalated(context)
        missing = await writes.claim(_lease(context, ALICE, "a" * 64), uuid.uuid4(), limit=5)
        assert missing == Refusal(None)
        claimed = await writes.claim(_lease(context, ALICE, "a" * 64), task.id, limit=5)
        assert isinstance(claimed, Task)
        assert (claimed.status, claimed.claimed_by) == (TaskStatus.CLAIMED, "alice")
        taken = await writes.claim(_lease(context, BOB, "b" * 64), task.id, limit=5)
        assert isinstance(taken, Refusal)
        assert taken.current is not None
        assert taken.current.claimed_by == "alice"
        lost = await writes.renew(_lease(context, ALICE, "c" * 64), task.id, limit=10)
        assert isinstance(lost, Refusal)
        assert lost.current == claimed
        other = await _escalated(context)
        over = await writes.claim(_lease(context, ALICE, "d" * 64), other.id, limit=1)
        assert over == OverLimit(1)
        assert await writes.claim_next(
            _lease(context, ALICE, "e" * 64), limit=1, entity_type=None, reason_code=None
        ) == OverLimit(1)
        released = await writes.release(_lease(context, ALICE, "a" * 64), task.id)
        assert isinstance(released, Task)
        assert released.claimed_by is None

    _run(make_settings(), clock, scenario)


def test_sqlite_named_by_uri_escalates_through_the_general_path(tmp_path: Path) -> None:
    """A database named by a ``file:`` URI has no SQLite thread (it opens files by path):
    its write path leaves every escalation to the general transaction."""
    url = f"sqlite:///file:{tmp_path / 'uri.db'}?mode=rwc&uri=true"
    settings = Settings(database_url=url, encryption_keys=None)

    async def run() -> None:
        database = Database(create_engine(settings))
        await upgrade(database.engine)
        context = ServiceContext(database=database, settings=settings, clock=ManualClock())
        try:
            task = await _escalated(context)
            again = _again(task, context, id=uuid.uuid4(), entity_id=f"e-{uuid.uuid4()}")
            assert await database.writes.escalate(again) is None
            assert database._lite is None
        finally:
            await database.dispose()

    asyncio.run(run())
