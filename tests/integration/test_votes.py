"""Approval rules through the API, on both engines: N of M, per-group minimums, stages,
veto, exclusions, votes bound to revisions, and one quorum under racing votes."""

from __future__ import annotations

import copy
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.support import Client, LiveServer, escalation

SUBJECT: dict[str, Any] = {
    "title": "Pay ACME",
    "amount": "100 EUR",
    "note": "quarterly",
    "actions": [{"id": "pay"}],
}


def person(server: LiveServer, who: str, groups: list[str] | None = None) -> Client:
    with server.admin() as admin:
        made = admin.post(
            "/api-keys", json={"role": "reviewer", "principal_id": who, "groups": groups or []}
        )
    assert made.status_code == 201, made.text
    return server.client(made.json()["key"], who)


@pytest.fixture
def producer(server: LiveServer):  # type: ignore[no-untyped-def]
    with server.new_client("producer", "bot") as client:
        yield client


def ask(producer: Client, rule: Any, **extra: Any) -> dict[str, Any]:
    body = escalation(subject=copy.deepcopy(SUBJECT), approval_rule=rule, **extra)
    response = producer.escalate(body)
    assert response.status_code == 201, response.text
    return dict(response.json())


def cast(
    voter: Client, task: dict[str, Any], decision: str = "APPROVED", notes: str | None = None
) -> httpx.Response:
    current = voter.get(f"/tasks/{task['id']}").json()
    body: dict[str, Any] = {
        "decision": decision,
        "revision": current["current_revision"],
        "digest": current["digest"],
    }
    if notes is not None:
        body["notes"] = notes
    return voter.post(f"/tasks/{task['id']}/votes", json=body)


def events(server: LiveServer, task_id: str, event_type: str) -> int:
    return server.count("task_events", task_id=uuid.UUID(task_id), event_type=event_type)


def test_two_of_three_approves_on_the_second_vote_and_opens_the_gate(
    server: LiveServer, producer: Client
) -> None:
    alice, bob = person(server, "alice"), person(server, "bob")
    task = ask(producer, {"approvals": 2})
    assert task["approval_progress"]["text"] == "0 of 2 approvals"
    first = cast(alice, task)
    assert first.status_code == 200, first.text
    assert first.json()["status"] == "PENDING_REVIEW"
    assert first.json()["approval_progress"]["approvals"] == 1
    assert [v["voter"] for v in first.json()["votes"]] == ["alice"]
    second = cast(bob, task, notes="fine by me")
    assert second.status_code == 200, second.text
    decided = second.json()
    assert (decided["status"], decided["decision"]) == ("RESOLVED", "APPROVED")
    assert decided["approval_progress"]["met"] is True
    assert decided["approved_revision"] == 1
    assert events(server, task["id"], "task.vote_cast") == 2
    assert events(server, task["id"], "task.resolved") == 1
    granted = producer.post(
        f"/tasks/{task['id']}/execute",
        json={"revision": 1, "digest": task["digest"], "operation_id": "op-1"},
    )
    assert granted.status_code == 200, granted.text
    # A third vote after the quorum changes nothing.
    late = cast(person(server, "carol"), task)
    assert (late.status_code, late.json()["error_code"]) == (409, "ERR_STATE_CONFLICT")


def test_the_producer_and_a_second_vote_are_refused(server: LiveServer, producer: Client) -> None:
    bot_reviewer = person(server, "bot")  # the producer's principal, with a reviewer key
    alice = person(server, "alice")
    person(server, "bob")
    task = ask(producer, {"approvals": 2})
    own = cast(bot_reviewer, task)
    assert (own.status_code, own.json()["error_code"]) == (403, "ERR_SELF_APPROVAL")
    assert cast(alice, task).status_code == 200
    again = cast(alice, task, "REJECTED", notes="changed my mind")
    assert (again.status_code, again.json()["error_code"]) == (409, "ERR_ALREADY_VOTED")
    # The identical vote again (a retry) is answered as recorded, and writes nothing.
    repeat = cast(alice, task)
    assert repeat.status_code == 200
    assert events(server, task["id"], "task.vote_cast") == 1
    assert repeat.json()["approval_progress"]["approvals"] == 1


