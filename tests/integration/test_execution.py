"""Execution leases, precise refusal reasons at the gate, and the task list's filters."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

import pytest

from signoff.domain.clock import rfc3339
from tests.integration.test_approvals import (
    SUBJECT,
    decide,
    execute,
    new_subject_task,
    refusal,
    report,
    revise,
)
from tests.integration.test_waiting import sweep
from tests.support import Client, LiveServer


@pytest.fixture
def producer(server: LiveServer):  # type: ignore[no-untyped-def]
    with server.new_client("producer", "agent-7") as client:
        yield client


@pytest.fixture
def editor(server: LiveServer):  # type: ignore[no-untyped-def]
    with server.new_client("reviewer", "editor-1") as client:
        yield client


def approved(producer: Client, editor: Client) -> tuple[str, str]:
    task = new_subject_task(producer)
    digest = decide(editor, task["id"]).json()["digest"]
    return task["id"], digest


def lease_seconds(server: LiveServer) -> int:
    return int(server.settings.execution_lease_seconds)


def renew(producer: Client, task_id: str, token: str | None) -> Any:
    headers = {"X-Execution-Token": token} if token else {}
    return producer.post(f"/tasks/{task_id}/execution/renew", headers=headers)


def event_types(server: LiveServer, task_id: str, table: str = "task_events") -> list[str]:
    import uuid

    rows = server.rows(table, task_id=uuid.UUID(task_id))
    return [r["event_type"] for r in rows]


# -- execution leases -------------------------------------------------------------------


def test_a_grant_carries_a_fresh_execution_token_stored_hashed(server, producer, editor) -> None:
    task_id, digest = approved(producer, editor)
    grant = execute(producer, task_id, 1, digest).json()
    token = grant["execution_token"]
    expires = server.clock.now() + timedelta(seconds=300)
    assert grant["execution_lease_expires_at"] == rfc3339(expires)
    assert grant["execution_status"] == "EXECUTING"
    (row,) = server.rows("review_tasks")
    assert row["execution_token_hash"] == hashlib.sha256(token.encode()).hexdigest()
    assert token not in str(row)
    shown = producer.get(f"/tasks/{task_id}").json()
    assert shown["execution_lease_expires_at"] == grant["execution_lease_expires_at"]


def test_reports_need_the_live_execution_token(server, producer, editor) -> None:
    task_id, digest = approved(producer, editor)
    token = execute(producer, task_id, 1, digest).json()["execution_token"]
    missing = report(producer, task_id, "publish_article", None, operation_id="a")
    assert (missing.status_code, missing.json()["error_code"]) == (
        400,
        "ERR_EXECUTION_TOKEN_REQUIRED",
    )
    wrong = report(producer, task_id, "publish_article", "not-the-token", operation_id="a")
    assert (wrong.status_code, wrong.json()["error_code"]) == (409, "ERR_EXECUTION_LEASE_LOST")
    server.clock.advance(lease_seconds(server))
    lapsed = report(producer, task_id, "publish_article", token, operation_id="a")
    assert (lapsed.status_code, lapsed.json()["error_code"]) == (409, "ERR_EXECUTION_LEASE_LOST")
    assert {a["status"] for a in server.rows("task_actions")} == {"PENDING"}


def test_renewal_extends_the_lease_from_now(server, producer, editor) -> None:
    task_id, digest = approved(producer, editor)
    token = execute(producer, task_id, 1, digest).json()["execution_token"]
    server.clock.advance(200)
    renewed = renew(producer, task_id, token)
    assert renewed.status_code == 200, renewed.text
    later = server.clock.now() + timedelta(seconds=300)
    assert renewed.json()["execution_lease_expires_at"] == rfc3339(later)
    server.clock.advance(200)  # past the first expiry, within the renewed one
    busy = execute(producer, task_id, 1, digest, "op-2")
    assert busy.json()["lease_expires_at"] == rfc3339(later)
    assert report(producer, task_id, "publish_article", token, operation_id="a").status_code == 200
    assert renew(producer, task_id, None).json()["error_code"] == "ERR_EXECUTION_TOKEN_REQUIRED"
    assert renew(producer, task_id, "other").json()["error_code"] == "ERR_EXECUTION_LEASE_LOST"


def test_a_lapsed_lease_is_taken_over_with_a_new_token(server, producer, editor) -> None:
    task_id, digest = approved(producer, editor)
    first = execute(producer, task_id, 1, digest, "op-1").json()
    done = report(producer, task_id, "publish_article", first["execution_token"], operation_id="p")
    assert done.status_code == 200
    server.clock.advance(lease_seconds(server))  # the executor crashed
    second = execute(producer, task_id, 1, digest, "op-2")
    assert second.status_code == 200, second.text
    grant = second.json()
    assert grant["execution_token"] not in (None, first["execution_token"])
    assert {a["id"]: a["status"] for a in grant["actions"]} == {
        "publish_article": "COMPLETED",
        "send_newsletter": "PENDING",
    }
    stale = report(producer, task_id, "send_newsletter", first["execution_token"], operation_id="n")
    assert stale.json()["error_code"] == "ERR_EXECUTION_LEASE_LOST"
    assert renew(producer, task_id, first["execution_token"]).status_code == 409
    finished = report(
        producer, task_id, "send_newsletter", grant["execution_token"], operation_id="n"
    )
    assert finished.json()["execution_status"] == "COMPLETED"


def test_a_completed_execution_returns_its_outcome_never_a_new_grant(
    server, producer, editor
) -> None:
    task_id, digest = approved(producer, editor)
    token = execute(producer, task_id, 1, digest, "op-1").json()["execution_token"]
    for action in ("publish_article", "send_newsletter"):
        assert report(producer, task_id, action, token, operation_id="op-1").status_code == 200
    server.clock.advance(lease_seconds(server) * 2)
    again = execute(producer, task_id, 1, digest, "op-1")
    assert again.status_code == 200
    outcome = again.json()
    assert (outcome["execution_status"], outcome["execution_token"]) == ("COMPLETED", None)
    assert {a["status"] for a in outcome["actions"]} == {"COMPLETED"}
    other = execute(producer, task_id, 1, digest, "op-2")
    assert (other.status_code, other.json()["error_code"]) == (409, "ERR_ALREADY_EXECUTING")
    # Re-reporting a completed action returns its stored outcome too.
    repeat = report(producer, task_id, "publish_article", token, operation_id="op-1")
    assert (repeat.status_code, repeat.json()["execution_status"]) == (200, "COMPLETED")
    assert event_types(server, task_id).count("task.execution_started") == 1
    (row,) = server.rows("review_tasks")
    assert row["execution_token_hash"] is None


def test_the_sweeper_reports_a_stalled_execution_once_per_lapse(server, producer, editor) -> None:
    task_id, digest = approved(producer, editor)
    token = execute(producer, task_id, 1, digest).json()["execution_token"]
    sweep(server)
    assert "task.execution_stalled" not in event_types(server, task_id)
    server.clock.advance(lease_seconds(server))
    sweep(server, sweepers=2)
    sweep(server)
    assert event_types(server, task_id).count("task.execution_stalled") == 1
    assert event_types(server, task_id, "outbox_events").count("task.execution_stalled") == 1
    # A renewal revives the lease; a second lapse is a second stall.
    assert renew(producer, task_id, token).status_code == 200
    server.clock.advance(lease_seconds(server))
    sweep(server)
    assert event_types(server, task_id).count("task.execution_stalled") == 2
    # A finished execution never stalls.
    other_id, other_digest = approved(producer, editor)
    other = execute(producer, other_id, 1, other_digest).json()["execution_token"]
    for action in ("publish_article", "send_newsletter"):
        report(producer, other_id, action, other, operation_id="x")
    server.clock.advance(lease_seconds(server))
    sweep(server)
    assert "task.execution_stalled" not in event_types(server, other_id)


# -- refusal reasons --------------------------------------------------------------------


def test_each_refusal_names_its_own_reason(server, producer, editor) -> None:
    pending = new_subject_task(producer)
    assert refusal(execute(producer, pending["id"], 1, pending["digest"])) == "NOT_DECIDED"
    rejected = new_subject_task(producer)
    decide(editor, rejected["id"], "REJECTED")
    assert refusal(execute(producer, rejected["id"], 1, rejected["digest"])) == "REJECTED"
    asked = new_subject_task(producer)
    decide(editor, asked["id"], "REVISION_REQUESTED")
    assert refusal(execute(producer, asked["id"], 1, asked["digest"])) == "REVISION_REQUESTED"
    changed = new_subject_task(producer)
    decide(editor, changed["id"])
    moved = revise(producer, changed["id"], 1, SUBJECT | {"body": "a figure changed"}).json()
    assert refusal(execute(producer, changed["id"], 1, changed["digest"])) == (
        "APPROVAL_INVALIDATED"
    )
    # The new revision was never decided: that is not an invalidation.
    assert refusal(execute(producer, changed["id"], 2, moved["digest"])) == "NOT_DECIDED"
    assert refusal(execute(producer, changed["id"], 1, "0" * 64)) == "APPROVAL_INVALIDATED"
    reasons = [
        e["details"]["reason"]
        for e in server.rows("task_events", event_type="task.execution_refused")
    ]
    assert sorted(set(reasons)) == [
        "APPROVAL_INVALIDATED",
        "NOT_DECIDED",
        "REJECTED",
        "REVISION_REQUESTED",
    ]


def test_a_re_approved_task_refuses_the_old_revision_as_stale_or_invalidated(
    producer, editor
) -> None:
    task = new_subject_task(producer)
    decide(editor, task["id"])
    moved = revise(producer, task["id"], 1, SUBJECT | {"body": "v2"}).json()
    decide(editor, task["id"])
    assert refusal(execute(producer, task["id"], 1, task["digest"])) == "APPROVAL_INVALIDATED"
    assert refusal(execute(producer, task["id"], 2, "f" * 64)) == "STALE_DIGEST"
    assert execute(producer, task["id"], 2, moved["digest"]).status_code == 200


# -- list filters -----------------------------------------------------------------------


def test_tasks_are_filtered_by_execution_status_claimer_and_group(server, producer) -> None:
    with (
        server.new_client("reviewer", "editor-1") as editor,
        server.new_client("supervisor", "boss") as boss,
    ):
        running_id, digest = approved(producer, editor)
        execute(producer, running_id, 1, digest)
        mine = new_subject_task(producer)["id"]
        editor.claim(mine)
        theirs = new_subject_task(producer, assigned_group="legal")["id"]
        boss.claim(theirs)

        def ids(client: Client, **params: Any) -> list[str]:
            response = client.get("/tasks", params=params)
            assert response.status_code == 200, response.text
            return [t["id"] for t in response.json()["items"]]

        assert ids(producer, execution_status="EXECUTING") == [running_id]
        assert ids(producer, execution_status="COMPLETED") == []
        assert ids(editor, claimed_by="me") == [mine]
        assert ids(boss, claimed_by="me") == [theirs]
        assert ids(boss, claimed_by="editor-1") == [mine]
        assert ids(boss, assigned_group="legal") == [theirs]
        server.clock.advance(server.settings.lease_seconds)  # a lapsed claim is nobody's
        assert ids(editor, claimed_by="me") == []
        bad = editor.get("/tasks", params={"execution_status": "RUNNING"})
        assert (bad.status_code, bad.json()["error_code"]) == (422, "ERR_VALIDATION")


# -- the same operation asked again, and the one winner ---------------------------------------


def test_the_same_operation_asked_again_gets_its_execution_back_under_a_fresh_token(
    server, producer, editor
) -> None:
    task_id, digest = approved(producer, editor)
    lost = execute(producer, task_id, 1, digest, "op-1").json()  # the answer never arrived
    other = execute(producer, task_id, 1, digest, "op-2")
    assert (other.status_code, other.json()["error_code"]) == (409, "ERR_ALREADY_EXECUTING")

    again = execute(producer, task_id, 1, digest, "op-1")
    assert again.status_code == 200, again.text
    grant = again.json()
    assert grant["execution_token"] not in (None, lost["execution_token"])
    assert grant["operation_id"] == "op-1"
    assert {a["status"] for a in grant["actions"]} == {"PENDING"}
    # The old token is fenced off: it neither reports nor renews.
    fenced = report(producer, task_id, "publish_article", lost["execution_token"], operation_id="x")
    assert fenced.json()["error_code"] == "ERR_EXECUTION_LEASE_LOST"
    assert renew(producer, task_id, lost["execution_token"]).status_code == 409

    token = grant["execution_token"]
    for action in ("publish_article", "send_newsletter"):
        done = report(producer, task_id, action, token, operation_id="op-1")
        assert done.status_code == 200, done.text
    assert done.json()["execution_status"] == "COMPLETED"
    assert [a["status"] for a in server.rows("task_actions")] == ["COMPLETED", "COMPLETED"]
    types = event_types(server, task_id)
    assert types.count("task.execution_started") == 2
    assert types.count("task.action_completed") == 2


def test_a_race_of_executors_has_one_winning_operation(server, producer, editor) -> None:
    import asyncio

    import httpx

    task_id, digest = approved(producer, editor)
    operations = ["op-same"] * 4 + [f"op-{i}" for i in range(6)]

    async def race() -> list[httpx.Response]:
        async with httpx.AsyncClient(
            base_url=server.base_url, headers={"Authorization": f"Bearer {producer.key}"}
        ) as c:
            return await asyncio.gather(
                *(
                    c.post(
                        f"/tasks/{task_id}/execute",
                        json={"revision": 1, "digest": digest, "operation_id": op},
                    )
                    for op in operations
                )
            )

    responses = asyncio.run(race())
    granted = [r.json() for r in responses if r.status_code == 200]
    refused = [r.json() for r in responses if r.status_code != 200]
    assert {g["operation_id"] for g in granted} == {granted[0]["operation_id"]}
    assert {r["error_code"] for r in refused} == {"ERR_ALREADY_EXECUTING"}
    # Only the latest grant's token is live: exactly one of them may report.
    reports = [
        report(producer, task_id, "publish_article", g["execution_token"], operation_id=f"p{i}")
        for i, g in enumerate(granted)
    ]
    assert sorted(r.status_code for r in reports) == [200] + [409] * (len(granted) - 1)
