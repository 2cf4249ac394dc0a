"""Remembered approvals (SQLite and PostgreSQL): a reviewer's approval allows the same
action again for a while, an admin writes one as a policy, the trail cites the grant, a
sampled share still goes to a person, grants are listed, revoked and expire, never apply to
a task decided by votes, and a grant revoked while a matching escalation arrives never lets
that escalation's action run."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from signoff.domain.digests import json_digest
from tests.integration.test_approvals import SUBJECT, execute
from tests.support import Client, LiveServer, escalation, live_server


@pytest.fixture
def quiet(make_settings, clock) -> Iterator[LiveServer]:  # type: ignore[no-untyped-def]
    """Nothing sampled for audit (the share is a setting)."""
    with live_server(make_settings(grant_audit_share=0.0), clock) as server:
        yield server


def ask(producer: Client, subject: dict[str, Any], **extra: Any) -> dict[str, Any]:
    body = escalation(f"a-{uuid.uuid4().hex[:8]}", subject=copy.deepcopy(subject), **extra)
    response = producer.escalate(body)
    assert response.status_code == 201, response.text
    return dict(response.json())


def trail(client: Client, task_id: str) -> list[dict[str, Any]]:
    return list(client.get(f"/tasks/{task_id}/events").json()["items"])


def approve_and_remember(editor: Client, task: dict[str, Any], seconds: int) -> dict[str, Any]:
    token = editor.claim(task["id"]).json()["lease_token"]
    body = {"decision": "APPROVED", "revision": 1, "digest": task["digest"]}
    answer = editor.resolve(task["id"], token, body | {"remember_seconds": seconds})
    assert answer.status_code == 200, answer.text
    [remembered] = [e for e in trail(editor, task["id"]) if e["action"] == "resolve"]
    return dict(remembered["details"]["remembered"])


def test_a_remembered_approval_approves_the_same_action_until_revoked_or_expired(
    quiet: LiveServer,
) -> None:
    server = quiet
    producer = server.new_client("producer", "agent-7")
    editor = server.new_client("reviewer", "editor-1")
    supervisor = server.new_client("supervisor", "sam")
    first = ask(producer, SUBJECT)
    refused = editor.resolve(
        first["id"],
        editor.claim(first["id"]).json()["lease_token"],
        {"decision": "REJECTED", "notes": "no", "revision": 1, "digest": first["digest"]}
        | {"remember_seconds": 60},
    )
    assert refused.json()["errors"][0]["field"] == "remember_seconds"
    editor.release(first["id"], editor.claim(first["id"]).json()["lease_token"])
    grant = approve_and_remember(editor, first, 3600)

    # The same action again: approved at once, the trail citing the grant; it runs.
    again = ask(producer, SUBJECT)
    assert (again["status"], again["decision"], again["grant_id"]) == (
        "RESOLVED",
        "APPROVED_BY_GRANT",
        grant["id"],
    )
    steps = trail(producer, again["id"])
    assert [e["type"] for e in steps] == ["task.created", "task.resolved"]
    assert steps[1]["details"]["grant"]["id"] == grant["id"]
    assert steps[1]["details"]["grant"]["source_task_id"] == first["id"]
    held = ask(producer, SUBJECT)  # approved too; executed only after the revocation below
    assert execute(producer, again["id"], 1, again["digest"]).status_code == 200
    # Anything else goes to a person: another subject, or a task decided by votes.
    other = ask(producer, SUBJECT | {"title": "Another title"})
    voted = ask(producer, SUBJECT, approval_rule={"approvals": 1})
    assert (other["status"], voted["status"]) == ("PENDING_REVIEW", "PENDING_REVIEW")
    # A decision only Signoff makes is refused on every door.
    forged = editor.resolve(
        other["id"],
        editor.claim(other["id"]).json()["lease_token"],
        {"decision": "APPROVED_BY_GRANT", "revision": 1, "digest": other["digest"]},
    )
    assert forged.json()["errors"][0]["field"] == "decision"

    # Listed (overseers), revoked by the reviewer who made it.
    assert editor.get("/approval-grants").status_code == 403
    [listed] = [g for g in supervisor.get("/approval-grants").json()["items"]]
    assert (listed["id"], listed["uses"], listed["live"]) == (grant["id"], 2, True)
    revoked = editor.delete(f"/approval-grants/{grant['id']}")
    assert (revoked.status_code, revoked.json()["live"]) == (200, False)
    assert ask(producer, SUBJECT)["status"] == "PENDING_REVIEW"
    # What it approved and did not run yet no longer runs.
    gate = execute(producer, held["id"], 1, held["digest"])
    assert gate.json()["reason"] == "APPROVER_NOT_AUTHORISED"

    # Another grant expires.
    later = ask(producer, SUBJECT | {"body": "v2"})
    approve_and_remember(editor, later, 60)
    assert ask(producer, SUBJECT | {"body": "v2"})["status"] == "RESOLVED"
    server.clock.advance(61)
    assert ask(producer, SUBJECT | {"body": "v2"})["status"] == "PENDING_REVIEW"

    # An admin's grant as a policy: a predicate on the subject, not a digest.
    with server.admin() as admin:
        policy = admin.post(
            "/approval-grants",
            json={"producer_id": "agent-7", "entity_type": "transaction",
                  "reason_code": "AML_RULE_FAILED", "conditions": {"/destination": "website"},
                  "seconds": 600, "note": "website posts are fine this week"},
        )  # fmt: skip
        assert policy.status_code == 201, policy.text
        bad = admin.post("/approval-grants", json={"producer_id": "x", "seconds": 5})
        assert bad.status_code == 422
    covered = ask(producer, SUBJECT | {"title": "Anything"})
    assert (covered["decision"], covered["grant_id"]) == ("APPROVED_BY_GRANT", policy.json()["id"])
    assert execute(producer, covered["id"], 1, covered["digest"]).status_code == 200
    assert ask(producer, SUBJECT | {"destination": "print"})["status"] == "PENDING_REVIEW"


def test_a_sampled_share_of_matching_escalations_still_goes_to_a_person(
    make_settings, clock
) -> None:  # type: ignore[no-untyped-def]
    with live_server(make_settings(grant_audit_share=1.0), clock) as server:
        producer = server.new_client("producer", "agent-7")
        editor = server.new_client("reviewer", "editor-1")
        grant = approve_and_remember(editor, ask(producer, SUBJECT), 3600)
        audited = ask(producer, SUBJECT)
        assert audited["status"] == "PENDING_REVIEW"
        [created] = trail(producer, audited["id"])
        assert created["details"]["grant_sampled_for_audit"]["id"] == grant["id"]


def test_a_grant_revoked_while_a_matching_escalation_arrives_never_runs_it(
    quiet: LiveServer,
) -> None:
    server = quiet
    producer = server.new_client("producer", "agent-7")
    editor = server.new_client("reviewer", "editor-1")
    seen = set()
    for round_ in range(3):
        subject = SUBJECT | {"body": f"round {round_}"}
        grant = approve_and_remember(editor, ask(producer, subject), 3600)
        with ThreadPoolExecutor(max_workers=2) as pool:
            arriving = pool.submit(ask, producer, subject)
            revoking = pool.submit(editor.delete, f"/approval-grants/{grant['id']}")
            task, revoked = arriving.result(), revoking.result()
        assert revoked.status_code == 200
        seen.add(task["status"])
        if task["status"] == "RESOLVED":  # the escalation read the grant first
            assert task["grant_id"] == grant["id"]
            gate = execute(producer, task["id"], 1, json_digest(subject))
            assert gate.json()["reason"] == "APPROVER_NOT_AUTHORISED"
        else:  # the revocation came first: a person decides
            assert (task["status"], task["grant_id"]) == ("PENDING_REVIEW", None)
    assert seen <= {"RESOLVED", "PENDING_REVIEW"}
