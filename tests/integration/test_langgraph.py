"""The LangGraph integration against a real Signoff (SQLite and PostgreSQL), resumed by
long-poll: an agent without a public address."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from signoff.client import AsyncSignoff, Signoff
from signoff.integrations.langgraph import (
    apending_approval,
    arequest_approval,
    aresume_when_decided,
    pending_approval,
    request_approval,
    resume_when_decided,
    thread_config,
)
from tests.integration.test_timeouts import timed
from tests.integration.test_waiting import sweep
from tests.support import LiveServer

__all__ = ["timed"]  # the fixture, shared with test_timeouts.py


class State(TypedDict, total=False):
    article: dict[str, Any]
    task_id: str
    published: str


@pytest.fixture
def agent(server: LiveServer) -> Iterator[Signoff]:
    with Signoff(server.base_url, str(server.new_client("producer").key), backoff=0) as client:
        yield client


def test_a_thread_waits_for_the_editor_and_publishes_what_was_approved(
    server: LiveServer, agent: Signoff
) -> None:
    slug = f"a-{uuid.uuid4().hex[:8]}"
    published: list[str] = []

    def review(state: State) -> State:
        task = request_approval(
            agent,
            subject=state["article"],
            entity=("article", slug),
            reason="EDITORIAL_REVIEW",
            attempted=[{"action": "lint", "executed_at": datetime.now(UTC), "result": "clean"}],
            verdict={"confidence_score": 0.3, "threshold": 0.8},
        )
        assert task.decision == "APPROVED"
        return {"task_id": task.id}

    def publish(state: State) -> State:
        operation = f"publish-{state['task_id']}"
        with agent.execution(
            state["task_id"], subject=state["article"], operation_id=operation
        ) as run:
            for action in run.pending:
                published.append(operation)
                run.complete(action)
        return {"published": operation}

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

    editor = server.new_client("reviewer")

    def decide() -> None:
        claimed = editor.claim(waiting["task_id"]).json()
        body = {"decision": "APPROVED", "revision": claimed["current_revision"],
                "digest": claimed["digest"]}  # fmt: skip
        assert editor.resolve(waiting["task_id"], claimed["lease_token"], body).status_code == 200

    person = threading.Thread(target=decide)
    person.start()
    result = resume_when_decided(app, config, agent, timeout=60)
    person.join()
    assert result["published"] == f"publish-{waiting['task_id']}"
    assert published == [result["published"]]
    assert pending_approval(app, config) is None
    assert agent.get_task(waiting["task_id"]).execution_status == "COMPLETED"


def test_an_async_graph_waits_for_the_editor_the_same_way(server: LiveServer) -> None:
    slug = f"a-{uuid.uuid4().hex[:8]}"
    producer_key = str(server.new_client("producer").key)
    editor = server.new_client("reviewer")

    async def story() -> dict[str, Any]:
        async with AsyncSignoff(server.base_url, producer_key, backoff=0) as client:

            async def review(state: State) -> State:
                task = await arequest_approval(
                    client,
                    subject=state["article"],
                    entity=("article", slug),
                    reason="EDITORIAL_REVIEW",
                    attempted=[
                        {"action": "lint", "executed_at": datetime.now(UTC), "result": "ok"}
                    ],
                    verdict={"confidence_score": 0.3, "threshold": 0.8},
                )
                return {"task_id": task.id, "published": str(task.decision)}

            graph = StateGraph(State)
            graph.add_node("review", review)
            graph.add_edge(START, "review")
            graph.add_edge("review", END)
            app = graph.compile(checkpointer=InMemorySaver())
            config = thread_config(f"thread-{slug}")
            await app.ainvoke(
                {"article": {"title": "Rates", "actions": [{"id": "publish"}]}}, config
            )
            waiting = await apending_approval(app, config)
            assert waiting is not None

            def decide() -> None:
                claimed = editor.claim(waiting["task_id"]).json()
                body = {"decision": "REJECTED", "notes": "Not this week.",
                        "revision": claimed["current_revision"],
                        "digest": claimed["digest"]}  # fmt: skip
                assert (
                    editor.resolve(waiting["task_id"], claimed["lease_token"], body).status_code
                    == 200
                )

            _, result = await asyncio.gather(
                asyncio.to_thread(decide), aresume_when_decided(app, config, client, timeout=60)
            )
            return dict(result)

    result = asyncio.run(story())
    assert result["published"] == "REJECTED"


def test_the_producers_time_limit_rejects_a_waiting_thread_and_says_it_was_no_person(
    timed: LiveServer,
) -> None:
    server = timed
    slug = f"a-{uuid.uuid4().hex[:8]}"
    with Signoff(server.base_url, str(server.new_client("producer").key), backoff=0) as agent:

        def review(state: State) -> State:
            task = request_approval(
                agent,
                subject=state["article"],
                entity=("article", slug),
                reason="EDITORIAL_REVIEW",
                attempted=[{"action": "lint", "executed_at": datetime.now(UTC), "result": "ok"}],
                verdict={"confidence_score": 0.3, "threshold": 0.8},
                timeout_seconds=600,
                on_timeout="reject",
            )
            return {"task_id": task.id, "published": str(task.decision)}

        graph = StateGraph(State)
        graph.add_node("review", review)
        graph.add_edge(START, "review")
        graph.add_edge("review", END)
        app = graph.compile(checkpointer=InMemorySaver())
        config = thread_config(f"thread-{slug}")
        app.invoke({"article": {"title": "Rates", "actions": [{"id": "publish"}]}}, config)
        waiting = pending_approval(app, config)
        assert waiting is not None
        assert agent.get_task(waiting["task_id"]).deadline_at is not None  # the limit went along
        server.clock.advance(600)
        assert sweep(server) == 1
        result = resume_when_decided(app, config, agent, timeout=60)
        assert result["published"] == "REJECTED"
        task = agent.get_task(waiting["task_id"])
        assert task.timed_out
