"""The producer's side: correlation metadata, trace context, long-poll waiting."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from signoff.domain.clock import ManualClock
from tests.integration.test_webhooks import dispatch, register
from tests.receiver import Receiver
from tests.support import ADMIN_KEY, Client, LiveServer, escalation, live_server

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def producer(server: LiveServer):  # type: ignore[no-untyped-def]
    with server.new_client("producer", "agent-1") as client:
        yield client


@pytest.fixture
def alice(server: LiveServer):  # type: ignore[no-untyped-def]
    with server.new_client("reviewer", "alice") as client:
        yield client


def new_task(producer: Client, **extra: Any) -> dict[str, Any]:
    response = producer.escalate(escalation(**extra))
    assert response.status_code == 201, response.text
    return dict(response.json())


# -- metadata ---------------------------------------------------------------------------


def test_metadata_is_returned_to_its_producer_and_admins_only(server, producer, alice) -> None:
    metadata = {"thread_id": "thread-42", "node": "publish"}
    task = new_task(producer, metadata=metadata)
    assert task["metadata"] == metadata
    assert producer.get(f"/tasks/{task['id']}").json()["metadata"] == metadata
    with server.admin() as admin:
        assert admin.get(f"/tasks/{task['id']}").json()["metadata"] == metadata
    seen_by_reviewer = alice.get(f"/tasks/{task['id']}").json()
    assert "metadata" not in seen_by_reviewer
    assert "traceparent" not in seen_by_reviewer
    assert all("metadata" not in t for t in alice.get("/tasks").json()["items"])
    assert "metadata" not in alice.claim(task["id"]).json()
    assert new_task(producer)["metadata"] is None


def test_every_event_about_the_task_carries_its_metadata(server, producer, alice) -> None:
    task = new_task(producer, metadata={"thread_id": "t-1"})
    token = alice.claim(task["id"]).json()["lease_token"]
    assert alice.resolve(task["id"], token).status_code == 200
    events = server.rows("outbox_events", task_id=task_id_of(task))
    assert {e["event_type"] for e in events} == {"task.created", "task.claimed", "task.resolved"}
    assert all(e["payload"]["data"]["metadata"] == {"thread_id": "t-1"} for e in events)


def task_id_of(task: dict[str, Any]) -> Any:
    import uuid

    return uuid.UUID(task["id"])


@pytest.mark.parametrize("metadata", ["thread-1", ["a"], 7, {"blob": "x" * (16 * 1024)}], ids=str)
def test_metadata_must_be_a_small_object(server, producer, metadata) -> None:
    response = producer.escalate(escalation(metadata=metadata))
    assert response.status_code == 422, response.text
    assert response.json()["error_code"] == "ERR_VALIDATION"
    assert [e["field"] for e in response.json()["errors"]] == ["metadata"]
    assert server.count("review_tasks") == 0


def test_metadata_of_exactly_16_kib_is_accepted(producer) -> None:
    # {"b":"…"} is 8 bytes of JSON around the string.
    assert new_task(producer, metadata={"b": "x" * (16 * 1024 - 8)})["metadata"]


def test_unknown_top_level_fields_are_refused_by_name(server, producer) -> None:
    response = producer.escalate(escalation(thread_id="t-1", metdata={"x": 1}))
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error_code"] == "ERR_VALIDATION"
    assert sorted(e["field"] for e in body["errors"]) == ["metdata", "thread_id"]
    assert server.count("review_tasks") == 0
    # Fields the server sets keep their own answer.
    read_only = producer.escalate(escalation(status="RESOLVED"))
    assert read_only.json()["error_code"] == "ERR_READ_ONLY_FIELD"


# -- trace context ----------------------------------------------------------------------


def test_a_valid_traceparent_is_kept_and_an_invalid_one_ignored(server, producer, alice) -> None:
    body = escalation()
    task = producer.post("/tasks/escalate", json=body, headers={"traceparent": TRACEPARENT})
    assert task.json()["traceparent"] == TRACEPARENT
    shown = producer.get(f"/tasks/{task.json()['id']}").json()
    assert shown["traceparent"] == TRACEPARENT
    assert "traceparent" not in alice.get(f"/tasks/{task.json()['id']}").json()
    for invalid in (
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # zero parent id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # forbidden version
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # upper case
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        "not a trace",
    ):
        ignored = producer.post(
            "/tasks/escalate", json=escalation(), headers={"traceparent": invalid}
        )
        assert ignored.status_code == 201, (invalid, ignored.text)
        assert ignored.json()["traceparent"] is None, invalid


@pytest.fixture
def hooks(make_settings, clock: ManualClock) -> Iterator[LiveServer]:  # type: ignore[no-untyped-def]
    settings = make_settings(run_workers=False, webhook_allow_private_networks=True)
    with live_server(settings, clock) as live:
        yield live


def test_webhooks_about_the_task_carry_its_traceparent_and_metadata(hooks) -> None:
    with Receiver() as receiver:
        register(hooks, receiver.url)
        with (
            hooks.new_client("producer", "agent") as producer,
            hooks.new_client("reviewer", "bob") as bob,
        ):
            traced = producer.post(
                "/tasks/escalate",
                json=escalation(metadata={"thread_id": "t-9"}),
                headers={"traceparent": TRACEPARENT},
            ).json()
            plain = new_task(producer)
            token = bob.claim(traced["id"]).json()["lease_token"]
            assert bob.resolve(traced["id"], token).status_code == 200
        while dispatch(hooks):  # one event per task and round: they arrive in order
            pass
        assert len(receiver.received) == 4
        by_task: dict[str, list[Any]] = {}
        for request in receiver.received:
            data = json.loads(request.body)["data"]
            by_task.setdefault(data["id"], []).append((request.headers, data))
    assert len(by_task[traced["id"]]) == 3
    for headers, data in by_task[traced["id"]]:
        assert headers["traceparent"] == TRACEPARENT
        assert data["metadata"] == {"thread_id": "t-9"}
    ((headers, data),) = by_task[plain["id"]]
    assert "traceparent" not in headers
    assert data["metadata"] is None


# -- long-poll --------------------------------------------------------------------------


def test_a_change_wakes_a_waiter_with_the_new_version(server, producer, alice) -> None:
    task = new_task(producer)

    async def scenario() -> httpx.Response:
        # The client gives up long before the server's wait would end: only a wake-up
        # from the change can answer in time.
        async with httpx.AsyncClient(
            base_url=server.base_url,
            headers={"Authorization": f"Bearer {producer.key}"},
            timeout=30,
        ) as client:
            waiter = asyncio.create_task(
                client.get(f"/tasks/{task['id']}", params={"wait": 60, "after_version": 1})
            )
            await until(lambda: waiting(server) == 1)
            assert not waiter.done()
            await asyncio.to_thread(alice.claim, task["id"])
            return await waiter

    response = asyncio.run(scenario())
    assert response.status_code == 200
    assert response.json()["version"] == 2
    assert response.json()["status"] == "CLAIMED"


def test_a_waiter_answers_at_once_when_the_version_already_moved(producer, alice) -> None:
    task = new_task(producer)
    alice.claim(task["id"])
    response = producer.get(f"/tasks/{task['id']}", params={"wait": 60, "after_version": 1})
    assert response.json()["version"] == 2


def test_when_the_time_is_up_the_unchanged_task_is_returned(producer) -> None:
    task = new_task(producer)
    response = producer.get(f"/tasks/{task['id']}", params={"wait": 0.05, "after_version": 1})
    assert (response.status_code, response.json()["version"]) == (200, 1)


@pytest.mark.parametrize(
    "params",
    [{"wait": 0}, {"wait": 61}, {"wait": -1}, {"wait": "soon"}, {"after_version": 1}],
    ids=str,
)
def test_a_wait_outside_0_to_60_seconds_is_refused(producer, params) -> None:
    task = new_task(producer)
    response = producer.get(f"/tasks/{task['id']}", params=params)
    assert response.status_code == 422, response.text
    assert response.json()["error_code"] == "ERR_VALIDATION"


def test_a_waiter_never_learns_of_another_producers_task(server, producer) -> None:
    task = new_task(producer)
    with server.new_client("producer", "someone-else") as other:
        response = other.get(f"/tasks/{task['id']}", params={"wait": 1, "after_version": 1})
    assert response.status_code == 404


def test_a_thousand_idle_waiters_hold_no_database_connection(server, producer, alice) -> None:
    task = new_task(producer)
    engine = server.app.state.context.database.engine
    pool_size = engine.pool.size()

    # One key may park SIGNOFF_MAX_LONG_POLLS_PER_KEY (100) at once: the producer's 20
    # keys park 50 each.
    keys = [str(producer.key)] + [
        str(server.new_client("producer", producer.principal_id).key) for _ in range(19)
    ]

    async def scenario() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=1100, max_keepalive_connections=1100)
        async with httpx.AsyncClient(
            base_url=server.base_url, timeout=120, limits=limits
        ) as client:
            waiters = [
                asyncio.create_task(
                    client.get(
                        f"/tasks/{task['id']}",
                        params={"wait": 60, "after_version": 1},
                        headers={"Authorization": f"Bearer {keys[index % len(keys)]}"},
                    )
                )
                for index in range(1000)
            ]
            await until(lambda: waiting(server) == 1000, limit=90)
            # All parked: none holds a connection, and the service still answers.
            assert engine.pool.checkedout() == 0
            listing = await asyncio.to_thread(alice.get, "/tasks")
            assert listing.status_code == 200
            assert engine.pool.size() == pool_size
            await asyncio.to_thread(alice.claim, task["id"])
            return await asyncio.gather(*waiters)

    responses = asyncio.run(scenario())
    assert {r.status_code for r in responses} == {200}
    assert {r.json()["version"] for r in responses} == {2}
    assert waiting(server) == 0


def waiting(server: LiveServer) -> int:
    return int(server.app.state.context.database.changes.waiting)


async def until(condition: Any, limit: float = 20) -> None:
    """Wait for ``condition`` (a state of the server, not a point in time)."""
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        await asyncio.sleep(0.01)


def test_postgresql_wakes_a_waiter_for_a_change_made_by_another_process(
    postgres_database: str,
) -> None:
    import uuid
    from datetime import UTC, datetime

    from signoff.domain.states import Role
    from signoff.domain.tasks import Principal
    from signoff.services import tasks as task_service
    from signoff.services.context import ServiceContext
    from signoff.settings import Settings
    from signoff.store.runtime.database import Database, create_engine
    from tests.conftest import reset_postgres

    reset_postgres(postgres_database)
    settings = Settings(database_url=postgres_database, bootstrap_admin_key=ADMIN_KEY)
    clock = ManualClock(datetime.now(UTC))
    with live_server(settings, clock) as server, server.new_client("producer") as producer:
        task = new_task(producer)

        async def claim_elsewhere() -> None:
            # Its own engine and change signal: only LISTEN/NOTIFY reaches the server's.
            database = Database(create_engine(settings))
            try:
                context = ServiceContext(database=database, settings=settings, clock=clock)
                alice = Principal(key_id=uuid.uuid4(), principal_id="alice", role=Role.REVIEWER)
                await task_service.claim(context, alice, task["id"])
            finally:
                await database.dispose()

        async def scenario() -> httpx.Response:
            async with httpx.AsyncClient(
                base_url=server.base_url,
                headers={"Authorization": f"Bearer {producer.key}"},
                timeout=30,  # far less than the wait: only a wake-up answers in time
            ) as client:
                waiter = asyncio.create_task(
                    client.get(f"/tasks/{task['id']}", params={"wait": 60, "after_version": 1})
                )
                await until(lambda: waiting(server) == 1)
                await claim_elsewhere()
                return await waiter

        response = asyncio.run(scenario())
    assert (response.status_code, response.json()["version"]) == (200, 2)


@pytest.mark.parametrize("wake", ["change", "timeout"])
def test_a_long_poll_parked_before_its_key_was_revoked_answers_401(
    server: LiveServer, wake: str
) -> None:
    producer = server.new_client("producer", "bot")
    task = new_task(producer)
    with server.admin() as admin:
        created = admin.post("/api-keys", json={"role": "reviewer", "principal_id": "alice"})
    alice_key, alice_key_id = created.json()["key"], created.json()["id"]
    bob = server.new_client("reviewer", "bob")
    seconds = 60 if wake == "change" else 5

    async def scenario() -> httpx.Response:
        async with httpx.AsyncClient(
            base_url=server.base_url, headers={"Authorization": f"Bearer {alice_key}"}, timeout=90
        ) as alice:
            poll = asyncio.create_task(alice.get(f"/tasks/{task['id']}", params={"wait": seconds}))
            await until(lambda: waiting(server) == 1)
            async with httpx.AsyncClient(
                base_url=server.base_url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}
            ) as admin:
                revoked = await admin.delete(f"/api-keys/{alice_key_id}")
                assert revoked.status_code == 204
            if wake == "change":
                await asyncio.to_thread(bob.claim, task["id"])
            return await poll

    answer = asyncio.run(scenario())
    assert (answer.status_code, answer.json()["error_code"]) == (401, "ERR_UNAUTHENTICATED")
    assert "claimed_by" not in answer.text
