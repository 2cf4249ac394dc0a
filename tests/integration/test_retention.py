"""Retention: the sweeper removes old delivered webhooks (deliveries, their attempts, and
outbox events left without a delivery) in batches, and keeps what is recent, what is not
yet delivered, dead letters for longer, and the audit trail always."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from signoff.domain.clock import ManualClock
from signoff.services.context import ServiceContext
from signoff.store.runtime.database import open_database
from signoff.workers.sweeper import Sweeper
from tests.integration.test_webhooks import dispatch, register, resolved_task
from tests.pgcluster import free_port
from tests.receiver import Receiver
from tests.support import LiveServer, escalation, live_server

DAY = 86400


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


def _server(make_settings, clock: ManualClock, **overrides: object):  # type: ignore[no-untyped-def]
    settings = make_settings(
        run_workers=False,
        webhook_allow_private_networks=True,
        webhook_retry_jitter=0,
        webhook_retry_schedule="0",  # one failed attempt dead-letters a delivery
        retention_batch_size=2,  # several batches in one sweep
        **overrides,
    )
    return live_server(settings, clock)


def sweep(server: LiveServer) -> None:
    async def run() -> None:
        database = open_database(server.settings)
        try:
            context = ServiceContext(
                database=database, settings=server.settings, clock=server.clock
            )
            await Sweeper(context).sweep_once()
        finally:
            await database.dispose()

    asyncio.run(run())


def dispatch_all(server: LiveServer) -> None:
    while dispatch(server):
        pass


def test_old_delivered_webhooks_go_recent_undelivered_and_audit_stay(
    make_settings, clock: ManualClock, receiver: Receiver
) -> None:
    with _server(make_settings, clock) as server:
        register(server, receiver.url)  # every event type
        register(server, f"http://127.0.0.1:{free_port()}", event_types=["task.resolved"])
        old_task = uuid.UUID(resolved_task(server))  # created, claimed, resolved
        dispatch_all(server)
        assert server.count("webhook_deliveries", status="SUCCEEDED") == 3
        assert server.count("webhook_deliveries", status="DEAD") == 1  # nobody listens
        with server.new_client("producer", "bot") as producer:
            waiting = uuid.UUID(producer.escalate(escalation()).json()["id"])  # not dispatched yet
        audit = server.count("task_events")
        assert audit == 4
        assert server.count("delivery_attempts") == 4

        clock.advance(8 * DAY)
        sweep(server)
        # The old successes and their attempts are gone; the dead letter is kept for
        # 30 days, with its event; the event not yet fanned out stays.
        assert server.count("webhook_deliveries", status="SUCCEEDED") == 0
        assert server.count("webhook_deliveries", status="DEAD") == 1
        assert server.count("delivery_attempts") == 1
        kept = {(e["task_id"], e["event_type"]) for e in server.rows("outbox_events")}
        assert {e for e in kept if e[0] == old_task} == {(old_task, "task.resolved")}
        assert (waiting, "task.created") in kept
        assert server.count("task_events") >= audit  # (the sweeper escalated `waiting`)

        # The waiting event is still delivered, after the sweep, and kept while recent.
        (created,) = server.rows("outbox_events", task_id=waiting, event_type="task.created")
        dispatch_all(server)
        assert str(created["id"]) in {r.headers["webhook-id"] for r in receiver.received}
        recent = uuid.UUID(resolved_task(server))
        dispatch_all(server)
        sweep(server)
        assert server.count("webhook_deliveries", task_id=recent, status="SUCCEEDED") == 3
        assert server.count("webhook_deliveries", event_id=created["id"]) == 1  # delivered now
        assert server.count("outbox_events", task_id=recent) == 3

        clock.advance(23 * DAY)  # 31 days after the first task
        sweep(server)
        assert server.count("webhook_deliveries", task_id=old_task) == 0  # the dead letter
        assert server.count("webhook_deliveries", task_id=recent, status="DEAD") == 1
        assert server.count("outbox_events", task_id=old_task) == 0
        assert server.count("outbox_events", task_id=waiting, event_type="task.created") == 0
        # 23 days old: delivered ones gone, the one with a dead letter (30 days) kept.
        assert server.count("outbox_events", task_id=recent) == 1
        assert server.count("outbox_events", task_id=recent, event_type="task.resolved") == 1
        assert server.count("task_events", task_id=old_task) == 3  # the audit trail stays
        with server.new_client("reviewer", "carol") as reader:
            events = reader.get(f"/tasks/{old_task}/events")
        assert events.status_code == 200, events.text
        assert [e["type"] for e in events.json()["items"]] == [
            "task.created",
            "task.claimed",
            "task.resolved",
        ]


def test_zero_days_keeps_everything(make_settings, clock: ManualClock, receiver: Receiver) -> None:
    with _server(
        make_settings, clock, delivered_retention_days=0, failed_retention_days=0
    ) as server:
        register(server, receiver.url)
        register(server, f"http://127.0.0.1:{free_port()}", event_types=["task.resolved"])
        resolved_task(server)
        dispatch_all(server)
        clock.advance(1000 * DAY)
        sweep(server)
        assert server.count("webhook_deliveries") == 4
        assert server.count("outbox_events") == 3
        assert server.count("delivery_attempts") == 4
