"""LISTEN outlives a PostgreSQL restart: the dispatcher listens again (with backoff, and
says so in its log), so an idle dispatcher is still woken by new events instead of
falling back to its poll for good. Runs on a cluster of the test's own."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import httpx
import pytest

from signoff.domain.clock import ManualClock
from signoff.settings import Settings
from signoff.store.runtime.listen import Listener
from signoff.workers.dispatcher import NOTIFY_CHANNEL
from tests.conftest import TEST_ENCRYPTION_KEY
from tests.pgcluster import Cluster
from tests.processes import wait_for, worker
from tests.receiver import Receiver
from tests.support import ADMIN_KEY, escalation, live_server

pytestmark = pytest.mark.slow


def _escalate_until_accepted(base_url: str, key: str) -> str:
    """Escalate, retrying the same body while the service answers 503 (its pooled
    connections died with the database)."""
    body = escalation()
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}) as client:
        for _ in range(100):
            response = client.post("/tasks/escalate", json=body)
            if response.status_code != 503:
                break
        assert response.status_code == 201, response.text
    return str(response.json()["id"])


def test_an_idle_dispatcher_is_woken_again_after_postgresql_restarts(
    own_postgres: Cluster, own_postgres_database: str, tmp_path: Path
) -> None:
    settings = Settings(
        database_url=own_postgres_database,
        bootstrap_admin_key=ADMIN_KEY,
        run_workers=False,
        webhook_allow_private_networks=True,
        encryption_keys=TEST_ENCRYPTION_KEY,
    )
    env = {
        "SIGNOFF_DATABASE_URL": own_postgres_database,
        "SIGNOFF_ENCRYPTION_KEYS": TEST_ENCRYPTION_KEY,
        "SIGNOFF_WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
        # Only a notification can wake it within the waits below.
        "SIGNOFF_DISPATCHER_POLL_SECONDS": "120",
        "SIGNOFF_SWEEP_INTERVAL_SECONDS": "120",
    }
    with (
        Receiver() as receiver,
        live_server(settings, ManualClock(datetime.now(UTC))) as server,
        worker(env, tmp_path / "worker.log") as dispatcher,
    ):
        with server.admin() as admin:
            created = admin.post(
                "/webhook-endpoints", json={"url": receiver.url, "event_types": ["task.created"]}
            )
            assert created.status_code == 201, created.text
        producer = server.new_client("producer")
        assert producer.key is not None
        events = dispatcher.events
        wait_for(lambda: any(e["event"] == "listen.started" for e in events()), what="LISTEN")
        first = _escalate_until_accepted(server.base_url, producer.key)
        wait_for(lambda: len(receiver.received) == 1, what="the first delivery")

        own_postgres.stop("fast")
        own_postgres.start()
        wait_for(lambda: any(e["event"] == "listen.restored" for e in events()), what="LISTEN")
        second = _escalate_until_accepted(server.base_url, producer.key)
        wait_for(lambda: len(receiver.received) == 2, what="the delivery after the restart")
        producer.close()
    delivered = [json.loads(r.body)["data"]["id"] for r in receiver.received]
    assert delivered == [first, second]
    lost = [e for e in dispatcher.events() if e["event"] == "listen.lost"]
    assert lost
    assert lost[0]["level"] == "warning"


def test_a_listener_listens_again_once_the_database_is_back(own_postgres: Cluster) -> None:
    """The listener itself: the connection closes with the server, attempts fail while it
    is down (with growing waits), and the channel is listened to again afterwards."""
    if not own_postgres.running():
        own_postgres.start()
    dsn = own_postgres.url()

    async def scenario() -> int:
        woken = asyncio.Event()
        listener = Listener(
            dsn, NOTIFY_CHANNEL, woken.set, retry_initial_seconds=0.05, retry_max_seconds=0.5
        )
        stop = asyncio.Event()
        running = asyncio.create_task(listener.run(stop))
        try:
            await asyncio.wait_for(listener.listening.wait(), timeout=30)
            await _notify_and_expect(dsn, woken)
            await asyncio.to_thread(own_postgres.stop, "fast")
            for _ in range(600):  # bounded: the loss is noticed as the server closes it
                if not listener.listening.is_set():
                    break
                await asyncio.sleep(0.05)
            assert not listener.listening.is_set()
            await asyncio.to_thread(own_postgres.start)
            await asyncio.wait_for(listener.listening.wait(), timeout=30)
            await _notify_and_expect(dsn, woken)
            return listener.sessions
        finally:
            stop.set()
            await asyncio.wait_for(running, timeout=30)

    assert asyncio.run(scenario()) == 2


async def _notify_and_expect(dsn: str, woken: asyncio.Event) -> None:
    woken.clear()
    connection = await asyncpg.connect(dsn)
    try:
        await connection.execute(f"NOTIFY {NOTIFY_CHANNEL}, '{uuid.uuid4()}'")
    finally:
        await connection.close()
    await asyncio.wait_for(woken.wait(), timeout=30)
