"""Claims: the holder re-claiming gets a fresh lease; a limit on live leases per principal
(race-safe); and the outbox events of single-statement changes carry the task exactly as
the API shows it. Every test runs on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from datetime import UTC
from typing import Any

import httpx
import pytest

from tests.support import LiveServer, escalation, live_server

SUMMARY = {
    "recommendation": "REJECT",
    "rationale": "Counterparty country is on the watch list.",
    "risks": ["sanctions exposure"],
    "evidence_links": ["https://evidence.example/aml-04"],
    "generated_by": "risk-agent v2",
}


def _new_task(server: LiveServer, **extra: Any) -> str:
    with server.new_client("producer", "bot-1") as producer:
        response = producer.escalate(escalation(**extra))
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def test_the_holder_claiming_again_gets_a_fresh_token(server: LiveServer) -> None:
    task_id = _new_task(server)
    with server.new_client("reviewer", "alice") as alice:
        first = alice.claim(task_id).json()
        again = alice.claim(task_id)
        assert again.status_code == 200, again.text
        second = again.json()
        assert second["lease_token"] != first["lease_token"]
        assert (second["claimed_by"], second["version"]) == ("alice", first["version"] + 1)
        # The old token stops working; the new one works.
        lost = alice.renew(task_id, first["lease_token"])
        assert (lost.status_code, lost.json()["error_code"]) == (409, "ERR_LEASE_LOST")
        assert alice.resolve(task_id, second["lease_token"]).status_code == 200
        trail = [e["type"] for e in alice.get(f"/tasks/{task_id}/events").json()["items"]]
    assert trail == ["task.created", "task.claimed", "task.claimed", "task.resolved"]


def test_a_principal_holds_at_most_the_limit_of_live_leases(make_settings, clock) -> None:
    with live_server(make_settings(max_leases_per_principal=2), clock) as server:
        tasks = [_new_task(server) for _ in range(4)]
        with server.new_client("reviewer", "alice") as alice, server.new_client("reviewer") as bob:
            assert alice.claim(tasks[0]).status_code == 200
            taken = alice.post("/tasks/claim-next")
            assert taken.status_code == 200
            # (Tasks escalated at one instant come out of claim-next in id order.)
            free = [t for t in tasks[1:] if t != taken.json()["id"]]
            for refused in (alice.claim(free[0]), alice.post("/tasks/claim-next")):
                assert refused.status_code == 409
                problem = refused.json()
                assert problem["error_code"] == "ERR_CLAIM_LIMIT"
                assert problem["limit"] == 2
                assert "2" in problem["detail"]
            # Re-claiming one's own task is not a new lease; others are not limited by alice.
            assert alice.claim(tasks[0]).status_code == 200
            assert bob.claim(free[0]).status_code == 200
            # Lapsed leases do not count.
            clock.advance(server.settings.lease_seconds)
            assert alice.claim(free[1]).status_code == 200
            assert alice.post("/tasks/claim-next").status_code == 200


def _fire(server: LiveServer, key: str, paths: list[str]) -> list[httpx.Response]:
    async def run() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=len(paths), max_keepalive_connections=len(paths))
        async with httpx.AsyncClient(
            base_url=server.base_url,
            headers={"Authorization": f"Bearer {key}"},
            limits=limits,
            timeout=60,
        ) as client:
            return await asyncio.gather(*(client.post(path) for path in paths))

    return asyncio.run(run())


@pytest.mark.parametrize("how", ["claim", "claim-next"])
def test_fifty_concurrent_claims_by_one_principal_never_exceed_the_limit(
    make_settings, clock, how: str
) -> None:
    limit = 3
    with live_server(make_settings(max_leases_per_principal=limit), clock) as server:
        tasks = [_new_task(server) for _ in range(50)]
        with server.new_client("reviewer", "hoarder") as hoarder:
            paths = (
                [f"/tasks/{t}/claim" for t in tasks]
                if how == "claim"
                else ["/tasks/claim-next"] * 50
            )
            responses = _fire(server, str(hoarder.key), paths)
        statuses = Counter(r.status_code for r in responses)
        assert statuses == {200: limit, 409: 50 - limit}
        assert {r.json()["error_code"] for r in responses if r.status_code == 409} == {
            "ERR_CLAIM_LIMIT"
        }
        assert server.count("review_tasks", status="CLAIMED") == limit


def test_outbox_events_carry_the_task_as_the_api_shows_it(server: LiveServer) -> None:
    """The single-statement changes build the event's task in SQL on PostgreSQL: it must
    equal the API's representation (subject, approval, summary, lease fields included)."""
    with server.new_client("producer", "bot-1") as producer:
        created = producer.escalate(
            escalation(
                subject={"pay": "100 EUR to ACME"},
                source_revisions=["S01:r7"],
                summary=SUMMARY,
                approval_ttl_seconds=600,
                metadata={"ticket": "T-1", "attempt": 3},
            )
        )
    assert created.status_code == 201, created.text
    task_id = created.json()["id"]
    with server.new_client("supervisor", "sam") as sam:
        grant = sam.claim(task_id).json()
        token = grant.pop("lease_token")
        resolved = sam.resolve(
            task_id,
            token,
            {"decision": "APPROVED", "revision": 1, "digest": grant["digest"], "notes": "ok"},
        )
        assert resolved.status_code == 200, resolved.text
    events = {
        e["event_type"]: e["payload"]
        for e in server.rows("outbox_events", task_id=uuid.UUID(task_id))
    }
    # Events carry the producer's metadata, which a supervisor's responses do not show.
    metadata = {"metadata": {"ticket": "T-1", "attempt": 3}}
    assert events["task.claimed"]["data"] == grant | metadata
    assert events["task.resolved"]["data"] == resolved.json() | metadata
    assert events["task.resolved"]["data"]["approval_expires_at"] is not None
    assert events["task.claimed"]["type"] == "task.claimed"