def test_a_claim_or_a_resolve_is_refused_on_a_task_decided_by_votes(
    server: LiveServer, producer: Client
) -> None:
    alice = person(server, "alice")
    person(server, "bob")
    task = ask(producer, {"approvals": 2})
    claimed = alice.claim(task["id"])
    assert (claimed.status_code, claimed.json()["error_code"]) == (409, "ERR_DECIDED_BY_VOTES")
    nothing = alice.post("/tasks/claim-next")
    assert nothing.status_code == 204, nothing.text
    resolved = alice.resolve(
        task["id"], "no-lease", {"decision": "APPROVED", "revision": 1, "digest": task["digest"]}
    )
    assert resolved.json()["error_code"] == "ERR_DECIDED_BY_VOTES"
    plain = producer.escalate(escalation()).json()
    voted = alice.post(f"/tasks/{plain['id']}/votes", json={"decision": "APPROVED"})
    assert (voted.status_code, voted.json()["error_code"]) == (409, "ERR_NOT_DECIDED_BY_VOTES")


def test_per_group_minimums_count_each_approver_once(server: LiveServer, producer: Client) -> None:
    lena, lars = person(server, "lena", ["legal"]), person(server, "lars", ["legal"])
    both = person(server, "bo", ["legal", "finance"])
    fiona = person(server, "fiona", ["finance"])
    outsider = person(server, "oscar", ["marketing"])
    task = ask(producer, {"groups": {"legal": 1, "finance": 1}})
    assert task["approval_rule"]["stages"][0]["approvals"] == 2
    refused = cast(outsider, task)
    assert (refused.status_code, refused.json()["error_code"]) == (403, "ERR_NOT_ELIGIBLE_TO_VOTE")
    assert cast(lena, task).status_code == 200
    second_legal = cast(lars, task).json()
    assert second_legal["status"] == "PENDING_REVIEW"
    assert second_legal["approval_progress"]["approvals"] == 1
    assert second_legal["approval_progress"]["waiting_on"] == ["finance"]
    assert "needs 1 more approval; finance can give it" in second_legal["approval_progress"]["text"]
    # Someone in both groups fills finance's place (legal's is filled already).
    done = cast(both, task).json()
    assert (done["status"], done["decision"]) == ("RESOLVED", "APPROVED")
    assert cast(fiona, task).status_code == 409


def test_a_veto_rejects_and_without_a_veto_a_rejection_is_one_vote_against(
    server: LiveServer, producer: Client
) -> None:
    alice, bob, carol = person(server, "alice"), person(server, "bob"), person(server, "carol")
    vetoed = ask(producer, {"approvals": 2})
    assert cast(alice, vetoed).status_code == 200
    no = cast(bob, vetoed, "REJECTED", notes="the figure is wrong").json()
    assert (no["status"], no["decision"], no["notes"]) == (
        "RESOLVED",
        "REJECTED",
        "the figure is wrong",
    )
    counted = ask(producer, {"approvals": 2, "veto": False})
    against = cast(alice, counted, "REJECTED", notes="not yet").json()
    assert against["status"] == "PENDING_REVIEW"
    assert against["approval_progress"]["against"] == 1
    assert cast(bob, counted).json()["status"] == "PENDING_REVIEW"
    done = cast(carol, counted).json()
    assert (done["status"], done["decision"]) == ("RESOLVED", "APPROVED")


def test_ordered_stages_with_other_eyes_at_each(server: LiveServer, producer: Client) -> None:
    fiona = person(server, "fiona", ["finance"])
    bo = person(server, "bo", ["finance", "legal"])
    lena = person(server, "lena", ["legal"])
    rule = {
        "stages": [
            {"name": "finance", "groups": {"finance": 1}},
            {"name": "legal", "groups": {"legal": 1}},
        ],
        "exclude": ["earlier_stages"],
    }
    task = ask(producer, rule)
    early = cast(lena, task)
    assert (early.status_code, early.json()["error_code"]) == (403, "ERR_NOT_ELIGIBLE_TO_VOTE")
    stage_two = cast(bo, task).json()
    assert stage_two["approval_progress"]["stage"] == 2
    assert stage_two["approval_progress"]["stage_name"] == "legal"
    # Not a retry of the finance vote (other notes): a vote at the legal stage, refused.
    again = cast(bo, task, notes="as legal now")
    assert (again.status_code, again.json()["error_code"]) == (403, "ERR_NOT_ELIGIBLE_TO_VOTE")
    assert cast(fiona, task).status_code == 403  # finance's part is done
    done = cast(lena, task).json()
    assert (done["status"], done["decision"]) == ("RESOLVED", "APPROVED")


