"""Batch claims take at most the batch asked for (store/batch.py): due webhook
deliveries, due e-mail notifications and lapsed execution leases, on both engines.

On PostgreSQL, ``UPDATE … WHERE id IN (SELECT … LIMIT n FOR UPDATE SKIP LOCKED)`` was
planned as a nested-loop semi join that re-ran the subquery per row and so leased every
due row: a dispatcher asked for 10 deliveries got 100."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import insert, update

from signoff.domain.states import Action, transition
from signoff.services.context import ServiceContext
from signoff.store import approvals as approval_store
from signoff.store import deliveries
from signoff.store import waiting as waiting_store
from signoff.store.runtime.database import Database, create_engine
from signoff.store.tables import notifications, review_tasks
from tests.support import LiveServer, escalation, live_server

TASKS = 30
BATCH = 7


@pytest.fixture
def quiet(make_settings, clock) -> Any:  # type: ignore[no-untyped-def]
    """A server whose workers do not run (nothing claims but the test)."""
    settings = make_settings(run_workers=False, webhook_allow_private_networks=True)
    with live_server(settings, clock) as live:
        yield live


def _tasks(server: LiveServer) -> list[str]:
    with server.new_client("producer", "bot-batch") as producer:
        ids = []
        for _ in range(TASKS):
            created = producer.escalate(escalation())
            assert created.status_code == 201, created.text
            ids.append(created.json()["id"])
    return ids


def _in_context(server: LiveServer, work: Callable[[ServiceContext], Awaitable[Any]]) -> Any:
    async def run() -> Any:
        database = Database(create_engine(server.settings))
        context = ServiceContext(database=database, settings=server.settings, clock=server.clock)
        try:
            return await work(context)
        finally:
            await database.dispose()

    return asyncio.run(run())


def _batches(claim: Callable[[Any], Awaitable[list[Any]]], key: Callable[[Any], Any]) -> Any:
    async def run(context: ServiceContext) -> list[list[Any]]:
        taken: list[list[Any]] = []
        while True:
            async with context.database.transaction() as uow:
                batch = await claim(uow.connection)
                await uow.commit()
            if not batch:
                return taken
            taken.append([key(item) for item in batch])

    return run


def _assert_batches(taken: list[list[Any]]) -> None:
    sizes = [len(batch) for batch in taken]
    assert sizes == [BATCH] * (TASKS // BATCH) + [TASKS % BATCH], sizes
    every = [item for batch in taken for item in batch]
    assert len(set(every)) == TASKS  # each taken once


def test_deliveries_are_leased_in_batches_of_the_size_asked(quiet: LiveServer) -> None:
    with quiet.admin() as admin:
        endpoint = admin.post(
            "/webhook-endpoints",
            json={"url": "http://127.0.0.1:9/hook", "event_types": ["task.created"]},
        )
        assert endpoint.status_code == 201, endpoint.text
    _tasks(quiet)
    now = quiet.clock.now()

    async def fan_out(context: ServiceContext) -> None:
        async with context.database.transaction() as uow:
            assert await deliveries.fan_out_outbox(uow.connection, now=now, limit=100) == TASKS
            await uow.commit()

    _in_context(quiet, fan_out)
    claim = _batches(
        lambda conn: deliveries.claim_due_deliveries(
            conn, owner="test", now=now, leased_until=now + timedelta(seconds=60), limit=BATCH
        ),
        lambda delivery: delivery.id,
    )
    _assert_batches(_in_context(quiet, claim))


def test_notifications_are_leased_in_batches_of_the_size_asked(quiet: LiveServer) -> None:
    task_ids = _tasks(quiet)
    now = quiet.clock.now()

    async def queue(context: ServiceContext) -> None:
        async with context.database.transaction() as uow:
            for task_id in task_ids:
                await uow.connection.execute(
                    insert(notifications).values(
                        id=uuid.uuid4(),
                        task_id=uuid.UUID(task_id),
                        kind="review_requested",
                        principal_id="someone",
                        email="someone@example.org",
                        subject="s",
                        body="b",
                        status="PENDING",
                        attempts=0,
                        next_attempt_at=now,
                        created_at=now,
                    )
                )
            await uow.commit()

    _in_context(quiet, queue)
    claim = _batches(
        lambda conn: waiting_store.claim_due_notifications(
            conn, now=now, leased_until=now + timedelta(seconds=60), limit=BATCH
        ),
        lambda row: row["id"],
    )
    _assert_batches(_in_context(quiet, claim))


def test_lapsed_executions_are_marked_in_batches_of_the_size_asked(quiet: LiveServer) -> None:
    task_ids = [uuid.UUID(t) for t in _tasks(quiet)]
    now = quiet.clock.now()
    step = transition(Action.EXECUTION_STALLED)

    async def lapse(context: ServiceContext) -> None:
        async with context.database.transaction() as uow:
            await uow.connection.execute(
                update(review_tasks)
                .where(review_tasks.c.id.in_(task_ids))
                .values(
                    status=next(iter(step.sources)).value,
                    execution_token_hash="x" * 64,
                    execution_lease_expires_at=now - timedelta(seconds=1),
                )
            )
            await uow.commit()

    _in_context(quiet, lapse)
    claim = _batches(
        lambda conn: approval_store.mark_stalled_executions(conn, step, now=now, limit=BATCH),
        lambda task: task.id,
    )
    _assert_batches(_in_context(quiet, claim))
