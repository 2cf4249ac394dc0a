"""Edit, then approve, on a task decided by votes, in a real browser on both engines: the
vote form offers the fields its producer declared editable, by keyboard alone; a value of
the wrong kind is said at its field and changes nothing; the edit sent from the console
leaves what the same edit through the API leaves (revision 2 by the voter, the earlier
vote void, the edit the first vote on it). The one-person decide form, whose edit form the
vote form shares, says a wrong kind at its field the same way."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.console.conftest import Served, axe_violations
from tests.support import escalation

expect = pytest.importorskip("playwright.sync_api").expect

SUBJECT = {"title": "Pay ACME", "amount": 100, "memo": "for March", "actions": [{"id": "pay"}]}
EDITED = SUBJECT | {"amount": 90}
#: What differs between two tasks by the nature of things, not by their door's doing.
UNSHARED = {"id", "task_id", "idempotency_key", "at", "created_at", "updated_at", "door"}


def _twins(served: Served) -> tuple[str, str]:
    """Two tasks alike, decided by two approvals, with /amount and /memo editable."""
    producer = served.key("producer", "bot")
    made = []
    for _ in range(2):
        body = escalation(subject=SUBJECT, editable=["/amount", "/memo"])
        body["approval_rule"] = {"approvals": 2}
        with served.api(producer) as client:
            answer = client.post("/tasks/escalate", json=body)
        assert answer.status_code == 201, answer.text
        made.append(str(answer.json()["task_id"]))
    return made[0], made[1]


def _reviewer_key(served: Served, principal_id: str) -> str:
    with served.api() as admin:
        made = admin.post("/api-keys", json={"role": "reviewer", "principal_id": principal_id})
    assert made.status_code == 201, made.text
    return str(made.json()["key"])


def _vote(served: Served, key: str, task_id: str, **body: Any) -> dict[str, Any]:
    with served.api(key) as client:
        task = client.get(f"/tasks/{task_id}").json()
        pin = {"revision": task["current_revision"], "digest": task["digest"]}
        answer = client.post(f"/tasks/{task_id}/votes", json=pin | {"decision": "APPROVED"} | body)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def _scrubbed(value: Any, task_id: str) -> Any:
    """``value`` without what two twin tasks may not share, its task named alike."""
    if isinstance(value, dict):
        return {k: _scrubbed(v, task_id) for k, v in value.items() if k not in UNSHARED}
    if isinstance(value, list | tuple):
        return [_scrubbed(v, task_id) for v in value]
    if isinstance(value, str):
        return value.replace(task_id, "<task>")
    return value


def _state(served: Served, key: str, task_id: str) -> dict[str, Any]:
    """The task, its revisions and its trail as the API tells them, scrubbed."""
    with served.api(key) as client:
        task = client.get(f"/tasks/{task_id}").json()
        revisions = [
            client.get(f"/tasks/{task_id}/revisions/{n}").json()
            for n in range(1, int(task["current_revision"]) + 1)
        ]
        trail = client.get(f"/tasks/{task_id}/events").json()["items"]
    keep = ("status", "decision", "current_revision", "digest", "votes", "approval_progress")
    scrubbed = _scrubbed(
        {
            "task": {k: task.get(k) for k in keep},
            "trail": [(e["type"], e["actor_id"], e["details"]) for e in trail],
        },
        task_id,
    )
    return scrubbed | {
        "revisions": [(r["revision"], r["created_by"], r["subject"]) for r in revisions]
    }


def test_a_voter_edits_and_approves_from_the_console_as_through_the_api(
    served: Served, signed_in: Any
) -> None:
    # The people who may vote come first: a rule they cannot meet is refused.
    kim = _reviewer_key(served, "kim")
    mia = signed_in("mia", width=375)
    mia_key = _reviewer_key(served, "mia")
    by_api, by_console = _twins(served)
    for task_id in (by_api, by_console):
        _vote(served, kim, task_id)  # a vote on revision 1, which the edit voids

    # Through the API: mia's edit of /amount, approved.
    edited = _vote(
        served, mia_key, by_api, decision="APPROVED_WITH_EDITS", subject=EDITED, notes=""
    )
    assert edited["current_revision"] == 2

    # In the console: the vote form offers the editable fields, prefilled.
    mia.goto(f"/console/tasks/{by_console}")
    edits = mia.get_by_role("group", name="Edit before approving (with Vote: Edit and approve)")
    amount = edits.get_by_label("/amount")
    expect(amount).to_have_value("100")
    expect(edits.get_by_label("/memo")).to_have_value("for March")
    expect(edits.get_by_label("/title")).to_have_count(0)  # not the producer's to give
    edit_button = mia.get_by_role("button", name="Vote: Edit and approve")
    expect(edit_button).to_have_attribute("data-key", "d")
    assert axe_violations(mia) == []
    before = _state(served, kim, by_console)

    # A value of another kind: said at its field, nothing changed, what was typed kept.
    amount.fill("ninety")
    mia.keyboard.press("Escape")  # out of the field: the keys work again
    mia.keyboard.press("d")
    confirm = mia.locator("#confirm-text")
    expect(confirm).to_contain_text("Vote: Edit and approve “")
    expect(confirm).to_contain_text(
        "Your edit becomes revision 2, by you; the vote so far stops counting,"
        " and your approval is the first vote on it."
    )
    mia.keyboard.press("Enter")
    refused = mia.locator(".notice.error")
    expect(refused).to_have_attribute("data-error-code", "ERR_VALIDATION")
    problem = mia.locator("#edit-amount-error")
    expect(problem).to_contain_text("Must stay a number: type a number (as JSON)")
    expect(problem).to_contain_text("Nothing was recorded.")
    amount = mia.get_by_label("/amount")
    expect(amount).to_have_value("ninety")
    expect(amount).to_have_attribute("aria-invalid", "true")
    expect(amount).to_have_attribute("aria-describedby", "edit-amount-error")
    expect(amount).to_be_focused()  # the field to correct
    assert _state(served, kim, by_console) == before
    assert axe_violations(mia) == []

    # Corrected, by keyboard alone: the edit is recorded as the first vote on revision 2.
    mia.keyboard.press("Control+a")
    mia.keyboard.type("90")
    mia.keyboard.press("Escape")
    mia.keyboard.press("d")
    expect(confirm).to_contain_text("the vote so far stops counting")
    mia.keyboard.press("Enter")
    expect(mia.locator(".notice.ok")).to_contain_text(
        "Your edit is revision 2, by you. Your vote to approve is recorded and counts."
        " 1 of 2 approvals."
    )
    expect(mia.locator("#vote-progress")).to_contain_text("1 of 2 approvals")
    expect(mia.locator(".vote-list")).to_contain_text("mia voted to approve revision 2")
    expect(mia.locator(".vote-list")).not_to_contain_text("kim")
    assert axe_violations(mia) == []

    # What the console's edit left is what the API's left, but the door.
    console_state, api_state = _state(served, kim, by_console), _state(served, kim, by_api)
    assert console_state == api_state
    task = console_state["task"]
    assert (task["status"], task["current_revision"]) == ("PENDING_REVIEW", 2)
    assert [(v["voter"], v["decision"], v["revision"]) for v in task["votes"]] == [
        ("mia", "APPROVED", 2)
    ]
    assert console_state["revisions"][1] == (2, "mia", EDITED)
    kinds = [kind for kind, _, _ in console_state["trail"]]
    assert kinds[-3:] == ["task.revised", "task.votes_voided", "task.vote_cast"]
    with served.api(kim) as client:
        trail = client.get(f"/tasks/{by_console}/events").json()["items"]
    assert trail[-1]["details"]["door"] == "console"


def test_the_decide_form_says_a_wrong_kind_at_its_field(served: Served, signed_in: Any) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer, subject=SUBJECT, editable=["/amount"])
    dan = signed_in("dan")
    dan.goto(f"/console/tasks/{task_id}")
    dan.get_by_role("button", name="Claim").click()
    amount = dan.get_by_role("group", name="Edit before approving").get_by_label("/amount")
    amount.fill("[90]")
    dan.keyboard.press("Escape")
    dan.keyboard.press("d")
    dan.keyboard.press("Enter")
    expect(dan.locator("#edit-amount-error")).to_contain_text("Must stay a number")
    amount = dan.get_by_label("/amount")
    expect(amount).to_have_value("[90]")
    expect(amount).to_be_focused()
    with served.api(producer) as api:
        task = api.get(f"/tasks/{task_id}").json()
    assert (task["status"], task["current_revision"], task["claimed_by"]) == ("CLAIMED", 1, "dan")
    assert axe_violations(dan) == []
