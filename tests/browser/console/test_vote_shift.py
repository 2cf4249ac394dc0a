"""Votes in a reviewer's shift, in a real browser on both engines: the "Awaiting my vote"
view with its count, and a reviewing session that goes from vote to vote by keyboard
alone (no claim, no lease), with the one confirmation before each vote."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.browser.console.conftest import Served, axe_violations
from tests.browser.console.test_votes import SUBJECT, members
from tests.support import escalation

expect = pytest.importorskip("playwright.sync_api").expect

TASK_URL = re.compile(r"/console/tasks/([0-9a-f-]{36})\?")


def ask(served: Served, producer: str, rule: dict[str, Any] | None) -> str:
    fields = {"approval_rule": rule} if rule is not None else {}
    with served.api(producer) as client:
        made = client.post("/tasks/escalate", json=escalation(subject=SUBJECT, **fields))
    assert made.status_code == 201, made.text
    return str(made.json()["task_id"])


def task_on_screen(page: Any) -> str:
    found = TASK_URL.search(page.url)
    assert found, page.url
    return found.group(1)


@pytest.mark.parametrize("width", [1280, 375])
def test_a_reviewer_votes_through_what_awaits_their_vote_by_keyboard(
    served: Served, signed_in: Any, width: int
) -> None:
    members(served, lars=["legal"], finn=["finance"])
    producer = served.key("producer", "bot")
    both = {"groups": {"legal": 1, "finance": 1}}
    awaiting = {ask(served, producer, both), ask(served, producer, both)}
    finance_only = ask(served, producer, {"groups": {"finance": 1}})
    single = ask(served, producer, None)
    lena = signed_in("lena", groups=["legal"], width=width)

    lena.goto("/console?view=votes")
    tab = lena.get_by_role("link", name=re.compile("^Awaiting my vote"))
    expect(tab).to_have_attribute("aria-current", "page")
    expect(tab.locator(".count")).to_have_text("(2)")
    rows = lena.locator("tr[data-task-id]")
    expect(rows).to_have_count(2)
    assert {rows.nth(i).get_attribute("data-task-id") for i in range(2)} == awaiting
    for other in (finance_only, single):
        expect(lena.locator(f'tr[data-task-id="{other}"]')).to_have_count(0)
    assert axe_violations(lena) == []

    # Keyboard alone: start reviewing, vote with a, confirm with Enter, land on the next.
    lena.locator("body").focus()
    lena.keyboard.press("n")
    expect(lena.locator("#session-progress")).to_contain_text(
        "0 decided in this session, 1 waiting"
    )
    first = task_on_screen(lena)
    assert first in awaiting
    expect(lena.get_by_role("button", name="Claim")).to_have_count(0)  # no lease for votes
    expect(lena.locator("#session")).to_contain_text("no claim, no lease")
    lena.keyboard.press("a")
    confirm = lena.locator("#confirm-text")
    expect(confirm).to_contain_text("Vote: Approve")
    expect(confirm).not_to_contain_text("completes the quorum")
    lena.keyboard.press("Enter")
    expect(lena.locator("#session-progress")).to_contain_text(
        "1 decided in this session, 0 waiting"
    )
    second = task_on_screen(lena)
    assert second in awaiting - {first}
    lena.keyboard.press("a")
    expect(confirm).to_contain_text("Vote: Approve")
    lena.keyboard.press("Enter")
    expect(lena.locator("#session-end")).to_contain_text(
        "you decided 2 tasks in this reviewing session"
    )

    # Both votes are recorded (and counted: legal's place), the tasks still open.
    with served.api(producer) as api:
        for task_id in awaiting:
            task = api.get(f"/tasks/{task_id}").json()
            assert [v["voter"] for v in task["votes"]] == ["lena"]
            assert task["status"] == "PENDING_REVIEW"
            assert task["approval_progress"]["text"] == (
                "1 of 2 approvals — needs 1 more approval; finance can give it"
            )
    lena.goto("/console?view=votes")
    expect(tab.locator(".count")).to_have_text("(0)")
    expect(lena.locator("tr.empty")).to_be_visible()
    assert axe_violations(lena) == []


def test_a_session_from_available_goes_on_to_the_votes_once_nothing_is_left_to_claim(
    served: Served, signed_in: Any
) -> None:
    members(served, lars=["legal"], finn=["finance"])
    producer = served.key("producer", "bot")
    single = ask(served, producer, None)
    voted = ask(served, producer, {"approvals": 2})
    ann = signed_in("ann")
    ann.goto("/console?view=available")
    ann.locator("body").focus()
    ann.keyboard.press("n")
    progress = ann.locator("#session-progress")
    # The task to claim first; the vote task waits its turn (and is counted as waiting).
    expect(progress).to_contain_text("0 decided in this session, 1 waiting")
    assert task_on_screen(ann) == single
    expect(ann.locator("#lease-timer")).to_be_visible()
    ann.keyboard.press("a")
    ann.keyboard.press("Enter")
    expect(progress).to_contain_text("1 decided in this session, 0 waiting")
    assert task_on_screen(ann) == voted
    expect(ann.locator("#lease-timer")).to_have_count(0)  # no claim for a vote
    ann.keyboard.press("a")
    expect(ann.locator("#confirm-text")).to_contain_text("Vote: Approve")
    ann.keyboard.press("Enter")
    expect(ann.locator("#session-end")).to_contain_text(
        "you decided 2 tasks in this reviewing session"
    )
    with served.api(producer) as api:
        assert api.get(f"/tasks/{single}").json()["operator_id"] == "ann"
        task = api.get(f"/tasks/{voted}").json()
    assert ([v["voter"] for v in task["votes"]], task["claimed_by"]) == (["ann"], None)
