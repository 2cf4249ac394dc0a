"""Votes through mixed doors — the API, the console's form and the e-mail resume link —
count the same, on both engines, with real SMTP for the links."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from signoff.domain.clock import ManualClock
from tests.doors import GROUP, OTHER_GROUP, SUBJECT, Answer, Deployment, deployments
from tests.support import escalation


@pytest.fixture
def deployment(engine: str, database_url: str, clock: ManualClock) -> Iterator[Deployment]:
    with deployments({engine: database_url}, clock) as built:
        yield built[0]


def vote_console(deployment: Deployment, who: str, handle: str, decision: str) -> Answer:
    task = deployment.api[who].get(f"/tasks/{deployment.task_id(handle)}").json()
    form = {
        "decision": decision,
        "revision": str(task["current_revision"]),
        "digest": task["digest"],
    }
    if decision != "APPROVED":
        form["notes"] = "see the figure"
    return deployment._console_action(who, handle, "vote", form)


def vote_api(deployment: Deployment, who: str, handle: str, decision: str) -> Answer:
    client = deployment.api[who]
    task = client.get(f"/tasks/{deployment.task_id(handle)}").json()
    body = {"decision": decision, "revision": task["current_revision"], "digest": task["digest"]}
    if decision != "APPROVED":
        body["notes"] = "see the figure"
    return deployment.answer(client.post(f"/tasks/{deployment.task_id(handle)}/votes", json=body))


def state(deployment: Deployment, handle: str) -> dict[str, Any]:
    return dict(deployment.producer.get(f"/tasks/{deployment.task_id(handle)}").json())


def ask(deployment: Deployment, handle: str, rule: dict[str, Any], **extra: Any) -> None:
    body = escalation(f"{handle}-{uuid.uuid4().hex[:6]}", subject=SUBJECT, approval_rule=rule)
    made = deployment.escalate(handle, body | extra)
    assert made.status == 201, made
    deployment.send_mail()


def test_two_of_three_through_the_console_and_a_link(deployment: Deployment) -> None:
    ask(deployment, "pay", {"approvals": 2}, assigned_group=GROUP)
    assert ("alice", "pay") in deployment.links
    assert ("sam", "pay") in deployment.links
    # The producer's principal, through any door, is refused.
    own = vote_api(deployment, "bot", "pay", "APPROVED")
    assert (own.status, own.error_code) == (403, "ERR_SELF_APPROVAL")
    own_console = vote_console(deployment, "bot", "pay", "APPROVED")
    assert own_console.error_code == "ERR_SELF_APPROVAL"
    first = vote_console(deployment, "alice", "pay", "APPROVED")
    assert first.status == 200, first
    assert any("1 of 2 approvals" in text for text in first.body), first.body
    # The same person through another door counts once: the API refuses a second vote,
    # and their link shows the vote they cast instead of a form.
    again = vote_api(deployment, "alice", "pay", "REJECTED")
    assert (again.status, again.error_code) == (409, "ERR_ALREADY_VOTED"), again
    link = deployment.links[("alice", "pay")]
    shown = deployment.console["alice"].get(link)
    assert "Your vote is recorded: APPROVED" in shown.text
    assert 'name="decision"' not in shown.text
    by_link = deployment.resolve_link("alice", "pay", "REJECTED", "no", form=True)
    assert by_link.status == 200, by_link
    after = state(deployment, "pay")
    assert after["status"] == "PENDING_REVIEW"
    assert [(v["voter"], v["decision"]) for v in after["votes"]] == [("alice", "APPROVED")]
    last = deployment.resolve_link("sam", "pay", "APPROVED", None, form=True)
    assert last.status == 200, last
    decided = state(deployment, "pay")
    assert (decided["status"], decided["decision"]) == ("RESOLVED", "APPROVED")
    assert [(v["voter"], v["door"]) for v in decided["votes"]] == [
        ("alice", "console"),
        ("sam", "link"),
    ]
    page = deployment.console["alice"].get(f"/console/tasks/{deployment.task_id('pay')}")
    assert "Approved: 2 of 2 approvals" in page.text
    assert re.search(r"sam</strong> voted to approve", page.text)


def test_per_group_sign_off_through_a_link_and_the_api(deployment: Deployment) -> None:
    ask(deployment, "grouped", {"groups": {GROUP: 1, OTHER_GROUP: 1}})
    first = deployment.resolve_link("alice", "grouped", "APPROVED", None, form=True)
    assert first.status == 200, first
    waiting = state(deployment, "grouped")["approval_progress"]
    assert waiting["waiting_on"] == [OTHER_GROUP]
    last = vote_api(deployment, "sam", "grouped", "APPROVED")
    assert last.status == 200, last
    assert state(deployment, "grouped")["decision"] == "APPROVED"


def test_a_revision_after_one_vote_resets_and_asks_the_voter_again(
    deployment: Deployment,
) -> None:
    ask(deployment, "revised", {"approvals": 2}, assigned_group=GROUP)
    old_link = deployment.links[("alice", "revised")]
    assert vote_console(deployment, "alice", "revised", "APPROVED").status == 200
    assert state(deployment, "revised")["approval_progress"]["approvals"] == 1
    changed = deployment.revise("revised", "900 EUR")
    assert changed.status == 200, changed
    after = state(deployment, "revised")
    assert (after["votes"], after["approval_progress"]["approvals"]) == ([], 0)
    told = deployment.server.rows(
        "notifications", task_id=uuid.UUID(deployment.task_id("revised")), kind="votes_voided"
    )
    assert [row["principal_id"] for row in told] == ["alice"]
    deployment.send_mail()
    assert deployment.links[("alice", "revised")] != old_link
    # The fresh link votes on revision 2; the vote counts again.
    again = deployment.resolve_link("alice", "revised", "APPROVED", None, form=True)
    assert again.status == 200, again
    assert state(deployment, "revised")["votes"][0]["revision"] == 2


def test_a_veto_through_the_console_ends_it(deployment: Deployment) -> None:
    ask(deployment, "vetoed", {"approvals": 2}, assigned_group=GROUP)
    assert vote_api(deployment, "alice", "vetoed", "APPROVED").status == 200
    veto = vote_console(deployment, "sam", "vetoed", "REJECTED")
    assert veto.status == 200, veto
    ended = state(deployment, "vetoed")
    assert (ended["status"], ended["decision"], ended["operator_id"]) == (
        "RESOLVED",
        "REJECTED",
        "sam",
    )
    link = deployment.resolve_link("alice", "vetoed", "APPROVED", None, form=True)
    assert link.status == 200  # the link shows the recorded outcome; nothing changes
    assert state(deployment, "vetoed")["decision"] == "REJECTED"


def test_the_console_says_a_rejection_from_outside_the_groups_is_no_veto(
    deployment: Deployment,
) -> None:
    ask(deployment, "outside", {"approvals": 2, "groups": {OTHER_GROUP: 1}})
    page = deployment.console["alice"].get(f"/console/tasks/{deployment.task_id('outside')}")
    assert "does not end the vote: at this stage only auditors can" in page.text
    assert 'name="stage" value="1"' in page.text
    assert (
        "does not end the vote"
        not in deployment.console["sam"].get(f"/console/tasks/{deployment.task_id('outside')}").text
    )
    outside = vote_console(deployment, "alice", "outside", "REJECTED")
    assert outside.status == 200, outside
    assert any("recorded as a vote against but does not end" in t for t in outside.body)
    assert state(deployment, "outside")["status"] == "PENDING_REVIEW"
    veto = vote_console(deployment, "sam", "outside", "REJECTED")
    assert any("ends the vote" in text for text in veto.body), veto.body
    assert state(deployment, "outside")["decision"] == "REJECTED"
