"""The catch-up read: a producer that was away reads the events of its own tasks since
its cursor, each once, in order, the documents its webhooks carry (SQLite and
PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from signoff.client import AsyncSignoff, Signoff
from tests.integration.test_waiting import deliver
from tests.processes import wait_for
from tests.receiver import Receiver
from tests.support import Client, LiveServer, escalation, example_resolve_for, live_server


@pytest.fixture
def quiet(make_settings, clock) -> Iterator[LiveServer]:  # type: ignore[no-untyped-def]
    settings = make_settings(
        run_workers=False, webhook_allow_private_networks=True, webhook_retry_jitter=0
    )
    with live_server(settings, clock) as server:
        yield server


def read(producer: Client, cursor: str | None = None, limit: int = 100) -> dict[str, Any]:
    params: dict[str, Any] = {"limit": limit}
    if cursor is not None:
        params["cursor"] = cursor
    response = producer.get("/events", params=params)
    assert response.status_code == 200, response.text
    return dict(response.json())


def settled(producer: Client, cursor: str | None, count: int) -> None:
    """Wait until ``count`` events after ``cursor`` are readable: on PostgreSQL a read
    waits for every transaction on the server older than the events (another test's too)."""
    wait_for(
        lambda: len(read(producer, cursor, limit=500)["items"]) >= count,
        seconds=60,
        what=f"{count} events to settle",
    )


def decide(reviewer: Client, task_id: str) -> None:
    token = reviewer.claim(task_id).json()["lease_token"]
    assert reviewer.resolve(task_id, token, example_resolve_for(reviewer)).status_code == 200


def new_task(producer: Client) -> str:
    response = producer.escalate(escalation())
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def test_events_made_while_the_agent_was_away_come_once_in_order(quiet: LiveServer) -> None:
    producer = quiet.new_client("producer", "agent-a")
    reviewer = quiet.new_client("reviewer", "rev-1")
    first = new_task(producer)
    settled(producer, None, 1)
    seen = read(producer)
    assert [e["type"] for e in seen["items"]] == ["task.created"]
    cursor = seen["next_cursor"]

    # The agent is away: a person decides, a second task comes and is claimed.
    decide(reviewer, first)
    second = new_task(producer)
    reviewer.claim(second)

    settled(producer, cursor, 4)
    back = read(producer, cursor)
    assert [(e["type"], e["data"]["id"]) for e in back["items"]] == [
        ("task.claimed", first),
        ("task.resolved", first),
        ("task.created", second),
        ("task.claimed", second),
    ]
    assert back["items"][1]["data"]["decision"] == "REJECTED"
    assert back["has_more"] is False
    again = read(producer, back["next_cursor"])
    assert (again["items"], again["next_cursor"]) == ([], back["next_cursor"])


def test_the_events_are_the_documents_the_webhooks_carry(quiet: LiveServer) -> None:
    producer = quiet.new_client("producer", "agent-a")
    with quiet.admin() as admin, Receiver() as hook:
        admin.post("/webhook-endpoints", json={"url": hook.url})
        new_task(producer)
        settled(producer, None, 1)
        while deliver(quiet):
            pass
        delivered = [json.loads(r.body) for r in hook.received]
    assert read(producer)["items"] == delivered


def test_pages_follow_each_other_without_gaps_or_repeats(quiet: LiveServer) -> None:
    producer = quiet.new_client("producer", "agent-a")
    tasks = [new_task(producer) for _ in range(7)]
    settled(producer, None, 7)
    collected: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = read(producer, cursor, limit=3)
        pages += 1
        collected += [e["data"]["id"] for e in page["items"]]
        cursor = page["next_cursor"]
        if not page["has_more"]:
            break
    assert collected == tasks
    assert pages == 3


def test_another_producers_events_never_appear(quiet: LiveServer) -> None:
    mine = quiet.new_client("producer", "agent-a")
    theirs = quiet.new_client("producer", "agent-b")
    reviewer = quiet.new_client("reviewer", "rev-1")
    own = new_task(mine)
    other = new_task(theirs)
    decide(reviewer, other)
    settled(mine, None, 1)
    settled(theirs, None, 3)
    assert {e["data"]["id"] for e in read(mine)["items"]} == {own}
    assert {e["data"]["id"] for e in read(theirs)["items"]} == {other}
    # A reviewer has no events of its own to catch up on.
    assert reviewer.get("/events").json()["error_code"] == "ERR_FORBIDDEN"


@pytest.mark.parametrize(
    "cursor", ["nonsense", "W10", "WyJ4Il0", "Wy0xXQ", "WzFd", "WzEsIngiLCJ5Il0"]
)
def test_a_cursor_the_service_did_not_give_is_refused(
    quiet: LiveServer, engine: str, cursor: str
) -> None:
    producer = quiet.new_client("producer", "agent-a")
    response = producer.get("/events", params={"cursor": cursor})
    if cursor == "WzFd" and engine == "sqlite":  # [1]: a position SQLite could give
        assert response.status_code == 200
        return
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] == "cursor"


def test_the_sdk_reads_everything_since_a_cursor_and_returns_the_new_one(
    quiet: LiveServer,
) -> None:
    producer = quiet.new_client("producer", "agent-a")
    reviewer = quiet.new_client("reviewer", "rev-1")
    assert producer.key is not None
    with Signoff(quiet.base_url, producer.key, backoff=0) as agent:
        start = agent.events_since(None)
        assert start.events == []
        first = new_task(producer)
        decide(reviewer, first)
        settled(producer, start.cursor, 3)
        caught = agent.events_since(start.cursor, page_size=1)
        assert [e["type"] for e in caught.events] == [
            "task.created",
            "task.claimed",
            "task.resolved",
        ]
        assert agent.events_since(caught.cursor).events == []

    async def async_agent() -> list[str]:
        async with AsyncSignoff(quiet.base_url, str(producer.key), backoff=0) as client:
            result = await client.events_since(None, page_size=2)
            return [e["type"] for e in result.events]

    assert asyncio.run(async_agent()) == ["task.created", "task.claimed", "task.resolved"]


def test_the_example_catches_up_and_keeps_its_cursor(quiet: LiveServer, tmp_path: Any) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    producer = quiet.new_client("producer", "agent-a")
    reviewer = quiet.new_client("reviewer", "rev-1")
    example = Path(__file__).parents[2] / "examples" / "catch_up.py"
    cursor_file = tmp_path / "agent.cursor"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    env |= {"SIGNOFF_URL": quiet.base_url, "SIGNOFF_API_KEY": str(producer.key)}

    def run() -> list[str]:
        done = subprocess.run(
            [sys.executable, str(example), "--cursor-file", str(cursor_file)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return done.stdout.splitlines()

    task = new_task(producer)
    settled(producer, None, 1)
    assert run() == [f"task.created {task} PENDING_REVIEW ", "caught up: 1 events"]
    decide(reviewer, task)
    settled(producer, cursor_file.read_text().strip(), 2)
    assert run() == [
        f"task.claimed {task} CLAIMED ",
        f"task.resolved {task} RESOLVED REJECTED",
        "caught up: 2 events",
    ]
    assert run() == ["caught up: 0 events"]