def test_the_requester_may_be_barred(server: LiveServer, producer: Client) -> None:
    rita, alice = person(server, "rita"), person(server, "alice")
    task = ask(producer, {"approvals": 1, "exclude": ["requester"]}, requested_by="rita")
    assert task["requested_by"] == "rita"
    barred = cast(rita, task)
    assert (barred.status_code, barred.json()["error_code"]) == (403, "ERR_SELF_APPROVAL")
    assert cast(alice, task).json()["decision"] == "APPROVED"


def test_a_material_revision_voids_the_votes_and_a_cosmetic_one_carries_them(
    server: LiveServer, producer: Client
) -> None:
    alice, bob = person(server, "alice"), person(server, "bob")
    task = ask(producer, {"approvals": 2}, material_paths=["/amount", "/actions"])
    assert cast(alice, task).status_code == 200
    cosmetic = producer.put(
        f"/tasks/{task['id']}/subject",
        headers={"If-Match": '"1"'},
        json={"subject": SUBJECT | {"note": "Q3"}},
    )
    assert cosmetic.status_code == 200, cosmetic.text
    carried = cosmetic.json()
    assert carried["approval_progress"]["approvals"] == 1
    assert carried["votes"][0]["revision"] == 2
    material = producer.put(
        f"/tasks/{task['id']}/subject",
        headers={"If-Match": '"2"'},
        json={"subject": SUBJECT | {"note": "Q3", "amount": "900 EUR"}},
    )
    assert material.status_code == 200, material.text
    assert material.json()["votes"] == []
    assert material.json()["approval_progress"]["text"] == "0 of 2 approvals"
    assert events(server, task["id"], "task.votes_voided") == 1
    assert server.count("task_votes", task_id=uuid.UUID(task["id"])) == 1
    # Alice votes again, on revision 3 this time; a vote naming revision 2 is stale.
    stale = bob.post(
        f"/tasks/{task['id']}/votes",
        json={"decision": "APPROVED", "revision": 2, "digest": carried["digest"]},
    )
    assert (stale.status_code, stale.json()["error_code"]) == (409, "ERR_STALE_REVISION")
    assert cast(alice, task).status_code == 200
    done = cast(bob, task).json()
    assert (done["status"], done["approved_revision"]) == ("RESOLVED", 3)


def test_a_material_revision_after_the_quorum_reopens_with_no_votes(
    server: LiveServer, producer: Client
) -> None:
    alice, bob = person(server, "alice"), person(server, "bob")
    task = ask(producer, {"approvals": 2})
    cast(alice, task)
    assert cast(bob, task).json()["status"] == "RESOLVED"
    reopened = producer.put(
        f"/tasks/{task['id']}/subject",
        headers={"If-Match": '"1"'},
        json={"subject": SUBJECT | {"amount": "900 EUR"}},
    )
    assert reopened.status_code == 200, reopened.text
    assert (reopened.json()["status"], reopened.json()["votes"]) == ("PENDING_REVIEW", [])
    refused = producer.post(
        f"/tasks/{task['id']}/execute",
        json={"revision": 1, "digest": task["digest"], "operation_id": "op"},
    )
    assert refused.json()["reason"] == "APPROVAL_INVALIDATED"


def test_a_revoked_voter_closes_the_gate(server: LiveServer, producer: Client) -> None:
    with server.admin() as admin:
        made = admin.post("/api-keys", json={"role": "reviewer", "principal_id": "alice"})
        alice = server.client(made.json()["key"], "alice")
        bob = person(server, "bob")
        task = ask(producer, {"approvals": 2})
        cast(alice, task)
        cast(bob, task)
        assert admin.delete(f"/api-keys/{made.json()['id']}").status_code in (200, 204)
    refused = producer.post(
        f"/tasks/{task['id']}/execute",
        json={"revision": 1, "digest": task["digest"], "operation_id": "op"},
    )
    assert refused.json()["reason"] == "APPROVER_NOT_AUTHORISED"


