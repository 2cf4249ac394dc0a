"""The LangGraph integration with a real graph and checkpointer, and Signoff faked through
the SDK's ``transport=`` seam."""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime
from typing import Any, TypedDict

import httpx
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command
from standardwebhooks.webhooks import Webhook

from signoff.client import Signoff, digest
from signoff.integrations.langgraph import (
    WebhookReceiver,
    pending_approval,
    request_approval,
    thread_config,
)

SECRET = "whsec_" + base64.b64encode(b"s" * 32).decode()


class FakeSignoff:
    """One task, kept in memory: escalate, read, revise, decide."""

    def __init__(self) -> None:
        self.task: dict[str, Any] | None = None
        self.escalations = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        if request.url.path == "/me":
            return httpx.Response(200, json={"principal_id": "agent", "role": "producer"})
        if request.method == "POST" and request.url.path == "/tasks/escalate":
            self.escalations += 1
            if self.task is None:
                self.task = {
                    "id": body["escalation_id"],
                    "status": "PENDING_REVIEW",
                    "entity_type": body["entity_type"],
                    "entity_id": body["entity_id"],
                    "reason_code": body["reason_code"],
                    "version": 1,
                    "current_revision": 1,
                    "digest": digest(body["subject"]),
                    "metadata": body.get("metadata"),
                }
                return httpx.Response(201, json=self.task)
            return httpx.Response(
                422, json={"error_code": "ERR_IDEMPOTENCY_KEY_REUSED", "message": "reused"}
            )
        assert self.task is not None
        if request.method == "PUT":
            self.task.update(
                status="PENDING_REVIEW",
                decision=None,
                version=self.task["version"] + 1,
                current_revision=self.task["current_revision"] + 1,
                digest=digest(body["subject"]),
            )
        return httpx.Response(200, json=self.task)

    def decide(self, decision: str) -> dict[str, Any]:
        assert self.task is not None
        self.task.update(status="RESOLVED", decision=decision, version=self.task["version"] + 2)
        return dict(self.task)


class State(TypedDict, total=False):
    article: dict[str, Any]
    decision: str
    revision: int


def make_graph(fake: FakeSignoff) -> Any:
    client = Signoff("http://signoff.test", "key", transport=httpx.MockTransport(fake), backoff=0)

    def review(state: State) -> State:
        task = request_approval(
            client,
            subject=state["article"],
            entity=("article", "a-1"),
            reason="EDITORIAL_REVIEW",
            attempted=[{"action": "check", "executed_at": datetime.now(UTC), "result": "ok"}],
            verdict={"confidence_score": 0.5, "threshold": 0.9},
        )
        return {"decision": str(task.decision), "revision": int(task.current_revision or 0)}

    graph = StateGraph(State)
    graph.add_node("review", review)
    graph.add_edge(START, "review")
    graph.add_edge("review", END)
    return graph.compile(checkpointer=InMemorySaver())


def delivery(task: dict[str, Any], *, event_id: str, event_type: str = "task.resolved") -> Any:
    body = json.dumps(
        {"id": event_id, "type": event_type, "created_at": "2026-11-30T12:00:00Z", "data": task}
    ).encode()
    now = datetime.now(UTC)
    headers = {
        "webhook-id": event_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(SECRET).sign(event_id, now, body.decode()),
    }
    return headers, body


def test_a_node_waits_for_the_decision_and_only_its_own_task_resumes_it() -> None:
    fake = FakeSignoff()
    graph = make_graph(fake)
    config = thread_config("thread-1")
    graph.invoke({"article": {"title": "v1"}}, config)

    waiting = pending_approval(graph, config)
    assert waiting is not None
    assert fake.task is not None
    assert (waiting["task_id"], waiting["revision"]) == (fake.task["id"], 1)
    assert fake.task["metadata"]["langgraph"] == {"thread_id": "thread-1", "node": "review"}

    receiver = WebhookReceiver(graph, secrets=[SECRET])
    # A forged delivery changes nothing.
    headers, body = delivery(fake.decide("APPROVED"), event_id="evt-1")
    assert receiver.handle(headers, body.replace(b"APPROVED", b"REJECTED")) == (
        400,
        "bad signature",
    )
    # Another task's event, even for this thread, does not resume it.
    foreign = dict(fake.task, id="someone-elses-task")
    assert receiver.handle(*delivery(foreign, event_id="evt-0"))[1].startswith("ignored")

    assert receiver.handle(headers, body) == (200, "resumed")
    assert graph.get_state(config).values["decision"] == "APPROVED"
    assert receiver.handle(headers, body) == (200, "duplicate")
    assert fake.escalations == 2  # the node ran twice; one task


