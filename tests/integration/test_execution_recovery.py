"""The SDK's executor recovers without waiting out execution leases: a lost grant is asked
again under the same operation, and an executor refused for another's lease learns that
one's outcome as soon as it is recorded (SQLite and PostgreSQL).

The execution lease keeps its default (300 s) and each test is bounded far below it: a
test that finishes has not waited a lease out."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from signoff.client import AlreadyExecuting, Signoff
from signoff.domain.clock import ManualClock
from tests.integration.test_sdk import approve, article, escalate
from tests.processes import wait_for
from tests.support import LiveServer

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def clock() -> ManualClock:
    """The server's clock starts at the real time: the SDK compares the lease's expiry
    with its own clock."""
    return ManualClock(datetime.now(UTC))


@pytest.fixture
def agent_key(server: LiveServer) -> str:
    key = server.new_client("producer").key
    assert key is not None
    return key


def approved_task(server: LiveServer, agent: Signoff) -> str:
    assert server.settings.execution_lease_seconds >= 300
    task = escalate(agent, f"story-{uuid.uuid4()}")
    with Signoff(server.base_url, str(server.new_client("reviewer").key), backoff=0) as editor:
        approve(editor, task.id)
    return task.id


def waiting(server: LiveServer) -> int:
    return int(server.app.state.context.database.changes.waiting)


def test_a_waiting_executor_learns_at_once_that_the_winner_completed(
    server: LiveServer, agent_key: str
) -> None:
    with Signoff(server.base_url, agent_key, backoff=0) as winner_client:
        task_id = approved_task(server, winner_client)
        order: list[str] = []
        outcome: dict[str, Any] = {}

        def loser() -> None:
            with Signoff(server.base_url, agent_key, backoff=0) as client:
                try:
                    with client.execution(task_id, subject=article(), operation_id="op-b"):
                        outcome["granted"] = True
                except AlreadyExecuting as refused:
                    order.append("loser told")
                    outcome["refused"] = refused

        with winner_client.execution(task_id, subject=article(), operation_id="op-a") as run:
            thread = threading.Thread(target=loser)
            thread.start()
            wait_for(lambda: waiting(server) >= 1, seconds=30, what="the loser to wait")
            assert order == []
            run.complete("publish", {"url": "https://example.org/a"})
            order.append("winner completed")
        thread.join(timeout=60)
        assert not thread.is_alive()

    assert order == ["winner completed", "loser told"]
    assert "granted" not in outcome
    assert outcome["refused"].problem.get("execution_status") == "COMPLETED"


def test_a_waiting_executor_takes_over_the_actions_the_winner_failed(
    server: LiveServer, agent_key: str
) -> None:
    with Signoff(server.base_url, agent_key, backoff=0) as winner_client:
        task_id = approved_task(server, winner_client)
        retried: list[list[str]] = []

        def loser() -> None:
            with (
                Signoff(server.base_url, agent_key, backoff=0) as client,
                client.execution(task_id, subject=article(), operation_id="op-b") as run,
            ):
                retried.append(run.pending)

        with (
            contextlib.suppress(RuntimeError),
            winner_client.execution(task_id, subject=article(), operation_id="op-a"),
        ):
            thread = threading.Thread(target=loser)
            thread.start()
            wait_for(lambda: waiting(server) >= 1, seconds=30, what="the loser to wait")
            raise RuntimeError("the side effect failed")
        thread.join(timeout=60)
        assert not thread.is_alive()
        assert retried == [["publish"]]
        assert winner_client.get_task(task_id).execution_status == "COMPLETED"


class DropFirstExecuteAnswer:
    """A TCP proxy in front of the server that forwards everything, except that the
    answer to the first ``POST …/execute`` is swallowed and its connection closed: the
    server granted, the client never heard."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.dropped = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._server: asyncio.Server | None = None

    def __enter__(self) -> DropFirstExecuteAnswer:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._client, "127.0.0.1", 0)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        drop = asyncio.Event()

        async def upward() -> None:
            while data := await reader.read(65536):
                if self.dropped == 0 and b"/execute HTTP/" in data and data.startswith(b"POST"):
                    self.dropped += 1
                    drop.set()
                up_writer.write(data)
                await up_writer.drain()

        async def downward() -> None:
            while data := await up_reader.read(65536):
                if drop.is_set():
                    writer.close()  # the grant is lost on the way back
                    return
                writer.write(data)
                await writer.drain()

        tasks = [asyncio.ensure_future(upward()), asyncio.ensure_future(downward())]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        for stream in (writer, up_writer):
            stream.close()


@pytest.fixture
def proxy(server: LiveServer) -> Iterator[DropFirstExecuteAnswer]:
    with DropFirstExecuteAnswer(server.port) as running:
        yield running


def test_the_sdk_recovers_a_lost_grant_well_within_the_lease(
    server: LiveServer, agent_key: str, proxy: DropFirstExecuteAnswer
) -> None:
    with Signoff(f"http://127.0.0.1:{proxy.port}", agent_key, backoff=0) as agent:
        task_id = approved_task(server, agent)
        with agent.execution(task_id, subject=article(), operation_id="op-1") as run:
            assert run.pending == ["publish"]
            run.complete("publish", {"url": "https://example.org/1"})
        assert proxy.dropped == 1
        task = agent.get_task(task_id)
    assert task.execution_status == "COMPLETED"
    types = [r["event_type"] for r in server.rows("task_events", task_id=uuid.UUID(task_id))]
    assert types.count("task.execution_started") == 2  # the lost grant, then its retry
    assert types.count("task.action_completed") == 1
