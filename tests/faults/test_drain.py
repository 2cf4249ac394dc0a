"""SIGTERM drains: requests in flight are answered (2xx), the attempt in flight is
delivered and recorded, and the process shuts down cleanly.
Nothing acknowledged is lost and every audited change is delivered in per-task order
once the service runs again."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg
import httpx
import pytest

from tests.faults.harness import Ledger, audit, read_database, service_env, setup_service
from tests.processes import Server, wait_for
from tests.receiver import Answer, Receiver
from tests.support import escalation

pytestmark = pytest.mark.slow

IN_FLIGHT = 6


@contextmanager
def table_locked(database_url: str, table: str) -> Iterator[None]:
    """``LOCK TABLE … IN SHARE MODE`` held by another session: writes to ``table`` wait
    (so requests stay in flight for as long as the test wants), reads do not."""
    locked, release = threading.Event(), threading.Event()

    async def hold() -> None:
        connection = await asyncpg.connect(database_url)
        try:
            async with connection.transaction():
                await connection.execute(f"LOCK TABLE {table} IN SHARE MODE")
                locked.set()
                await asyncio.to_thread(release.wait, 120)
        finally:
            await connection.close()

    holder = threading.Thread(target=lambda: asyncio.run(hold()), daemon=True)
    holder.start()
    assert locked.wait(30), "could not lock the table"
    try:
        yield
    finally:
        release.set()
        holder.join(timeout=30)


def _waiting_on_locks(database_url: str) -> int:
    async def count() -> int:
        connection = await asyncpg.connect(database_url)
        try:
            return int(
                await connection.fetchval(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            )
        finally:
            await connection.close()

    return asyncio.run(count())


def test_sigterm_answers_the_requests_in_flight_and_drains_the_dispatcher(
    postgres_database: str, tmp_path: Path
) -> None:
    from tests.conftest import reset_postgres

    reset_postgres(postgres_database)
    url = postgres_database
    answer_held = threading.Event()
    ledger = Ledger()
    with Receiver() as receiver:
        # The held attempt must outlast the stop: a long attempt timeout. Each escalation
        # is its own statement (no group commit), so each request in flight shows as one
        # session waiting on the lock: that is how the test knows all are in flight.
        env = service_env(
            url, SIGNOFF_WEBHOOK_TIMEOUT_SECONDS="60", SIGNOFF_ESCALATION_GROUP_SIZE="1"
        )
        server = Server(env, tmp_path / "serve.log")
        with server:
            keys = setup_service(server.base_url, receiver)
            producer = httpx.Client(
                base_url=server.base_url,
                headers={"Authorization": f"Bearer {keys['bot']}"},
                timeout=60,
            )
            first = escalation()
            receiver.answer(Answer(200, hold=answer_held))  # its task.created stays in flight
            created = producer.post("/tasks/escalate", json=first)
            assert created.status_code == 201, created.text
            ledger.tasks[created.json()["id"]] = first
            wait_for(lambda: len(receiver.received) == 1, what="the attempt in flight")

            bodies = [escalation() for _ in range(IN_FLIGHT)]
            answers: dict[int, httpx.Response] = {}

            def send(index: int) -> None:
                with httpx.Client(
                    base_url=server.base_url,
                    headers={"Authorization": f"Bearer {keys['bot']}"},
                    timeout=60,
                ) as client:
                    answers[index] = client.post("/tasks/escalate", json=bodies[index])

            senders = [threading.Thread(target=send, args=(i,)) for i in range(IN_FLIGHT)]
            with table_locked(url, "review_tasks"):
                for sender in senders:
                    sender.start()
                wait_for(lambda: _waiting_on_locks(url) >= IN_FLIGHT, what="requests in flight")
                assert server.process is not None
                server.process.send_signal(signal.SIGTERM)
                wait_for(lambda: "Waiting for connections to close" in server.log.read_text())
            for sender in senders:
                sender.join(timeout=60)
            answer_held.set()
            # uvicorn re-raises SIGTERM once it has shut down cleanly.
            assert server.process.wait(timeout=60) in (0, -signal.SIGTERM)
            assert "Application shutdown complete" in server.log.read_text()
            producer.close()
        first_id = created.json()["id"]
        (delivery,) = [
            d for d in read_database(url)["webhook_deliveries"] if str(d["task_id"]) == first_id
        ]
        assert (delivery["status"], delivery["attempt_count"]) == ("SUCCEEDED", 1)
        for index, body in enumerate(bodies):
            assert answers[index].status_code == 201, answers[index].text
            ledger.tasks[answers[index].json()["id"]] = body
        with Server(env, tmp_path / "serve-again.log", port=server.port):
            counts = audit(url, ledger, receiver)
    assert counts["acknowledged_tasks"] == IN_FLIGHT + 1