def test_a_resume_without_a_decision_about_this_revision_interrupts_again() -> None:
    fake = FakeSignoff()
    graph = make_graph(fake)
    config = thread_config("thread-2")
    graph.invoke({"article": {"title": "v1"}}, config)
    assert fake.task is not None

    # Whatever a resume value claims, the node reads the task: undecided, so it waits on.
    forged = {"task_id": fake.task["id"], "decision": "APPROVED", "revision": 1}
    graph.invoke(Command(resume=forged), config)
    assert "decision" not in graph.get_state(config).values
    waiting = pending_approval(graph, config)
    assert waiting is not None

    # An event no newer than what the thread waits for does not resume it.
    receiver = WebhookReceiver(graph, secrets=[SECRET])
    stale = dict(fake.task, status="RESOLVED", decision="APPROVED", version=waiting["version"])
    outcome = receiver.handle(*delivery(stale, event_id="evt-1"))
    assert outcome == (200, "ignored: older than what the thread waits for")

    # A subject that changed is revised and reviewed again before anything is returned.
    fake.decide("APPROVED")
    assert graph.get_state(config).values.get("decision") is None
    graph.update_state(config, {"article": {"title": "v2"}}, as_node=START)
    graph.invoke(None, config)
    waiting = pending_approval(graph, config)
    assert waiting is not None
    assert waiting["revision"] == 2
    assert fake.task["status"] == "PENDING_REVIEW"
    assert receiver.handle(*delivery(fake.decide("REJECTED"), event_id="evt-3")) == (
        200,
        "resumed",
    )
    assert graph.get_state(config).values["decision"] == "REJECTED"
    assert graph.get_state(config).values["revision"] == 2


def test_an_event_for_a_thread_that_waits_on_nothing_is_ignored() -> None:
    fake = FakeSignoff()
    graph = make_graph(fake)
    receiver = WebhookReceiver(graph, secrets=[SECRET])
    task = {
        "id": "t",
        "status": "RESOLVED",
        "decision": "APPROVED",
        "entity_type": "article",
        "entity_id": "a",
        "reason_code": "R",
        "version": 3,
        "metadata": {"langgraph": {"thread_id": "never-started"}},
    }
    status, outcome = receiver.handle(*delivery(task, event_id="evt-9"))
    assert (status, outcome) == (200, "ignored: the thread does not wait on this task")
    assert graph.get_state(thread_config("never-started")).values == {}


def test_the_receiver_is_an_asgi_app() -> None:
    fake = FakeSignoff()
    graph = make_graph(fake)
    config = thread_config("thread-3")
    graph.invoke({"article": {"title": "v1"}}, config)
    headers, body = delivery(fake.decide("APPROVED"), event_id="evt-1")
    transport = httpx.ASGITransport(app=WebhookReceiver(graph, secrets=[SECRET]))

    async def post() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=transport, base_url="http://agent") as http:
            return [
                await http.post("/signoff", content=body, headers=headers),
                await http.post("/signoff", content=body, headers=headers),
                await http.get("/signoff"),
            ]

    import asyncio

    first, second, get = asyncio.run(post())
    assert (first.status_code, first.json()) == (200, {"outcome": "resumed"})
    assert second.json() == {"outcome": "duplicate"}
    assert get.status_code == 405
    assert graph.get_state(config).values["decision"] == "APPROVED"


@pytest.mark.parametrize("age", [0, 3600])
def test_stale_timestamps_are_refused(age: int) -> None:
    fake = FakeSignoff()
    receiver = WebhookReceiver(make_graph(fake), secrets=[SECRET])
    task = {"id": "t", "status": "RESOLVED", "entity_type": "a", "entity_id": "b"}
    task |= {"reason_code": "r", "version": 2}
    body = json.dumps({"id": "e", "type": "task.resolved", "data": task})
    at = datetime.fromtimestamp(time.time() - age, UTC)
    headers = {
        "webhook-id": "e",
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Webhook(SECRET).sign("e", at, body),
    }
    status, _ = receiver.handle(headers, body.encode())
    assert status == (400 if age else 200)
