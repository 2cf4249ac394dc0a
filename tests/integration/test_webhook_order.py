"""Per-task webhook order holds with many dispatchers: a task's next event is never sent
while another dispatcher's fan-out of its previous event is still uncommitted."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from signoff.domain.clock import ManualClock
from signoff.services.context import ServiceContext
from signoff.settings import Settings
from signoff.store import deliveries
from signoff.store.runtime.database import Database, create_engine
from signoff.workers.dispatcher import Dispatcher
from tests.receiver import Receiver
from tests.support import ADMIN_KEY, LiveServer, escalation, live_server


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


def _register(server: LiveServer, url: str) -> None:
    with server.admin() as admin:
        response = admin.post("/webhook-endpoints", json={"url": url})
    assert response.status_code == 201, response.text


def _created_then_claimed(server: LiveServer) -> str:
    with server.new_client("producer") as producer, server.new_client("reviewer") as alice:
        task_id = str(producer.escalate(escalation()).json()["id"])
        server.clock.advance(1)
        assert alice.claim(task_id).status_code == 200
    return task_id


def _types(receiver: Receiver) -> list[str]:
    return [json.loads(r.body)["type"] for r in receiver.received]


def test_a_dispatcher_does_not_overtake_another_ones_uncommitted_fan_out(
    postgres_database: str, receiver: Receiver
) -> None:
    """Dispatcher A has fanned out ``task.created`` but not committed; dispatcher B runs a
    whole round meanwhile. B must neither fan out nor send ``task.claimed``; once A
    commits, the events arrive in order. (PostgreSQL only: SQLite serialises every write
    transaction, so B could not run while A's is open.)"""
    from tests.conftest import reset_postgres

    reset_postgres(postgres_database)
    settings = Settings(
        database_url=postgres_database,
        bootstrap_admin_key=ADMIN_KEY,
        run_workers=False,
        webhook_allow_private_networks=True,
        webhook_retry_jitter=0,
    )
    clock = ManualClock(datetime.now(UTC))
    with live_server(settings, clock) as server:
        _register(server, receiver.url)
        _created_then_claimed(server)

        async def interleave() -> tuple[int, int]:
            database = Database(create_engine(settings))
            context = ServiceContext(database=database, settings=settings, clock=clock)
            try:
                async with database.transaction() as a:  # dispatcher A, mid fan-out
                    taken = await deliveries.fan_out_outbox(a.connection, now=clock.now(), limit=1)
                    assert taken == 1
                    sent_by_b = await Dispatcher(context).run_once()
                    await a.commit()
                sent_after = 0
                for _ in range(10):  # bounded: two events, one round each
                    made = await Dispatcher(context).run_once()
                    sent_after += made
                    if not made:
                        break
                return sent_by_b, sent_after
            finally:
                await database.dispose()

        sent_by_b, sent_after = asyncio.run(interleave())
    assert sent_by_b == 0
    assert sent_after == 2
    assert _types(receiver) == ["task.created", "task.claimed"]


def test_a_round_fans_out_a_tasks_consecutive_events_together(
    make_settings, clock: ManualClock, receiver: Receiver
) -> None:
    """On both engines: the order rule costs no rounds when nothing is in flight — a
    round takes all of a task's waiting events, and they are sent in order."""
    settings = make_settings(
        run_workers=False, webhook_allow_private_networks=True, webhook_retry_jitter=0
    )
    with live_server(settings, clock) as server:
        _register(server, receiver.url)
        task_id = _created_then_claimed(server)

        async def fan_out() -> list[int]:
            database = Database(create_engine(settings))
            try:
                taken = []
                for _ in range(2):
                    async with database.transaction() as uow:
                        taken.append(
                            await deliveries.fan_out_outbox(
                                uow.connection, now=clock.now(), limit=10
                            )
                        )
                        await uow.commit()
                return taken
            finally:
                await database.dispose()

        assert asyncio.run(fan_out()) == [2, 0]
        versions = sorted(
            (row["task_version"], str(row["task_id"])) for row in server.rows("webhook_deliveries")
        )
        assert versions == [(1, task_id), (2, task_id)]
        for _ in range(3):
            _dispatch_once(settings, clock)
    assert _types(receiver) == ["task.created", "task.claimed"]


def _dispatch_once(settings: Settings, clock: ManualClock) -> int:
    async def once() -> int:
        database = Database(create_engine(settings))
        try:
            context = ServiceContext(database=database, settings=settings, clock=clock)
            return await Dispatcher(context).run_once()
        finally:
            await database.dispose()

    return asyncio.run(once())


def test_every_event_of_a_task_carries_a_version_of_its_own(server: LiveServer) -> None:
    """Order is by task version, so no two events of a task may share one: revoking a
    source (a change kept outside the task's row) gives the task a new version too."""
    with server.new_client("producer") as producer, server.new_client("reviewer") as editor:
        body = escalation(
            subject={"title": "t", "body": "b", "actions": [{"id": "publish"}]},
            source_revisions=["S01:r7", "S02:r2"],
        )
        created = producer.escalate(body)
        assert created.status_code == 201, created.text
        task_id = created.json()["id"]
        token = editor.claim(task_id).json()["lease_token"]
        task = editor.get(f"/tasks/{task_id}").json()
        decided = editor.resolve(
            task_id,
            token,
            {
                "decision": "APPROVED",
                "revision": task["current_revision"],
                "digest": task["digest"],
            },
        )
        assert decided.status_code == 200, decided.text
        revoked = producer.post(f"/tasks/{task_id}/sources/S02/revoke")
        assert revoked.status_code == 200, revoked.text
        after = producer.get(f"/tasks/{task_id}").json()
    events = sorted(
        (row["task_version"], row["event_type"])
        for row in server.rows("outbox_events")
        if str(row["task_id"]) == task_id
    )
    versions = [version for version, _ in events]
    assert len(set(versions)) == len(versions), events
    assert events[-1] == (after["version"], "task.source_revoked")
