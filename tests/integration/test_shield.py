"""The Redis storm shield against a real Redis (database 1 of the local server): duplicate
escalations in flight are absorbed, and the database stays the final word when Redis is
down, flushed or stopped in the middle of a storm."""

from __future__ import annotations

import asyncio
import os
import random
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import httpx
import pytest
import redis

from tests.support import LiveServer, escalation, live_server

# One Redis database per test process (pytest-xdist names its workers gw0, gw1, …): the
# tests empty it, and two processes must not empty each other's.
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
REDIS_URL = os.environ.get("SIGNOFF_TEST_REDIS_URL", f"redis://127.0.0.1:6379/{1 + _WORKER % 15}")


@pytest.fixture(autouse=True)
def empty_redis() -> Iterator[None]:
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    yield
    client.flushdb()
    client.close()


def _fire(
    server: LiveServer, key: str, bodies: list[dict[str, Any]], *, connections: int = 32
) -> list[httpx.Response]:
    async def run() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        async with httpx.AsyncClient(
            base_url=server.base_url,
            headers={"Authorization": f"Bearer {key}"},
            limits=limits,
            timeout=60,
        ) as client:
            return await asyncio.gather(*(client.post("/tasks/escalate", json=b) for b in bodies))

    return asyncio.run(run())


def _shield_metric(server: LiveServer, result: str) -> float:
    with server.admin() as admin:
        text = admin.get("/metrics").text
    for line in text.splitlines():
        if line.startswith(f'signoff_storm_shield_total{{result="{result}"}}'):
            return float(line.split()[-1])
    return 0.0


def test_duplicates_in_flight_create_one_task_and_replay_it(make_settings, clock) -> None:
    with live_server(make_settings(redis_url=REDIS_URL), clock) as server:
        body = escalation()
        with server.new_client("producer", "bot-1") as producer:
            responses = _fire(server, str(producer.key), [body] * 30)
            later = producer.escalate(body)  # replayed from Redis
        assert {r.status_code for r in responses} <= {201, 409}
        created = [r for r in responses if r.status_code == 201]
        originals = [r for r in created if "Idempotent-Replayed" not in r.headers]
        assert len(originals) == 1
        assert all(r.content == originals[0].content for r in created)
        assert later.content == originals[0].content
        assert later.headers["Idempotent-Replayed"] == "true"
        assert server.count("review_tasks") == 1
        assert server.count("idempotency_keys") == 1
        assert _shield_metric(server, "replayed") >= 1


def test_a_storm_wider_than_the_redis_pool_keeps_the_shield_on(make_settings, clock) -> None:
    """More duplicates waiting at once than the process has Redis connections: the
    shield's calls wait for a connection instead of failing (which would turn the shield
    off), and every duplicate is still absorbed."""
    # A small pool (few connections to open on a busy test machine) and a storm many
    # times wider than it, and wider than the pool's default (100) too.
    settings = make_settings(
        redis_url=REDIS_URL, storm_shield_wait_seconds=5, storm_shield_connections=16
    )
    with live_server(settings, clock) as server:
        body = escalation()
        with server.new_client("producer", "bot-1") as producer:
            responses = _fire(server, str(producer.key), [body] * 240, connections=240)
        assert {r.status_code for r in responses} == {201}
        assert server.count("review_tasks") == 1
        assert _shield_metric(server, "redis_error") == 0
        assert _shield_metric(server, "replayed") >= 1


def test_new_keys_for_a_queued_entity_still_conflict(make_settings, clock) -> None:
    with live_server(make_settings(redis_url=REDIS_URL), clock) as server:
        bodies = [escalation("txn_contested") for _ in range(20)]
        with server.new_client("producer", "bot-1") as producer:
            responses = _fire(server, str(producer.key), bodies)
            # The same key with another body is still the database's to refuse.
            reused = producer.escalate(bodies[0] | {"reason_code": "OTHER"})
        assert Counter(r.status_code for r in responses) == {201: 1, 409: 19}
        assert server.count("review_tasks") == 1
        assert reused.status_code in (409, 422)


def test_a_dead_redis_changes_nothing(make_settings, clock) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"redis://127.0.0.1:{sock.getsockname()[1]}/1"  # nobody listens here
    with live_server(make_settings(redis_url=closed), clock) as server:
        body = escalation()
        with server.new_client("producer", "bot-1") as producer:
            responses = _fire(server, str(producer.key), [body] * 10)
            assert producer.escalate(escalation(body["entity_id"])).status_code == 409
        assert {r.status_code for r in responses} <= {201, 409}
        assert server.count("review_tasks") == 1
        assert _shield_metric(server, "redis_error") >= 1


class Proxy:
    """A TCP forwarder to Redis that can be cut (Redis stopping, as the service sees it)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.cut = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.cut.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with suppress(OSError):
                    s.close()

    def stop(self) -> None:
        self.cut.set()
        self.listener.close()
        for s in self.sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass


@contextmanager
def redis_proxy() -> Iterator[Proxy]:
    client = redis.Redis.from_url(REDIS_URL)
    host, port = client.connection_pool.connection_kwargs["host"], 6379
    client.close()
    proxy = Proxy((host, int(port)))
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.mark.parametrize("failure", ["flushed", "stopped"])
def test_a_storm_survives_redis_failing_midway(make_settings, clock, failure: str) -> None:
    with redis_proxy() as proxy:
        url = f"redis://127.0.0.1:{proxy.port}/{REDIS_URL.rpartition('/')[2]}"
        with live_server(make_settings(redis_url=url), clock) as server:
            rng = random.Random(7)
            fresh = [escalation() for _ in range(40)]
            with server.new_client("producer", "bot-1") as producer:
                key = str(producer.key)

                def storm(pool: list[dict[str, Any]]) -> list[httpx.Response]:
                    # 70 % new, 20 % replays, 10 % new keys for a queued entity.
                    bodies: list[dict[str, Any]] = []
                    for body in pool:
                        bodies.append(body)
                        roll = rng.random()
                        if roll < 0.3:
                            bodies.append(body)
                        elif roll < 0.45:
                            bodies.append(escalation(body["entity_id"]))
                    return _fire(server, key, bodies)

                first = storm(fresh[:20])
                if failure == "flushed":
                    redis.Redis.from_url(REDIS_URL).flushdb()
                else:
                    proxy.stop()
                second = storm(fresh[20:] + fresh[:10])  # replays of the first half too
            statuses = Counter(r.status_code for r in first + second)
            assert set(statuses) <= {201, 409}, statuses
            assert server.count("review_tasks") == 40
            assert server.count("idempotency_keys") == 40
            if failure == "stopped":
                assert _shield_metric(server, "redis_error") >= 1
