"""A producer's time limit on an escalation: at it the sweeper rejects, expires or
escalates the task through the policy levels and the transition table; it never
approves. Time moves by the test clock (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from mcp import Client as McpClient
from mcp.client.stdio import StdioServerParameters

from signoff.client import Signoff
from signoff.domain.clock import ManualClock, rfc3339
from signoff.domain.policies import TIMEOUT_NOTES
from tests.integration.test_mcp import structured
from tests.integration.test_waiting import deliver, events, person, sweep
from tests.receiver import Receiver
from tests.support import Client, LiveServer, escalation, live_server


@pytest.fixture
def timed(make_settings, clock: ManualClock) -> Iterator[LiveServer]:  # type: ignore[no-untyped-def]
    settings = make_settings(
        run_workers=False, webhook_allow_private_networks=True, webhook_retry_jitter=0
    )
    with live_server(settings, clock) as server:
        yield server


@pytest.fixture
def producer(timed: LiveServer) -> Iterator[Client]:
    with timed.new_client("producer", "agent-7") as client:
        yield client


def escalate(producer: Client, **timeout: Any) -> dict[str, Any]:
    response = producer.escalate(escalation(timeout=timeout))
    assert response.status_code == 201, response.text
    return dict(response.json())


def test_a_producer_timeout_rejects_the_task_when_it_runs_out(
    timed: LiveServer, producer: Client
) -> None:
    server = timed
    alice = person(server, "reviewer", "alice", [])
    with server.admin() as admin, Receiver() as hook:
        admin.post("/webhook-endpoints", json={"url": hook.url, "event_types": ["task.resolved"]})
        task = escalate(producer, after_seconds=600, outcome="reject")
        limit = server.clock.now() + timedelta(seconds=600)
        assert (task["deadline_at"], task["escalation_level"]) == (rfc3339(limit), 0)
        token = alice.claim(task["id"]).json()["lease_token"]  # claimed, but not decided

        server.clock.advance(599)
        assert sweep(server) == 0
        server.clock.advance(1)
        assert sweep(server) == 1
        assert sweep(server) == 0  # once

        rejected = producer.get(f"/tasks/{task['id']}").json()
        assert (rejected["status"], rejected["decision"]) == ("RESOLVED", "REJECTED")
        assert rejected["notes"] == TIMEOUT_NOTES
        late = alice.resolve(task["id"], token)
        assert late.status_code == 409
        assert producer.get(f"/tasks/{task['id']}").json()["decision"] == "REJECTED"
        trail = [(e["type"], e["actor_id"]) for e in events(producer, task["id"])]
        assert trail == [
            ("task.created", "agent-7"),
            ("task.claimed", "alice"),
            ("task.resolved", "signoff-sweeper"),
        ]
        while deliver(server):
            pass
        (delivered,) = [json.loads(r.body) for r in hook.received]
    assert delivered["type"] == "task.resolved"
    assert delivered["data"]["decision"] == "REJECTED"
    assert delivered["data"]["id"] == task["id"]


def test_a_producer_timeout_may_expire_the_task(timed: LiveServer, producer: Client) -> None:
    task = escalate(producer, after_seconds=60, outcome="expire")
    timed.clock.advance(60)
    assert sweep(timed) == 1
    expired = producer.get(f"/tasks/{task['id']}").json()
    assert (expired["status"], expired["decision"]) == ("EXPIRED", None)
    assert [e["type"] for e in events(producer, task["id"])] == ["task.created", "task.expired"]


def test_a_producer_timeout_may_escalate_to_a_group_then_the_policy_ends_the_wait(
    timed: LiveServer, producer: Client
) -> None:
    alice = person(timed, "reviewer", "alice", ["reviewers"])
    sam = person(timed, "reviewer", "sam", ["risk"])
    task = escalate(producer, after_seconds=120, outcome="escalate", group="risk")
    assert alice.claim(task["id"]).status_code == 200  # before: anyone may claim it
    timed.clock.advance(120)
    assert sweep(timed) == 1
    moved = producer.get(f"/tasks/{task['id']}").json()
    assert (moved["status"], moved["assigned_group"]) == ("PENDING_REVIEW", "risk")
    assert alice.claim(task["id"]).json()["error_code"] == "ERR_TASK_NOT_FOUND"  # not hers now
    assert sam.claim(task["id"]).status_code == 200
    # The default policy's final level follows: nothing waits forever.
    final = timed.settings.default_policy.levels[-1].after_seconds
    timed.clock.advance(final)
    assert sweep(timed) == 1
    assert producer.get(f"/tasks/{task['id']}").json()["status"] == "EXPIRED"
    trail = [(e["type"], e["details"].get("level_action")) for e in events(producer, task["id"])]
    assert trail == [
        ("task.created", None),
        ("task.claimed", None),
        ("task.escalated", "reassign"),
        ("task.claimed", None),
        ("task.expired", "expire"),
    ]


@pytest.mark.parametrize(
    ("timeout", "extra", "status", "code", "field"),
    [
        ({"after_seconds": 60, "outcome": "approve"}, {}, 422, "ERR_TIMEOUT_APPROVAL_NOT_ALLOWED",
         "timeout.outcome"),
        ({"after_seconds": 60, "outcome": "escalate"}, {}, 422, "ERR_VALIDATION", "timeout.group"),
        ({"after_seconds": 60, "group": "risk"}, {}, 422, "ERR_VALIDATION", "timeout.group"),
        ({"after_seconds": 0}, {}, 422, "ERR_VALIDATION", "timeout.after_seconds"),
        ({"after_seconds": 60, "when": "later"}, {}, 422, "ERR_VALIDATION", "timeout"),
        ({"after_seconds": 60}, {"deadline": "2026-12-01T00:00:00Z"}, 422, "ERR_VALIDATION",
         "timeout"),
    ],
)  # fmt: skip
def test_a_timeout_that_would_approve_or_makes_no_sense_is_refused(
    timed: LiveServer, producer: Client, timeout, extra, status, code, field
) -> None:
    response = producer.escalate(escalation(timeout=timeout, **extra))
    assert response.status_code == status, response.text
    problem = response.json()
    assert problem["error_code"] == code
    assert field in [error["field"] for error in problem["errors"]]
    assert timed.rows("review_tasks") == []
    assert timed.rows("idempotency_keys") == []


def test_a_timeout_given_alone_rejects(timed: LiveServer, producer: Client) -> None:
    task = escalate(producer, after_seconds=30)
    timed.clock.advance(30)
    assert sweep(timed) == 1
    assert producer.get(f"/tasks/{task['id']}").json()["decision"] == "REJECTED"


def test_the_sdk_passes_the_time_limit_through(timed: LiveServer, producer: Client) -> None:
    with Signoff(timed.base_url, str(producer.key), backoff=0) as agent:
        task = agent.escalate(
            key=f"refund-{uuid.uuid4()}",
            entity_type="refund",
            entity_id=uuid.uuid4().hex[:8],
            reason_code="ABOVE_LIMIT",
            attempted_actions=[
                {"action": "policy_check", "executed_at": "2026-11-30T09:00:00Z", "result": "no"}
            ],
            evaluator_verdict={"confidence_score": 0.5, "threshold": 0.9},
            input_snapshot={"amount": "620.00"},
            trace_id="sdk-timeout",
            timeout_seconds=90,
            on_timeout="escalate",
            timeout_group="risk",
        )
        timed.clock.advance(90)
        assert sweep(timed) == 1
        assert agent.get_task(task.id).assigned_group == "risk"


def test_mcp_passes_the_time_limit_through(timed: LiveServer, producer: Client) -> None:
    parameters = StdioServerParameters(
        command=sys.executable,
        args=["-m", "signoff", "mcp"],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")},
            "SIGNOFF_URL": timed.base_url,
            "SIGNOFF_API_KEY": str(producer.key),
        },
    )

    async def agent() -> dict[str, Any]:
        async with McpClient(parameters) as client:
            arguments = {
                "key": f"mcp-{uuid.uuid4().hex[:8]}",
                "entity_type": "email",
                "entity_id": uuid.uuid4().hex[:8],
                "question": "May I send this refund e-mail?",
                "attempted_actions": [{"action": "policy_check", "result": "refund above 500"}],
                "confidence": 0.5,
                "threshold": 0.9,
                "timeout_seconds": 45,
                "on_timeout": "reject",
            }
            return structured(await client.call_tool("request_human_review", arguments))

    asked = asyncio.run(agent())
    timed.clock.advance(45)
    assert sweep(timed) == 1
    decided = producer.get(f"/tasks/{asked['task_id']}").json()
    assert (decided["status"], decided["decision"]) == ("RESOLVED", "REJECTED")
