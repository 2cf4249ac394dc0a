"""An agent in a loop with a person (SQLite and PostgreSQL): the reviewer asks for changes
with feedback, the agent revises what the feedback names and resubmits, and the second
revision is approved and executed — through the SDK's wait and through LangGraph."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from signoff.client import Signoff, Task
from signoff.integrations.langgraph import (
    pending_approval,
    request_approval,
    resume_when_decided,
    thread_config,
)
from tests.support import Client, LiveServer

FEEDBACK = [{"path": "/body", "reason": "say where the figure comes from"}]


class Reviewer:
    """A person at the console: asks for changes on the first revision, approves the next."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.seen: list[dict[str, Any]] = []

    def decide(self, task_id: str) -> None:
        claimed = self.client.claim(task_id).json()
        self.seen.append(claimed)
        pin = {"revision": claimed["current_revision"], "digest": claimed["digest"]}
        if claimed["current_revision"] == 1:
            body = pin | {"decision": "REVISION_REQUESTED", "notes": "Source?", "fields": FEEDBACK}
        else:
            body = pin | {"decision": "APPROVED"}
        answer = self.client.resolve(task_id, claimed["lease_token"], body)
        assert answer.status_code == 200, answer.text

    def in_background(self, task_id: str) -> threading.Thread:
        person = threading.Thread(target=self.decide, args=(task_id,))
        person.start()
        return person


def revised(subject: dict[str, Any], task: Task) -> dict[str, Any]:
    """What the agent does with the feedback: it fixes each field named."""
    assert task.change_request is not None
    named = {f.path for f in task.change_request.fields}
    assert named == {"/body"}
    return subject | {"body": subject["body"] + " (source: central bank, 4 May)"}


@pytest.fixture
def agent(server: LiveServer) -> Iterator[Signoff]:
    with Signoff(server.base_url, str(server.new_client("producer").key), backoff=0) as client:
        yield client


def test_an_sdk_agent_revises_after_feedback_and_runs_the_second_revision(
    server: LiveServer, agent: Signoff
) -> None:
    reviewer = Reviewer(server.new_client("reviewer", "editor-1"))
    subject: dict[str, Any] = {"title": "Rates", "body": "Held at 3.25%.", "actions": []}
    task = agent.escalate(
        key=f"loop-{uuid.uuid4().hex[:8]}",
        entity_type="article",
        entity_id=f"a-{uuid.uuid4().hex[:8]}",
        reason_code="EDITORIAL_REVIEW",
        attempted_actions=[{"action": "lint", "executed_at": datetime.now(UTC), "result": "ok"}],
        evaluator_verdict={"confidence_score": 0.3, "threshold": 0.8},
        input_snapshot={},
        trace_id="loop",
        subject=subject,
    )
    rounds = []
    while True:
        person = reviewer.in_background(task.id)
        task = agent.wait_for_decision(task, timeout=60, revision=task.current_revision)
        person.join()
        rounds.append((task.current_revision, task.decision, task.awaiting))
        if not task.changes_requested:
            break
        subject = revised(subject, task)
        task = agent.revise(task, subject, expected_revision=task.current_revision or 1)
        assert (task.status, task.awaiting) == ("PENDING_REVIEW", "reviewers")
    assert rounds == [(1, "REVISION_REQUESTED", "producer"), (2, "APPROVED", None)]
    # The reviewer read the second revision with the feedback beside it.
    assert reviewer.seen[1]["change_request"]["fields"] == FEEDBACK
    with agent.execution(task.id, subject=subject, operation_id="publish-1") as run:
        for action in run.pending:
            run.complete(action)
    assert agent.get_task(task.id).execution_status == "COMPLETED"


class State(TypedDict, total=False):
    article: dict[str, Any]
    task_id: str
    rounds: list[str]
    published: str


