"""``@requires_approval`` against a real Signoff (SQLite and PostgreSQL): the function runs
once, with the arguments a person approved, and never before or otherwise."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from signoff.client import (
    ApprovalExpired,
    AsyncSignoff,
    DecisionTimeout,
    Rejected,
    RevisionRequested,
    Signoff,
    arequires_approval,
    digest,
    requires_approval,
)
from tests.support import Client, LiveServer


def _decide_when_waiting(reviewer: Client, decision: str, seen: list[dict[str, Any]]) -> None:
    """A person: wait for the call to show up, read it, decide."""

    def person() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            page = reviewer.get("/tasks", params={"status": "PENDING_REVIEW"}).json()
            if page["items"]:
                task = page["items"][0]
                seen.append(task)
                lease = reviewer.claim(task["id"]).json()
                body = {"decision": decision, "revision": lease["current_revision"],
                        "digest": lease["digest"], "notes": "checked the amount"}  # fmt: skip
                answer = reviewer.resolve(task["id"], lease["lease_token"], body)
                assert answer.status_code == 200, answer.text
                return
            time.sleep(0.05)

    threading.Thread(target=person, daemon=True).start()


@pytest.fixture
def producer_key(server: LiveServer) -> str:
    return str(server.new_client("producer").key)


@pytest.fixture
def agent(server: LiveServer, producer_key: str) -> Signoff:
    return Signoff(server.base_url, producer_key)


def test_an_approved_call_runs_once_with_the_approved_arguments(
    server: LiveServer, agent: Signoff
) -> None:
    ran: list[tuple[str, int]] = []

    @requires_approval(agent, reason="REFUND_REVIEW", timeout=60)
    def refund(customer: str, amount_eur: int, currency: str = "EUR") -> dict[str, Any]:
        ran.append((customer, amount_eur))
        return {"refunded": amount_eur, "currency": currency}

    seen: list[dict[str, Any]] = []
    reviewer = server.new_client("reviewer")
    _decide_when_waiting(reviewer, "APPROVED", seen)
    assert refund("c-17", 50) == {"refunded": 50, "currency": "EUR"}
    assert ran == [("c-17", 50)]

    # The reviewer saw the call: the function and every argument, defaults included.
    with Signoff(server.base_url, str(reviewer.key)) as reads:
        subject = reads.get_revision(seen[0]["id"]).subject
    assert subject is not None
    assert subject["function"].endswith("refund")
    assert subject["arguments"] == {"customer": "c-17", "amount_eur": 50, "currency": "EUR"}
    task = agent.get_task(seen[0]["id"])
    assert task.execution_status == "COMPLETED"
    assert task.approved_digest == digest(subject)
    # It read as words from the function's name and arguments, never a hash.
    assert seen[0]["headline"]["title"] == "Run refund: customer c-17, amount_eur 50, currency EUR"
    assert task.headline is not None
    assert [(f.label, f.text) for f in task.headline.fields] == [
        ("customer", "c-17"),
        ("amount_eur", "50"),
        ("currency", "EUR"),
    ]

    # The same call again (a re-run after a crash): the stored result, no second refund.
    assert refund("c-17", 50) == {"refunded": 50, "currency": "EUR"}
    assert ran == [("c-17", 50)]


def test_other_arguments_are_another_call_that_needs_its_own_approval(
    server: LiveServer, agent: Signoff
) -> None:
    ran: list[int] = []

    def refund(amount_eur: int) -> None:
        ran.append(amount_eur)

    # The same function behind two guards: one waits for the person, the other gives up
    # soon (nobody decides the second call, so a long wait would only run to its end).
    patient = requires_approval(agent, timeout=60)(refund)
    impatient = requires_approval(agent, timeout=1)(refund)
    _decide_when_waiting(server.new_client("reviewer"), "APPROVED", [])
    patient(50)
    with pytest.raises(DecisionTimeout):  # 5000 was never approved: it never runs
        impatient(5000)
    assert ran == [50]
    # The impatient caller gave up: its task (the 5000 call) is cancelled, so a person who
    # approves it later authorises nothing.
    reviewer = server.new_client("reviewer")
    assert reviewer.get("/tasks", params={"status": "PENDING_REVIEW"}).json()["items"] == []
    assert len(reviewer.get("/tasks", params={"status": "CANCELLED"}).json()["items"]) == 1


@pytest.mark.parametrize(
    ("decision", "raised"), [("REJECTED", Rejected), ("REVISION_REQUESTED", RevisionRequested)]
)
def test_a_refusal_raises_and_the_function_never_runs(
    server: LiveServer, agent: Signoff, decision: str, raised: type[Exception]
) -> None:
    ran: list[int] = []

    @requires_approval(agent, timeout=60)
    def refund(amount_eur: int) -> None:
        ran.append(amount_eur)

    _decide_when_waiting(server.new_client("reviewer"), decision, [])
    with pytest.raises(raised) as refused:
        refund(620)
    assert refused.value.task.decision == decision  # type: ignore[attr-defined]
    assert refused.value.task.notes == "checked the amount"  # type: ignore[attr-defined]
    assert ran == []


def test_a_cancelled_call_raises_expired(
    server: LiveServer, agent: Signoff, producer_key: str
) -> None:
    @requires_approval(agent, timeout=60)
    def refund(amount_eur: int) -> None:
        raise AssertionError("must not run")

    def producer_changes_its_mind() -> None:
        with Signoff(server.base_url, producer_key) as other:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                for task in other.list_tasks(status="PENDING_REVIEW"):
                    other.cancel(task)
                    return
                time.sleep(0.05)

    threading.Thread(target=producer_changes_its_mind, daemon=True).start()
    with pytest.raises(ApprovalExpired) as expired:
        refund(10)
    assert expired.value.task.status == "CANCELLED"


def test_the_async_twin_runs_an_approved_coroutine_once(server: LiveServer) -> None:
    key = str(server.new_client("producer").key)
    ran: list[int] = []

    async def story() -> Any:
        async with AsyncSignoff(server.base_url, key) as client:

            @arequires_approval(client, timeout=60)
            async def publish(article_id: int) -> str:
                ran.append(article_id)
                return f"published {article_id}"

            _decide_when_waiting(server.new_client("reviewer"), "APPROVED", [])
            first = await publish(7)
            again = await publish(7)
            return first, again

    assert asyncio.run(story()) == ("published 7", "published 7")
    assert ran == [7]


def test_arguments_that_are_not_json_are_refused_before_anything_is_sent(
    agent: Signoff,
) -> None:
    @requires_approval(agent, timeout=1)
    def send(payload: object) -> None:
        raise AssertionError("must not run")

    with pytest.raises(TypeError, match="JSON"):
        send(object())


def test_the_guarded_refund_example_refunds_once(server: LiveServer, producer_key: str) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "guarded_refund.py"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    env |= {"SIGNOFF_URL": server.base_url, "SIGNOFF_API_KEY": producer_key}

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(example), "c-17", "50", "--timeout", "60"],
            env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    _decide_when_waiting(server.new_client("reviewer"), "APPROVED", [])
    first = run()
    assert first.returncode == 0, first.stderr
    assert "refunding 50 EUR to c-17" in first.stdout
    again = run()  # the same call: the stored result, no second refund
    assert again.returncode == 0, again.stderr
    assert "refunding" not in again.stdout
    assert "'refunded_eur': 50" in again.stdout
