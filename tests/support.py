"""Test harness: a real Signoff HTTP server in a thread, on SQLite or PostgreSQL, with a
controllable clock, plus small helpers that read the database directly."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import json
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import structlog
import uvicorn
from sqlalchemy import func, select

from signoff.api.app import create_app
from signoff.bootstrap import prepare_database
from signoff.cli.server import proxy_options
from signoff.domain.clock import ManualClock
from signoff.domain.digests import canonical_json
from signoff.settings import Settings
from signoff.store.runtime.database import Database, create_engine
from signoff.store.tables import metadata

CONTRACT = Path(__file__).resolve().parents[1] / "src" / "signoff" / "domain" / "contract"
EXAMPLES = Path(__file__).resolve().parent / "data"
ADMIN_KEY = "test-admin-key-0123456789abcdef"


def example_escalation() -> dict[str, Any]:
    return json.loads((EXAMPLES / "example-escalation.json").read_text())


def example_resolve() -> dict[str, Any]:
    return json.loads((EXAMPLES / "example-resolve.json").read_text())


def precheck_hash(actions: Any) -> str:
    return hashlib.sha256(canonical_json(actions)).hexdigest()


def escalation(entity_id: str | None = None, **overrides: Any) -> dict[str, Any]:
    """A valid escalation for a fresh entity, with a unique id and idempotency key."""
    body = copy.deepcopy(example_escalation())
    body["escalation_id"] = str(uuid.uuid4())
    body["idempotency_key"] = f"idem-{uuid.uuid4().hex}"
    body["entity_id"] = entity_id if entity_id is not None else f"txn_{uuid.uuid4().hex[:12]}"
    body.update(overrides)
    body["precheck_hash"] = overrides.get(
        "precheck_hash", precheck_hash(body["diagnostic_bundle"]["attempted_actions"])
    )
    return body


class Client(httpx.Client):
    """An HTTP client bound to one API key."""

    def __init__(self, base_url: str, key: str | None, principal_id: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        super().__init__(base_url=base_url, headers=headers, timeout=30)
        self.key = key
        self.principal_id = principal_id

    def escalate(self, body: Any) -> httpx.Response:
        return self.post("/tasks/escalate", json=body)

    def claim(self, task_id: str, **body: Any) -> httpx.Response:
        return self.post(f"/tasks/{task_id}/claim", json=body or None)

    def renew(self, task_id: str, token: str | None) -> httpx.Response:
        return self.post(f"/tasks/{task_id}/lease/renew", headers=_lease(token))

    def release(self, task_id: str, token: str | None) -> httpx.Response:
        return self.post(f"/tasks/{task_id}/release", headers=_lease(token))

    def resolve(self, task_id: str, token: str | None, body: Any | None = None) -> httpx.Response:
        return self.post(
            f"/tasks/{task_id}/resolve",
            headers=_lease(token),
            json=body or example_resolve_for(self),
        )


def example_resolve_for(client: Client) -> dict[str, Any]:
    body = example_resolve()
    body["operator_id"] = client.principal_id
    return body


def _lease(token: str | None) -> dict[str, str]:
    return {"X-Lease-Token": token} if token else {}


class _PromptServer(uvicorn.Server):
    """uvicorn's server, stopped as soon as a test asks: :meth:`wake` ends its main loop at
    once (uvicorn looks at ``should_exit`` every 0.1 s), and its shutdown goes on as soon as
    the closed connections are gone (uvicorn pauses a fixed 0.1 s). Hundreds of tests each
    stop a server, so the two pauses added minutes to a run."""

    _wake: asyncio.Event | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    async def main_loop(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 1) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 0.1)
            should_exit = await self.on_tick(counter)

    def wake(self) -> None:
        """Stop (from another thread): ``should_exit``, seen at once."""
        self.should_exit = True
        if self._loop is not None and self._wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already ended
                self._loop.call_soon_threadsafe(self._wake.set)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # uvicorn's own shutdown, without its fixed pause after asking connections to close.
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        for _ in range(20):  # at most uvicorn's 0.1 s, while connections notice
            if not self.server_state.connections and not self.server_state.tasks:
                break
            await asyncio.sleep(0.005)
        try:
            async with asyncio.timeout(self.config.timeout_graceful_shutdown):
                await self._wait_tasks_to_complete()
        except TimeoutError:
            for task in self.server_state.tasks:
                task.cancel(msg="Task cancelled, timeout graceful shutdown exceeded")
        if not self.force_exit:
            await self.lifespan.shutdown()


class LiveServer:
    """Signoff served by uvicorn on a free loopback port, in a background thread."""

    def __init__(self, settings: Settings, clock: ManualClock) -> None:
        self.settings = settings
        self.clock = clock
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.app = create_app(settings, clock=clock)
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            lifespan="on",
            access_log=False,
            **proxy_options(settings),
        )
        self._server = _PromptServer(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("test server did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        self._server.wake()
        self._thread.join(timeout=20)
        self._sock.close()

    def run_in_server(self, work: Callable[[Any], Awaitable[Any]]) -> Any:
        """``work(context)`` with the server's own service context, on its event loop, as
        its background workers run: what it commits wakes the server's long-polls at once
        (on SQLite a commit from another engine reaches them only when their wait is up)."""
        loop = self._server._loop
        assert loop is not None, "the server has not started"
        context = self.app.state.context
        return asyncio.run_coroutine_threadsafe(work(context), loop).result(timeout=60)

    def running_requests(self) -> set[Any]:
        """The requests the server is working on now (uvicorn's tasks, one per request)."""
        return set(self._server.server_state.tasks)

    def client(self, key: str | None, principal_id: str | None = None) -> Client:
        return Client(self.base_url, key, principal_id)

    def admin(self) -> Client:
        return self.client(ADMIN_KEY, "admin")

    def new_client(self, role: str, principal_id: str | None = None) -> Client:
        principal_id = principal_id or f"{role}-{uuid.uuid4().hex[:8]}"
        with self.admin() as admin:
            response = admin.post("/api-keys", json={"role": role, "principal_id": principal_id})
        assert response.status_code == 201, response.text
        return self.client(response.json()["key"], principal_id)

    def count(self, table: str, **where: Any) -> int:
        return run(count_rows(self.settings, table, **where))

    def rows(self, table: str, **where: Any) -> list[dict[str, Any]]:
        return run(fetch_rows(self.settings, table, **where))


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


async def count_rows(settings: Settings, table: str, **where: Any) -> int:
    t = metadata.tables[table]
    database = Database(create_engine(settings))
    try:
        async with database.transaction(write=False) as uow:
            statement = select(func.count()).select_from(t)
            for column, value in where.items():
                statement = statement.where(t.c[column] == value)
            return int((await uow.connection.execute(statement)).scalar_one())
    finally:
        await database.dispose()


async def fetch_rows(settings: Settings, table: str, **where: Any) -> list[dict[str, Any]]:
    t = metadata.tables[table]
    database = Database(create_engine(settings))
    try:
        async with database.transaction(write=False) as uow:
            statement = select(t)
            for column, value in where.items():
                statement = statement.where(t.c[column] == value)
            return [dict(row._mapping) for row in await uow.connection.execute(statement)]
    finally:
        await database.dispose()


@contextmanager
def live_server(settings: Settings, clock: ManualClock | None = None) -> Iterator[LiveServer]:
    clock = clock or ManualClock()
    run(prepare_database(settings, clock=clock))
    server = LiveServer(settings, clock)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def logging_kept() -> Iterator[None]:
    """A command run in this process configures logging for its own streams (the captured
    ones, which close with the test): put the test run's logging back after it."""
    saved = structlog.get_config()
    try:
        yield
    finally:
        structlog.configure(**saved)
