"""Approvals bound to versions: revisions, invalidation, the execution gate."""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections import Counter
from typing import Any

import httpx
import pytest

from signoff.domain.digests import json_digest
from tests.support import Client, LiveServer, escalation, live_server

SUBJECT: dict[str, Any] = {
    "title": "Quarterly results",
    "body": "Revenue grew 12% year on year.",
    "destination": "website",
    "actions": [{"id": "publish_article"}, {"id": "send_newsletter"}],
}


@pytest.fixture
def producer(server: LiveServer):  # type: ignore[no-untyped-def]
    with server.new_client("producer", "agent-7") as client:
        yield client


@pytest.fixture
def editor(server: LiveServer):  # type: ignore[no-untyped-def]
    with server.new_client("reviewer", "editor-1") as client:
        yield client


def new_subject_task(
    producer: Client, subject: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    body = escalation(
        subject=subject or copy.deepcopy(SUBJECT), source_revisions=["S01:r7", "S02:r2"], **extra
    )
    response = producer.escalate(body)
    assert response.status_code == 201, response.text
    return dict(response.json())


def revise(
    producer: Client, task_id: str, revision: int, subject: dict[str, Any], **extra: Any
) -> httpx.Response:
    return producer.put(
        f"/tasks/{task_id}/subject",
        headers={"If-Match": f'"{revision}"'},
        json={"subject": subject, **extra},
    )


def decide(
    reviewer: Client, task_id: str, decision: str = "APPROVED", **pin: Any
) -> httpx.Response:
    token = reviewer.claim(task_id).json()["lease_token"]
    task = reviewer.get(f"/tasks/{task_id}").json()
    body = {
        "decision": decision,
        "notes": f"{decision.lower()} in a test",
        "revision": task["current_revision"],
        "digest": task["digest"],
    } | pin
    return reviewer.resolve(task_id, token, body)


def execute(
    producer: Client, task_id: str, revision: int, digest: str, operation_id: str = "op-1"
) -> httpx.Response:
    return producer.post(
        f"/tasks/{task_id}/execute",
        json={"revision": revision, "digest": digest, "operation_id": operation_id},
    )


def report(
    producer: Client,
    task_id: str,
    action_id: str,
    token: str | None,
    *,
    operation_id: str,
    verb: str = "complete",
    result: Any = None,
) -> httpx.Response:
    """Complete (or fail) one action under the execution lease ``token``."""
    return producer.post(
        f"/tasks/{task_id}/actions/{action_id}/{verb}",
        headers={"X-Execution-Token": token} if token else {},
        json={"operation_id": operation_id, "result": result},
    )


def refusal(response: httpx.Response) -> str:
    assert response.status_code == 409, response.text
    assert response.json()["error_code"] == "ERR_APPROVAL_NOT_VALID"
    return str(response.json()["reason"])


def test_a_subject_is_revision_one_with_its_canonical_digest(producer) -> None:
    task = new_subject_task(producer)
    assert task["current_revision"] == 1
    assert task["digest"] == json_digest(SUBJECT)
    shown = producer.get(f"/tasks/{task['id']}")
    assert shown.headers["ETag"] == '"1"'
    reordered = dict(reversed(list(SUBJECT.items())))
    assert new_subject_task(producer, reordered)["digest"] == task["digest"]
    assert (
        new_subject_task(producer, {"n": "7"})["digest"]
        != new_subject_task(producer, {"n": 7})["digest"]
    )


def test_seed_case_1_approval_of_revision_3_does_not_execute_revision_4(
    server, producer, editor
) -> None:
    task = new_subject_task(producer)
    for revision in (1, 2):
        assert (
            revise(
                producer, task["id"], revision, SUBJECT | {"body": f"draft {revision + 1}"}
            ).status_code
            == 200
        )
    approved = decide(editor, task["id"]).json()
    assert (approved["approved_revision"], approved["decision"]) == (3, "APPROVED")
    changed = revise(producer, task["id"], 3, SUBJECT | {"body": "Revenue grew 21% year on year."})
    assert changed.status_code == 200
    assert (changed.json()["status"], changed.json()["current_revision"]) == ("PENDING_REVIEW", 4)
    assert refusal(execute(producer, task["id"], 3, approved["digest"])) == "APPROVAL_INVALIDATED"
    assert server.count("task_actions") == 0  # nothing executed
    trail = producer.get(f"/tasks/{task['id']}/events").json()["items"]
    assert [e["type"] for e in trail][-2:] == [
        "task.approval_invalidated",
        "task.execution_refused",
    ]
    invalidated = trail[-2]
    assert invalidated["details"]["invalidated_approval"]["revision"] == 3
    assert invalidated["details"]["reason"] == "the subject changed after approval"


def test_a_non_material_change_carries_the_approval_forward(producer, editor) -> None:
    task = new_subject_task(producer, material_paths=["/body", "/actions"])
    first = decide(editor, task["id"]).json()
    moved = revise(producer, task["id"], 1, SUBJECT | {"title": "Q3 results"}).json()
    assert (moved["status"], moved["decision"], moved["approved_revision"]) == (
        "RESOLVED",
        "APPROVED",
        2,
    )
    assert refusal(execute(producer, task["id"], 1, first["digest"])) == "STALE_DIGEST"
    assert execute(producer, task["id"], 2, moved["digest"]).status_code == 200
    carried = next(
        e
        for e in producer.get(f"/tasks/{task['id']}/events").json()["items"]
        if e["type"] == "task.approval_carried_forward"
    )
    assert carried["details"]["diff"]["changed"] == [
        {"path": "/title", "from": "Quarterly results", "to": "Q3 results"}
    ]


def test_seed_case_2_an_expired_approval_is_refused(server, producer, editor) -> None:
    task = new_subject_task(producer, approval_ttl_seconds=60)
    approved = decide(editor, task["id"]).json()
    server.clock.advance(60)
    assert refusal(execute(producer, task["id"], 1, approved["digest"])) == "APPROVAL_EXPIRED"


def test_seed_case_3_two_concurrent_resumes_give_exactly_one_execution(
    server, producer, editor
) -> None:
    task = new_subject_task(producer)
    digest = decide(editor, task["id"]).json()["digest"]

    async def race() -> list[httpx.Response]:
        async with httpx.AsyncClient(
            base_url=server.base_url, headers={"Authorization": f"Bearer {producer.key}"}
        ) as c:
            return await asyncio.gather(
                *(
                    c.post(
                        f"/tasks/{task['id']}/execute",
                        json={"revision": 1, "digest": digest, "operation_id": f"op-{i}"},
                    )
                    for i in range(10)
                )
            )

    responses = asyncio.run(race())
    assert Counter(r.status_code for r in responses) == {200: 1, 409: 9}
    assert {r.json()["error_code"] for r in responses if r.status_code == 409} == {
        "ERR_ALREADY_EXECUTING"
    }


def test_seed_case_4_a_retry_after_a_crash_completes_the_action_once(
    server, producer, editor
) -> None:
    task = new_subject_task(producer)
    digest = decide(editor, task["id"]).json()["digest"]
    grant = execute(producer, task["id"], 1, digest, "op-crash").json()
    # The executor published, then died before reporting. While its execution lease lives
    # no other operation runs it; the same operation, restarted, gets it back at once.
    busy = execute(producer, task["id"], 1, digest, "op-other")
    assert (busy.status_code, busy.json()["error_code"]) == (409, "ERR_ALREADY_EXECUTING")
    assert busy.json()["lease_expires_at"] == grant["execution_lease_expires_at"]
    again = execute(producer, task["id"], 1, digest, "op-crash")
    assert again.status_code == 200
    assert again.json()["operation_id"] == grant["operation_id"] == "op-crash"
    assert again.json()["execution_token"] != grant["execution_token"]
    result = {"url": "https://example.org/q3"}
    lost = report(
        producer, task["id"], "publish_article", grant["execution_token"], operation_id="op-crash"
    )
    assert (lost.status_code, lost.json()["error_code"]) == (409, "ERR_EXECUTION_LEASE_LOST")
    token = again.json()["execution_token"]
    first = report(
        producer, task["id"], "publish_article", token, operation_id="op-crash", result=result
    )
    second = report(
        producer, task["id"], "publish_article", token, operation_id="op-crash", result=result
    )
    assert first.status_code == second.status_code == 200
    assert second.json()["actions"] == first.json()["actions"]
    events = [e["type"] for e in producer.get(f"/tasks/{task['id']}/events").json()["items"]]
    assert events.count("task.action_completed") == 1
    assert events.count("task.execution_started") == 2


def test_actions_have_their_own_status_and_a_failed_one_is_retried_alone(producer, editor) -> None:
    task = new_subject_task(producer)
    digest = decide(editor, task["id"]).json()["digest"]
    token = execute(producer, task["id"], 1, digest).json()["execution_token"]
    tid = task["id"]
    assert (
        report(producer, tid, "publish_article", token, operation_id="a1").json()[
            "execution_status"
        ]
        == "EXECUTING"
    )
    failed = report(
        producer,
        tid,
        "send_newsletter",
        token,
        operation_id="n1",
        verb="fail",
        result={"error": "SMTP down"},
    )
    assert failed.json()["execution_status"] == "FAILED"
    # Every action has an outcome: the lease ended, and a new grant retries the failed one.
    ended = report(producer, tid, "send_newsletter", token, operation_id="n2")
    assert ended.json()["error_code"] == "ERR_EXECUTION_LEASE_LOST"
    retry = execute(producer, tid, 1, digest, "op-retry").json()
    assert {a["id"]: a["status"] for a in retry["actions"]} == {
        "publish_article": "COMPLETED",
        "send_newsletter": "FAILED",
    }
    token = retry["execution_token"]
    done = report(producer, tid, "send_newsletter", token, operation_id="n2")
    assert done.json()["execution_status"] == "COMPLETED"
    statuses = {a["id"]: (a["status"], a["operation_id"]) for a in done.json()["actions"]}
    assert statuses == {
        "publish_article": ("COMPLETED", "a1"),
        "send_newsletter": ("COMPLETED", "n2"),
    }
    redo = report(producer, tid, "publish_article", token, operation_id="a2")
    assert redo.status_code == 409
    assert report(producer, tid, "nope", token, operation_id="x").status_code == 404
    assert revise(producer, task["id"], 1, SUBJECT | {"title": "late"}).status_code == 409


def test_seed_case_5_a_revoked_source_blocks_execution(producer, editor) -> None:
    task = new_subject_task(producer)
    digest = decide(editor, task["id"]).json()["digest"]
    assert producer.post(f"/tasks/{task['id']}/sources/S02/revoke").status_code == 200
    assert refusal(execute(producer, task["id"], 1, digest)) == "SOURCE_REVOKED"
    assert producer.post(f"/tasks/{task['id']}/sources/S99/revoke").status_code == 404


def test_seed_case_6_an_editor_who_lost_access_no_longer_authorises(server, producer) -> None:
    editor = server.new_client("reviewer", "editor-2")
    task = new_subject_task(producer)
    digest = decide(editor, task["id"]).json()["digest"]
    with server.admin() as admin:
        key_id = next(
            k["id"]
            for k in admin.get("/api-keys").json()["items"]
            if k["principal_id"] == "editor-2"
        )
        assert admin.delete(f"/api-keys/{key_id}").status_code == 204
    assert refusal(execute(producer, task["id"], 1, digest)) == "APPROVER_NOT_AUTHORISED"
    trail = producer.get(f"/tasks/{task['id']}/events").json()["items"]
    resolved = next(e for e in trail if e["type"] == "task.resolved")
    refused = next(e for e in trail if e["type"] == "task.execution_refused")
    assert resolved["details"] == {
        "decision": "APPROVED",
        "door": "api",
        "revision": 1,
        "digest": digest,
    }
    assert refused["details"]["reason"] == "APPROVER_NOT_AUTHORISED"
    assert producer.get(f"/tasks/{task['id']}").json()["decision"] == "APPROVED"  # not erased
    editor.close()


def test_if_match_is_required_and_must_be_current(producer) -> None:
    task = new_subject_task(producer)
    missing = producer.put(f"/tasks/{task['id']}/subject", json={"subject": SUBJECT})
    assert (missing.status_code, missing.json()["error_code"]) == (428, "ERR_PRECONDITION_REQUIRED")
    assert revise(producer, task["id"], 1, SUBJECT | {"title": "x"}).status_code == 200
    stale = revise(producer, task["id"], 1, SUBJECT | {"title": "y"})
    assert (stale.status_code, stale.json()["error_code"]) == (412, "ERR_REVISION_CONFLICT")
    with_policy = revise(producer, task["id"], 2, SUBJECT, material_paths=["/x"])
    assert with_policy.status_code == 422


def test_a_resolve_naming_an_old_revision_is_stale(producer, editor) -> None:
    task = new_subject_task(producer)
    token = editor.claim(task["id"]).json()["lease_token"]
    revise(producer, task["id"], 1, SUBJECT | {"title": "changed while claimed"})
    stale = editor.resolve(
        task["id"], token, {"decision": "APPROVED", "revision": 1, "digest": task["digest"]}
    )
    assert (stale.status_code, stale.json()["error_code"]) == (409, "ERR_STALE_REVISION")
    assert stale.json()["current_revision"] == 2
    missing = editor.resolve(task["id"], token, {"decision": "APPROVED"})
    assert missing.status_code == 422
    assert {e["field"] for e in missing.json()["errors"]} == {"revision", "digest"}


def test_a_revision_requested_goes_back_to_review_with_the_next_revision(producer, editor) -> None:
    task = new_subject_task(producer)
    asked = decide(editor, task["id"], "REVISION_REQUESTED", notes="cite the source for 12%")
    assert asked.json()["decision"] == "REVISION_REQUESTED"
    back = revise(
        producer, task["id"], 1, SUBJECT | {"body": "Revenue grew 12% (source: S01)."}
    ).json()
    assert (back["status"], back["decision"], back["current_revision"]) == (
        "PENDING_REVIEW",
        None,
        2,
    )


def test_nobody_decides_what_they_escalated(server) -> None:
    # One principal holding both a producer key and a reviewer key.
    with (
        server.new_client("producer", "alice") as as_producer,
        server.new_client("reviewer", "alice") as as_reviewer,
    ):
        task = new_subject_task(as_producer)
        token = as_reviewer.claim(task["id"]).json()["lease_token"]
        pin = {"revision": 1, "digest": task["digest"]}
        approve = as_reviewer.resolve(task["id"], token, {"decision": "APPROVED"} | pin)
        assert (approve.status_code, approve.json()["error_code"]) == (403, "ERR_SELF_APPROVAL")
        # Neither a rejection nor a revision request: the producer's principal makes no
        # decision on its own task, and the task stays claimed for someone who may.
        for decision in ("REJECTED", "REVISION_REQUESTED"):
            refused = as_reviewer.resolve(
                task["id"], token, {"decision": decision, "notes": "mine"} | pin
            )
            assert (refused.status_code, refused.json()["error_code"]) == (
                403,
                "ERR_SELF_APPROVAL",
            )
        assert as_producer.get(f"/tasks/{task['id']}").json()["decision"] is None


def test_reopening_next_to_another_active_task_conflicts(producer, editor) -> None:
    task = new_subject_task(producer, entity_id="doc-42")
    decide(editor, task["id"])
    newer = producer.escalate(escalation("doc-42")).json()
    response = revise(producer, task["id"], 1, SUBJECT | {"body": "material change"})
    assert (response.status_code, response.json()["error_code"]) == (409, "ERR_TASK_CONFLICT")
    assert response.json()["task_id"] == newer["id"]
    assert producer.get(f"/tasks/{task['id']}").json()["current_revision"] == 1


def test_revisions_diffs_and_what_changed_since_you_looked(producer, editor) -> None:
    task = new_subject_task(producer)
    assert editor.get(f"/tasks/{task['id']}").json()["last_viewed_revision"] is None
    long_body = "line one\nline two\nline three"
    revise(
        producer,
        task["id"],
        1,
        SUBJECT | {"body": long_body, "tags": ["q3"]},
        source_revisions=["S01:r8", "S03:r1"],
    )
    shown = editor.get(f"/tasks/{task['id']}").json()
    assert (shown["current_revision"], shown["last_viewed_revision"]) == (2, 1)
    assert [
        r["revision"] for r in editor.get(f"/tasks/{task['id']}/revisions").json()["items"]
    ] == [1, 2]
    assert editor.get(f"/tasks/{task['id']}/revisions/1").json()["subject"] == SUBJECT
    diff = editor.get(f"/tasks/{task['id']}/diff", params={"from": 1, "to": 2}).json()
    assert diff["added"] == [{"path": "/tags", "value": ["q3"]}]
    (body_change,) = diff["changed"]
    assert body_change["path"] == "/body"
    assert "+line two" in body_change["line_diff"]
    assert diff["sources"] == {
        "added": ["S03"],
        "removed": ["S02"],
        "changed": [{"source": "S01", "from": "r7", "to": "r8"}],
    }
    assert editor.get(f"/tasks/{task['id']}/diff", params={"from": 1, "to": 9}).status_code == 422


@pytest.mark.parametrize(
    "raw",
    [
        '{"subject": {"n": NaN}}',
        '{"subject": {"n": 1e400}}',
        '{"subject": {"s": "\\ud800"}}',
        '{"subject": [1]}',
    ],
)
def test_a_subject_jcs_cannot_represent_is_refused(producer, raw) -> None:
    task = new_subject_task(producer)
    response = producer.put(
        f"/tasks/{task['id']}/subject",
        content=raw,
        headers={"If-Match": '"1"', "content-type": "application/json"},
    )
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"].startswith("subject")
    assert producer.get(f"/tasks/{task['id']}").json()["current_revision"] == 1


def test_only_the_owning_producer_revises_or_executes(server, producer, editor) -> None:
    task = new_subject_task(producer)
    digest = decide(editor, task["id"]).json()["digest"]
    with server.new_client("producer", "other-bot") as other:
        assert revise(other, task["id"], 1, SUBJECT).status_code == 404
        assert execute(other, task["id"], 1, digest).status_code == 404
    assert execute(editor, task["id"], 1, digest).status_code == 403


def test_concurrent_action_reports_complete_the_execution(server, producer, editor) -> None:
    actions = [{"id": f"step-{i}"} for i in range(6)]
    task = new_subject_task(producer, {"title": "many", "actions": actions})
    digest = decide(editor, task["id"]).json()["digest"]
    token = execute(producer, task["id"], 1, digest).json()["execution_token"]

    async def reports() -> list[httpx.Response]:
        headers = {"Authorization": f"Bearer {producer.key}", "X-Execution-Token": token}
        async with httpx.AsyncClient(base_url=server.base_url, headers=headers) as c:
            return await asyncio.gather(
                *(
                    c.post(
                        f"/tasks/{task['id']}/actions/{a['id']}/complete",
                        json={"operation_id": a["id"]},
                    )
                    for a in actions
                )
            )

    assert {r.status_code for r in asyncio.run(reports())} == {200}
    assert producer.get(f"/tasks/{task['id']}").json()["execution_status"] == "COMPLETED"


def test_policies_never_let_actions_or_sources_change_unseen(producer, editor) -> None:
    assert producer.escalate(escalation(subject=SUBJECT, material_paths=[])).status_code == 422
    task = new_subject_task(producer, material_paths=["/body"])
    decide(editor, task["id"])
    swapped = SUBJECT | {"actions": [{"id": "wire_funds"}]}
    moved = revise(producer, task["id"], 1, swapped).json()
    assert (moved["status"], moved["approved_revision"]) == ("PENDING_REVIEW", None)
    other = new_subject_task(producer, material_paths=["/body"])
    decide(editor, other["id"])
    resourced = revise(
        producer, other["id"], 1, SUBJECT, source_revisions=["S01:r8", "S02:r2"]
    ).json()
    assert resourced["status"] == "PENDING_REVIEW"
    shown = editor.get(f"/tasks/{other['id']}").json()
    assert shown["material_paths"] == ["/body"]


@pytest.mark.parametrize(
    "path", ["revisions/2147483648", "diff?from=1&to=2147483648", "revisions/99999999999999999999"]
)
def test_revision_numbers_beyond_32_bits_are_refused_not_crashed(producer, path) -> None:
    task = new_subject_task(producer)
    response = producer.get(f"/tasks/{task['id']}/{path}")
    assert response.status_code == 422


def test_oversized_numbers_in_approval_bodies_are_refused(producer, editor) -> None:
    assert (
        producer.escalate(escalation(subject=SUBJECT, approval_ttl_seconds=2**31)).status_code
        == 422
    )
    task = new_subject_task(producer)
    assert execute(producer, task["id"], 2**31, task["digest"]).status_code == 422
    token = editor.claim(task["id"]).json()["lease_token"]
    huge = editor.resolve(
        task["id"], token, {"decision": "APPROVED", "revision": 2**31, "digest": task["digest"]}
    )
    assert huge.status_code == 422


def test_nul_in_action_and_source_ids_is_refused_not_crashed(producer, editor) -> None:
    bad = producer.escalate(
        escalation(subject={"actions": [{"id": "a\u0000b"}]}, source_revisions=["S\u0000:r1"])
    )
    assert bad.status_code == 422
    task = new_subject_task(producer)
    digest = decide(editor, task["id"]).json()["digest"]
    token = execute(producer, task["id"], 1, digest).json()["execution_token"]
    # The request boundary's text guard (signoff.domain.text_guard): 422, never a 500.
    assert report(producer, task["id"], "a%00b", token, operation_id="x").status_code == 422
    assert producer.post(f"/tasks/{task['id']}/sources/S%00/revoke").status_code == 422


def test_a_task_has_at_most_the_revision_limit(make_settings, clock) -> None:  # type: ignore[no-untyped-def]
    with live_server(make_settings(max_revisions_per_task=3), clock) as server:
        producer = server.new_client("producer", "agent-7")
        task = new_subject_task(producer)
        for revision in (1, 2):
            changed = revise(producer, task["id"], revision, SUBJECT | {"title": f"v{revision}"})
            assert changed.status_code == 200, changed.text
        refused = revise(producer, task["id"], 3, SUBJECT | {"title": "one too many"})
        assert refused.status_code == 409
        problem = refused.json()
        assert (problem["error_code"], problem["limit"]) == ("ERR_REVISION_LIMIT", 3)
        # Nothing written: no fourth revision, the task unchanged.
        assert server.count("subject_revisions", task_id=uuid.UUID(task["id"])) == 3
        shown = producer.get(f"/tasks/{task['id']}").json()
        assert (shown["current_revision"], shown["version"]) == (3, task["version"] + 2)