def test_a_langgraph_agent_loops_on_feedback_until_approved(
    server: LiveServer, agent: Signoff
) -> None:
    slug = f"a-{uuid.uuid4().hex[:8]}"
    reviewer = Reviewer(server.new_client("reviewer", "editor-2"))

    def review(state: State) -> State:
        task = request_approval(
            agent,
            subject=state["article"],
            entity=("article", slug),
            reason="EDITORIAL_REVIEW",
            attempted=[{"action": "lint", "executed_at": datetime.now(UTC), "result": "clean"}],
            verdict={"confidence_score": 0.3, "threshold": 0.8},
        )
        rounds = [*state.get("rounds", []), str(task.decision)]
        if task.changes_requested:
            return {
                "task_id": task.id,
                "rounds": rounds,
                "article": revised(state["article"], task),
            }
        return {"task_id": task.id, "rounds": rounds}

    def route(state: State) -> str:
        return "review" if state["rounds"][-1] == "REVISION_REQUESTED" else "publish"

    def publish(state: State) -> State:
        with agent.execution(
            state["task_id"], subject=state["article"], operation_id="publish"
        ) as run:
            for action in run.pending:
                run.complete(action)
        return {"published": state["article"]["body"]}

    graph = StateGraph(State)
    graph.add_node("review", review)
    graph.add_node("publish", publish)
    graph.add_edge(START, "review")
    graph.add_conditional_edges("review", route, ["review", "publish"])
    graph.add_edge("publish", END)
    app = graph.compile(checkpointer=InMemorySaver())
    config = thread_config(f"thread-{slug}")

    article = {"title": "Rates", "body": "Held at 3.25%.", "actions": [{"id": "publish"}]}
    app.invoke({"article": article}, config)
    result: dict[str, Any] = {}
    for revision in (1, 2):
        waiting = pending_approval(app, config)
        assert waiting is not None
        assert waiting["revision"] == revision
        person = reviewer.in_background(waiting["task_id"])
        result = resume_when_decided(app, config, agent, timeout=60)
        person.join()
    assert result["rounds"] == ["REVISION_REQUESTED", "APPROVED"]
    assert result["published"].endswith("(source: central bank, 4 May)")
    assert pending_approval(app, config) is None
    assert reviewer.seen[1]["change_request"]["fields"] == FEEDBACK


def test_a_langgraph_agent_runs_what_the_reviewer_edited(
    server: LiveServer, agent: Signoff
) -> None:
    """The reviewer's side through the SDK: claim, edit what the producer allowed, approve."""
    slug = f"a-{uuid.uuid4().hex[:8]}"

    def review(state: State) -> State:
        task = request_approval(
            agent,
            subject=state["article"],
            entity=("article", slug),
            reason="EDITORIAL_REVIEW",
            attempted=[{"action": "lint", "executed_at": datetime.now(UTC), "result": "clean"}],
            verdict={"confidence_score": 0.3, "threshold": 0.8},
            editable=["/title"],
        )
        assert task.edited
        return {"task_id": task.id, "article": agent.approved_subject(task)}

    def publish(state: State) -> State:
        with agent.execution(
            state["task_id"], subject=state["article"], operation_id="publish"
        ) as run:
            for action in run.pending:
                run.complete(action)
        return {"published": state["article"]["title"]}

    graph = StateGraph(State)
    graph.add_node("review", review)
    graph.add_node("publish", publish)
    graph.add_edge(START, "review")
    graph.add_edge("review", "publish")
    graph.add_edge("publish", END)
    app = graph.compile(checkpointer=InMemorySaver())
    config = thread_config(f"thread-{slug}")
    article = {"title": "Rates", "body": "Held at 3.25%.", "actions": [{"id": "publish"}]}
    app.invoke({"article": article}, config)
    waiting = pending_approval(app, config)
    assert waiting is not None

    def edit_and_approve() -> None:
        key = str(server.new_client("reviewer", "editor-3").key)
        with Signoff(server.base_url, key, backoff=0) as reviewer:
            claimed = reviewer.claim(waiting["task_id"])
            subject = reviewer.get_revision(claimed).subject or {}
            reviewer.resolve(
                claimed,
                decision="APPROVED_WITH_EDITS",
                subject=subject | {"title": "Rates held at 3.25%"},
            )

    person = threading.Thread(target=edit_and_approve)
    person.start()
    result = resume_when_decided(app, config, agent, timeout=60)
    person.join()
    assert result["published"] == "Rates held at 3.25%"
    assert agent.get_task(waiting["task_id"]).execution_status == "COMPLETED"
