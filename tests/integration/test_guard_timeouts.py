"""``@requires_approval`` with time limits: the producer's limit travels with the
escalation (and a rejection by it is told from a person's), and a caller that stops
waiting cancels its task, so a later approval never authorises a call nobody awaits."""

from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from signoff.client import (
    AsyncSignoff,
    DecisionTimeout,
    Rejected,
    Signoff,
    arequires_approval,
    requires_approval,
)
from signoff.client._models import TIMEOUT_ACTOR
from signoff.services.waiting import SYSTEM_PRINCIPAL
from signoff.workers.sweeper import Sweeper
from tests.integration.test_guard import _decide_when_waiting
from tests.integration.test_timeouts import timed
from tests.processes import wait_for
from tests.support import LiveServer

__all__ = ["timed"]  # the fixture, shared with test_timeouts.py

TS_MODELS = Path(__file__).resolve().parents[2] / "sdk" / "typescript" / "src" / "models.ts"


def test_both_sdks_name_the_principal_that_applies_time_limits() -> None:
    assert SYSTEM_PRINCIPAL.principal_id == TIMEOUT_ACTOR
    declared = re.search(r'TIMEOUT_ACTOR = "([^"]+)"', TS_MODELS.read_text("utf-8"))
    assert declared is not None
    assert declared.group(1) == TIMEOUT_ACTOR


def _tasks(agent: Signoff) -> list[Any]:
    return list(agent.list_tasks(entity_type="function_call"))


def test_a_caller_that_stops_waiting_cancels_its_task_and_the_same_call_asks_anew(
    server: LiveServer,
) -> None:
    agent = Signoff(server.base_url, str(server.new_client("producer").key))
    ran: list[int] = []

    def refund(amount_eur: int) -> int:
        ran.append(amount_eur)
        return amount_eur

    impatient = requires_approval(agent, timeout=0.3)(refund)
    patient = requires_approval(agent, timeout=60)(refund)
    with pytest.raises(DecisionTimeout) as gave_up:
        impatient(40)
    assert any("cancelled" in note for note in gave_up.value.__notes__)
    (first,) = _tasks(agent)
    assert first.status == "CANCELLED"
    # The same call again is asked anew (the cancelled task is never reused), and runs
    # once a person approves it.
    _decide_when_waiting(server.new_client("reviewer"), "APPROVED", [])
    assert patient(40) == 40
    assert ran == [40]
    tasks = {task.id: task for task in _tasks(agent)}
    assert len(tasks) == 2
    assert tasks[first.id].status == "CANCELLED"
    (second,) = [task for task in tasks.values() if task.id != first.id]
    assert (second.status, second.decision) == ("RESOLVED", "APPROVED")


def test_the_producers_time_limit_rejects_and_says_it_was_not_a_person(
    timed: LiveServer,
) -> None:
    server = timed
    agent = Signoff(server.base_url, str(server.new_client("producer").key))
    ran: list[int] = []
    outcome: list[BaseException] = []

    @requires_approval(agent, timeout=120, timeout_seconds=600, on_timeout="reject")
    def refund(amount_eur: int) -> None:
        ran.append(amount_eur)

    def call() -> None:
        try:
            refund(70)
        except BaseException as error:  # examined in the test's thread
            outcome.append(error)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    wait_for(lambda: _tasks(agent), what="the call's escalation")
    (task,) = _tasks(agent)
    assert task.deadline_at is not None  # the limit went with the escalation
    server.clock.advance(600)
    # The server's own sweeper: its commit wakes the caller's long-poll at once.
    assert server.run_in_server(lambda context: Sweeper(context).sweep_once()) == 1
    caller.join(timeout=120)
    (raised,) = outcome
    assert isinstance(raised, Rejected)
    assert raised.task.timed_out
    assert raised.task.operator_id == TIMEOUT_ACTOR
    assert ran == []


def test_a_persons_rejection_is_not_a_time_out(server: LiveServer) -> None:
    agent = Signoff(server.base_url, str(server.new_client("producer").key))

    @requires_approval(agent, timeout=60, timeout_seconds=3600)
    def refund(amount_eur: int) -> None:
        raise AssertionError("must not run")

    _decide_when_waiting(server.new_client("reviewer"), "REJECTED", [])
    with pytest.raises(Rejected) as refused:
        refund(5)
    assert refused.value.task.decision == "REJECTED"
    assert not refused.value.task.timed_out


def test_the_async_twin_cancels_its_task_when_the_caller_stops_waiting(
    server: LiveServer,
) -> None:
    key = str(server.new_client("producer").key)

    async def call() -> None:
        async with AsyncSignoff(server.base_url, key) as client:

            @arequires_approval(client, timeout=0.3)
            async def publish(slug: str) -> None:
                raise AssertionError("must not run")

            await publish("rates-held")

    with pytest.raises(DecisionTimeout):
        asyncio.run(call())
    (task,) = _tasks(Signoff(server.base_url, key))
    assert task.status == "CANCELLED"
