"""Races through real HTTP: the database decides, exactly once."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import httpx

from tests.support import LiveServer, escalation, live_server

CONCURRENCY = 50


async def _fire(
    server: LiveServer, key: str, requests: list[tuple[str, str, Any]]
) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    async with httpx.AsyncClient(
        base_url=server.base_url,
        headers={"Authorization": f"Bearer {key}"},
        limits=limits,
        timeout=60,
    ) as client:
        return await asyncio.gather(
            *(client.request(m, url, json=body) for m, url, body in requests)
        )


def fire(
    server: LiveServer, key: str, requests: list[tuple[str, str, Any]]
) -> list[httpx.Response]:
    return asyncio.run(_fire(server, key, requests))


async def _fire_as(
    server: LiveServer, requests: list[tuple[str, str, str]]
) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    async with httpx.AsyncClient(base_url=server.base_url, limits=limits, timeout=60) as client:
        return await asyncio.gather(
            *(
                client.request(m, url, headers={"Authorization": f"Bearer {key}"})
                for key, m, url in requests
            )
        )


def fire_as(server: LiveServer, requests: list[tuple[str, str, str]]) -> list[httpx.Response]:
    """Each request with its own API key: ``(key, method, url)``."""
    return asyncio.run(_fire_as(server, requests))


def assert_one_original(responses: list[httpx.Response]) -> httpx.Response:
    """Concurrent escalations with one key: exactly one created the task, every other
    201 replays it byte for byte, and every 409 says the key is in use. Returns the
    original answer."""
    assert {r.status_code for r in responses} <= {201, 409}
    created = [r for r in responses if r.status_code == 201]
    originals = [r for r in created if "Idempotent-Replayed" not in r.headers]
    assert len(originals) == 1
    assert all(r.content == originals[0].content for r in created)
    in_use = [r for r in responses if r.status_code == 409]
    assert all(r.json()["error_code"] == "ERR_IDEMPOTENCY_KEY_IN_USE" for r in in_use)
    return originals[0]


def test_fifty_concurrent_claims_of_one_task_grant_exactly_one_lease(server: LiveServer) -> None:
    with server.new_client("producer") as producer:
        task_id = producer.escalate(escalation()).json()["id"]
    # Fifty different reviewers (the holder claiming again would get a fresh lease).
    keys = []
    for n in range(CONCURRENCY):
        with server.new_client("reviewer", f"racer-{n}") as reviewer:
            keys.append(str(reviewer.key))
    responses = fire_as(server, [(key, "POST", f"/tasks/{task_id}/claim") for key in keys])
    statuses = Counter(r.status_code for r in responses)
    assert statuses == {200: 1, 409: CONCURRENCY - 1}
    assert {r.json()["error_code"] for r in responses if r.status_code == 409} == {
        "ERR_STATE_CONFLICT"
    }
    assert server.count("task_events", event_type="task.claimed") == 1


def test_fifty_concurrent_escalations_of_one_entity_create_one_task(server: LiveServer) -> None:
    with server.new_client("producer") as producer:
        bodies = [escalation("txn_contested") for _ in range(CONCURRENCY)]
        responses = fire(
            server, str(producer.key), [("POST", "/tasks/escalate", b) for b in bodies]
        )
    statuses = Counter(r.status_code for r in responses)
    assert statuses == {201: 1, 409: CONCURRENCY - 1}
    winner = next(r.json()["id"] for r in responses if r.status_code == 201)
    assert {r.json()["task_id"] for r in responses if r.status_code == 409} == {winner}
    assert server.count("review_tasks") == 1
    assert server.count("idempotency_keys") == 1


def test_fifty_concurrent_escalations_with_one_key_create_one_task(server: LiveServer) -> None:
    body = escalation()
    with server.new_client("producer") as producer:
        responses = fire(
            server, str(producer.key), [("POST", "/tasks/escalate", body)] * CONCURRENCY
        )
    assert_one_original(responses)
    assert server.count("review_tasks") == 1
    assert server.count("task_events") == 1


def test_concurrent_claim_next_hands_each_task_to_one_reviewer(make_settings, clock) -> None:
    # One reviewer holds all twenty: the claim limit (tests/integration/test_claims.py)
    # is raised out of the way.
    with live_server(make_settings(max_leases_per_principal=50), clock) as server:
        with server.new_client("producer") as producer:
            for _ in range(20):
                producer.escalate(escalation())
        with server.new_client("reviewer") as reviewer:
            responses = fire(server, str(reviewer.key), [("POST", "/tasks/claim-next", None)] * 30)
    claimed = [r.json()["id"] for r in responses if r.status_code == 200]
    assert len(claimed) == 20
    assert len(set(claimed)) == 20
    assert sum(r.status_code == 204 for r in responses) == 10


def test_fifty_concurrent_takeovers_of_one_expired_key_create_one_task(
    server: LiveServer,
) -> None:
    """An expired key is taken over by exactly one of fifty concurrent escalations with
    the same new body: the others replay it or are told the key is in use."""
    first = escalation()
    with server.new_client("producer") as producer:
        assert producer.escalate(first).status_code == 201
        server.clock.advance(server.settings.idempotency_ttl_seconds)
        body = escalation(idempotency_key=first["idempotency_key"])
        responses = fire(
            server, str(producer.key), [("POST", "/tasks/escalate", body)] * CONCURRENCY
        )
    assert assert_one_original(responses).json()["id"] == body["escalation_id"]
    assert server.count("review_tasks") == 2
    assert server.count("idempotency_keys") == 1
    assert server.count("task_events", event_type="task.created") == 2