def test_request_latency_is_measured_per_route(server: LiveServer) -> None:
    task_id = _new_task(server)
    with server.new_client("reviewer", "alice") as alice:
        assert alice.claim(task_id).status_code == 200
    with server.admin() as admin:
        metrics = admin.get("/metrics").text
    for route in ("/tasks/escalate", "/tasks/{task_id}/claim"):
        line = f'signoff_http_request_duration_seconds_count{{method="POST",route="{route}"}}'
        assert line in metrics
    assert task_id not in metrics  # ids never become labels


def test_renewing_lapsed_leases_counts_against_the_limit_as_claiming_does(
    make_settings, clock
) -> None:
    limit = 10
    with live_server(make_settings(max_leases_per_principal=limit), clock) as server:
        tasks = [_new_task(server) for _ in range(2 * limit)]
        with server.new_client("reviewer", "hoarder") as hoarder:
            tokens = {}
            for batch in (tasks[:limit], tasks[limit:]):
                for task_id in batch:
                    grant = hoarder.claim(task_id)
                    assert grant.status_code == 200, grant.text
                    tokens[task_id] = grant.json()["lease_token"]
                clock.advance(server.settings.lease_seconds)  # this batch lapses
            answers = [hoarder.renew(t, tokens[t]) for t in tasks]
            assert [a.status_code for a in answers] == [200] * limit + [409] * limit
            refused = answers[-1].json()
            assert (refused["error_code"], refused["limit"]) == ("ERR_CLAIM_LIMIT", limit)
            # A live lease renews whatever the count; a refused one is still the holder's
            # to renew once a lease is given back.
            assert hoarder.renew(tasks[0], tokens[tasks[0]]).status_code == 200
            assert hoarder.release(tasks[1], tokens[tasks[1]]).status_code == 200
            assert hoarder.renew(tasks[-1], tokens[tasks[-1]]).status_code == 200
        live = server.rows("review_tasks", status="CLAIMED", claimed_by="hoarder")
        now = clock.now()
        assert sum(1 for row in live if _aware(row["lease_expires_at"]) > now) == limit


def _aware(moment: Any) -> Any:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def test_concurrent_renewals_of_lapsed_leases_never_exceed_the_limit(make_settings, clock) -> None:
    limit = 3
    with live_server(make_settings(max_leases_per_principal=limit), clock) as server:
        tasks = [_new_task(server) for _ in range(12)]
        with server.new_client("reviewer", "hoarder") as hoarder:
            tokens = {}
            for start in range(0, 12, limit):
                for task_id in tasks[start : start + limit]:
                    tokens[task_id] = hoarder.claim(task_id).json()["lease_token"]
                clock.advance(server.settings.lease_seconds)

            async def renew_all() -> list[httpx.Response]:
                async with httpx.AsyncClient(
                    base_url=server.base_url,
                    headers={"Authorization": f"Bearer {hoarder.key}"},
                    limits=httpx.Limits(max_connections=12),
                    timeout=60,
                ) as client:
                    return await asyncio.gather(
                        *(
                            client.post(
                                f"/tasks/{t}/lease/renew", headers={"X-Lease-Token": tokens[t]}
                            )
                            for t in tasks
                        )
                    )

            responses = asyncio.run(renew_all())
        assert Counter(r.status_code for r in responses) == {200: limit, 409: 12 - limit}
        assert {r.json()["error_code"] for r in responses if r.status_code == 409} == {
            "ERR_CLAIM_LIMIT"
        }
