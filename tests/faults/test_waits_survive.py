"""Waits outlive the server: a LangGraph agent, an async worker and an MCP client wait on
their decisions while ``signoff serve`` is stopped with SIGTERM, started again, killed
with SIGKILL and started again; each then gets the decision a person made, with no help."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict

import httpx
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from signoff.client import AsyncSignoff, Signoff
from signoff.integrations.langgraph import (
    pending_approval,
    request_approval,
    resume_when_decided,
    thread_config,
)
from tests.faults.harness import service_env
from tests.processes import Server, wait_for
from tests.support import ADMIN_KEY

pytestmark = pytest.mark.slow

#: Each waiter's own timeout: far longer than the restarts take.
WAIT_SECONDS = 240
#: How long the server stays down each time: beyond the SDK's per-request retries.
OUTAGE_SECONDS = 8
ATTEMPTED = [{"action": "lint", "executed_at": datetime.now(UTC).isoformat(), "result": "ok"}]
VERDICT = {"confidence_score": 0.3, "threshold": 0.8}


class State(TypedDict, total=False):
    article: dict[str, Any]
    decision: str


class Waiters:
    """Three kinds of agent, each in its own thread, each recording what it finally got."""

    def __init__(self, base_url: str, producer_key: str) -> None:
        self.base_url = base_url
        self.key = producer_key
        self.outcomes: dict[str, str] = {}
        self.failures: list[BaseException] = []
        self.parked = threading.Barrier(4)  # the three agents and the test
        self.threads = [
            threading.Thread(target=self._guarded, args=(run,), daemon=True)
            for run in (self._langgraph, self._async_worker, self._mcp)
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()
        try:
            self.parked.wait(timeout=120)  # every agent has escalated and begins to wait
        except threading.BrokenBarrierError:
            for thread in self.threads:
                thread.join(timeout=10)
            raise (self.failures[0] if self.failures else AssertionError("stalled")) from None

    def join(self) -> None:
        for thread in self.threads:
            thread.join(timeout=WAIT_SECONDS + 60)
        if self.failures:
            raise self.failures[0]

    def _guarded(self, run: Any) -> None:
        try:
            run()
        except BaseException as exc:  # raised again in the test's thread
            self.failures.append(exc)
            self.parked.abort()

    def _langgraph(self) -> None:
        slug = f"article-{uuid.uuid4().hex[:8]}"
        with Signoff(self.base_url, self.key) as client:

            def review(state: State) -> State:
                task = request_approval(
                    client, subject=state["article"], entity=("article", slug),
                    reason="EDITORIAL_REVIEW", attempted=ATTEMPTED, verdict=VERDICT,
                )  # fmt: skip
                return {"decision": str(task.decision)}

            graph = StateGraph(State)
            graph.add_node("review", review)
            graph.add_edge(START, "review")
            graph.add_edge("review", END)
            app = graph.compile(checkpointer=InMemorySaver())
            config = thread_config(f"thread-{slug}")
            app.invoke({"article": {"title": "Rates", "body": "Held at 3.25%."}}, config)
            assert pending_approval(app, config) is not None
            self.parked.wait(timeout=120)
            result = resume_when_decided(app, config, client, timeout=WAIT_SECONDS)
            self.outcomes["article"] = result["decision"]

    def _async_worker(self) -> None:
        async def work() -> str:
            async with AsyncSignoff(self.base_url, self.key) as client:
                task = await client.escalate(
                    key=f"refund-{uuid.uuid4().hex[:8]}",
                    entity_type="refund",
                    entity_id=f"refund-{uuid.uuid4().hex[:8]}",
                    reason_code="REFUND_REVIEW",
                    attempted_actions=ATTEMPTED,
                    evaluator_verdict=VERDICT,
                    input_snapshot={"amount_eur": 620},
                    subject={"amount_eur": 620},
                    trace_id=f"trace-{uuid.uuid4().hex[:8]}",
                )
                self.parked.wait(timeout=120)
                decided = await client.wait_for_decision(task.id, timeout=WAIT_SECONDS)
                return str(decided.decision)

        self.outcomes["refund"] = asyncio.run(work())

    def _mcp(self) -> None:
        parameters = StdioServerParameters(
            command=sys.executable,
            args=["-m", "signoff", "mcp"],
            env={
                **{k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")},
                "SIGNOFF_URL": self.base_url,
                "SIGNOFF_API_KEY": self.key,
            },
        )

        async def converse() -> str:
            async with Client(parameters) as client:
                entity = f"email-{uuid.uuid4().hex[:8]}"
                asked = await client.call_tool(
                    "request_human_review",
                    {
                        "key": f"mcp-{entity}",
                        "entity_type": "email",
                        "entity_id": entity,
                        "question": "May I send this e-mail?",
                        "attempted_actions": [{"action": "policy_check", "result": "unsure"}],
                        "confidence": 0.5,
                        "threshold": 0.9,
                        "subject": {"to": "customer@example.com", "body": "Your refund"},
                    },
                )
                assert not asked.is_error, asked
                task_id = _structured(asked)["task_id"]
                self.parked.wait(timeout=120)
                # As an assistant does: wait, and wait again while it is not decided.
                while True:
                    waited = await client.call_tool(
                        "wait_for_decision", {"task_id": task_id, "timeout_seconds": 45}
                    )
                    assert not waited.is_error, waited
                    answer = _structured(waited)
                    if answer["decided"]:
                        return str(answer["decision"])

        self.outcomes["email"] = asyncio.run(converse())


def _structured(result: Any) -> dict[str, Any]:
    content = result.structured_content
    assert isinstance(content, dict), result
    return content.get("result", content) if set(content) == {"result"} else content  # type: ignore[no-any-return]


def _keys(base_url: str) -> tuple[str, str]:
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as a:
        made = [
            a.post("/api-keys", json={"role": role, "principal_id": principal})
            for role, principal in (("producer", "agents"), ("reviewer", "editor"))
        ]
    assert all(response.status_code == 201 for response in made), [r.text for r in made]
    return made[0].json()["key"], made[1].json()["key"]


def _pending(base_url: str, reviewer: str) -> dict[str, str]:
    """entity_type → task id of what waits for review."""
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {reviewer}"}) as r:
        page = r.get("/tasks", params={"status": "PENDING_REVIEW", "limit": 50}).json()
    return {item["entity_type"]: item["id"] for item in page["items"]}


def _parked(base_url: str) -> int:
    """How many long-polls the server holds now (its own gauge)."""
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as a:
        text = a.get("/metrics").text
    values = [
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("signoff_long_poll_waiters")
    ]
    return int(sum(values))


def _decide(base_url: str, reviewer: str, task_id: str, decision: str) -> None:
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {reviewer}"}) as r:
        claimed = r.post(f"/tasks/{task_id}/claim")
        assert claimed.status_code == 200, claimed.text
        lease = claimed.json()
        body = {"decision": decision, "revision": lease["current_revision"],
                "digest": lease["digest"], "notes": "checked by a person"}  # fmt: skip
        resolved = r.post(
            f"/tasks/{task_id}/resolve", json=body, headers={"X-Lease-Token": lease["lease_token"]}
        )
        assert resolved.status_code == 200, resolved.text


def test_agents_waiting_through_a_sigterm_and_a_kill_9_get_their_decisions(
    database_url: str, tmp_path: Path
) -> None:
    server = Server(service_env(database_url), tmp_path / "serve.log")
    with server:
        producer, reviewer = _keys(server.base_url)
        waiters = Waiters(server.base_url, producer)
        waiters.start()
        wait_for(lambda: len(_pending(server.base_url, reviewer)) == 3, what="three escalations")

        wait_for(lambda: _parked(server.base_url) >= 3, what="three parked long-polls")
        assert server.terminate() in (0, -15)  # a graceful stop (uvicorn re-raises SIGTERM)
        time.sleep(OUTAGE_SECONDS)
        server.start()  # the same port: clients come back on their own
        wait_for(lambda: _parked(server.base_url) >= 3, what="the waits parked again")
        server.kill()  # a crash, and a slow start: longer than any one request's retries
        time.sleep(OUTAGE_SECONDS)
        server.start()
        wait_for(lambda: _parked(server.base_url) >= 3, what="the waits parked once more")

        tasks = _pending(server.base_url, reviewer)
        expected = {"article": "APPROVED", "refund": "REJECTED", "email": "APPROVED"}
        for entity_type, decision in expected.items():
            _decide(server.base_url, reviewer, tasks[entity_type], decision)
        waiters.join()
    assert waiters.outcomes == expected