def test_twenty_racing_votes_reach_the_quorum_once(server: LiveServer, producer: Client) -> None:
    first = person(server, "first")
    racers = [person(server, f"racer-{i}") for i in range(20)]
    task = ask(producer, {"approvals": 2})
    assert cast(first, task).status_code == 200
    current = first.get(f"/tasks/{task['id']}").json()
    body = {"decision": "APPROVED", "revision": 1, "digest": current["digest"]}
    with ThreadPoolExecutor(max_workers=20) as pool:
        answers = list(pool.map(lambda c: c.post(f"/tasks/{task['id']}/votes", json=body), racers))
    codes = sorted(a.status_code for a in answers)
    assert codes.count(200) == 1, [a.text for a in answers if a.status_code != 409]
    assert codes.count(409) == 19
    assert events(server, task["id"], "task.resolved") == 1
    assert (
        server.count("outbox_events", task_id=uuid.UUID(task["id"]), event_type="task.resolved")
        == 1
    )
    final = first.get(f"/tasks/{task['id']}").json()
    assert len(final["votes"]) == 2
    execute = {"revision": 1, "digest": current["digest"]}
    with ThreadPoolExecutor(max_workers=20) as pool:
        grants = list(
            pool.map(
                lambda i: producer.post(
                    f"/tasks/{task['id']}/execute", json=execute | {"operation_id": f"op-{i}"}
                ),
                range(20),
            )
        )
    assert [g.status_code for g in grants].count(200) == 1
    # The racing votes and grants left one unbroken chain, every record signed.
    trail = first.get(f"/tasks/{task['id']}/receipts").json()["items"]
    assert [r["type"] for r in trail].count("task.execution_started") == 1
    assert [r["prev_hash"] for r in trail] == ["", *(r["hash"] for r in trail[:-1])]
    assert all(r["receipt"] for r in trail)


@pytest.mark.parametrize(
    ("rule", "field"),
    [
        ({"approvals": 0}, "approval_rule.approvals"),
        ({"approvals": 1, "groups": {"legal": 1, "finance": 1}}, "approval_rule.approvals"),
        ({"groups": {"legal": "one"}}, "approval_rule.groups.legal"),
        ({"veto": "yes"}, "approval_rule.veto"),
        ({"exclude": ["everyone"]}, "approval_rule.exclude"),
        ({"stages": []}, "approval_rule.stages"),
        ({"stages": [{"name": "a"}], "approvals": 2}, "approval_rule.stages"),
        ({"quorum": 2}, "approval_rule.quorum"),
        ("Not A Name", "approval_rule"),
    ],
)
def test_a_bad_rule_is_refused_naming_the_field(
    server: LiveServer, producer: Client, rule: Any, field: str
) -> None:
    response = producer.escalate(escalation(approval_rule=rule))
    assert response.status_code == 422, response.text
    assert response.json()["error_code"] == "ERR_VALIDATION"
    assert field in [e["field"] for e in response.json()["errors"]]
    assert server.count("review_tasks") == 0


def test_named_rules_are_copied_onto_the_task(server: LiveServer, producer: Client) -> None:
    for who in ("alice", "bob", "carol"):
        person(server, who)
    with server.admin() as admin:
        made = admin.put("/approval-rules/two-people", json={"approvals": 2})
        assert made.status_code == 201, made.text
        task = ask(producer, "two-people")
        assert task["approval_rule"]["name"] == "two-people"
        replaced = admin.put("/approval-rules/two-people", json={"approvals": 3})
        assert replaced.status_code == 200
        assert admin.get("/approval-rules").json()["items"][0]["stages"][0]["approvals"] == 3
        assert admin.delete("/approval-rules/two-people").status_code == 204
        assert admin.get("/approval-rules/two-people").status_code == 404
    kept = producer.get(f"/tasks/{task['id']}").json()
    assert kept["approval_progress"]["required"] == 2
    unknown = producer.escalate(escalation(approval_rule="nobody-made-this"))
    assert (unknown.status_code, unknown.json()["error_code"]) == (
        422,
        "ERR_UNKNOWN_APPROVAL_RULE",
    )
    grouped = producer.escalate(
        escalation(approval_rule={"groups": {"legal": 1, "finance": 1}}, assigned_group="legal")
    )
    assert grouped.status_code == 422
    assert grouped.json()["errors"][0]["field"] == "assigned_group"
