"""Regressions found by attacking the producers' side (SDK, execution leases, metadata,
long-poll) against a real server on both engines."""

from __future__ import annotations

import uuid

from signoff.client import Signoff, verify_event
from tests.integration.test_approvals import decide, execute, new_subject_task, report
from tests.integration.test_sdk import escalate
from tests.integration.test_waiting import sweep
from tests.support import Client, LiveServer
from tests.unit.test_client import EVENT, SECRET, signed

# -- webhooks: what a receiver deduplicates on must be signed ------------------------------


def test_a_body_only_delivery_cannot_choose_its_own_dedupe_key() -> None:
    # X-Signature-256 signs the body alone: a captured delivery replayed with a fresh
    # (unsigned) webhook-id header must still deduplicate on the signed event id.
    body_only = {"X-Signature-256": signed(EVENT, SECRET)["X-Signature-256"]}
    first = verify_event(body_only, EVENT, [SECRET])
    replayed = verify_event(body_only | {"webhook-id": "evt-replayed-1"}, EVENT, [SECRET])
    assert first.dedupe_key == replayed.dedupe_key == "evt-1"
    assert replayed.webhook_id == "evt-1"
    # Under Standard Webhooks the header is signed: it stays the key.
    assert verify_event(signed(EVENT, SECRET), EVENT, [SECRET]).dedupe_key == "evt-1"


# -- the SDK's escalation keys -------------------------------------------------------------


def test_two_producers_may_use_the_same_escalation_key(server: LiveServer) -> None:
    keys = [server.new_client("producer", p).key for p in ("tenant-a", "tenant-b")]
    a = Signoff(server.base_url, str(keys[0]), backoff=0)
    b = Signoff(server.base_url, str(keys[1]), backoff=0)
    with a, b:
        mine = escalate(a, "langgraph:1:approve", entity_id="art-a")
        theirs = escalate(b, "langgraph:1:approve", entity_id="art-b")
    assert mine.id != theirs.id
    assert theirs.entity_id == "art-b"


# -- execution: a retried action that fails again ends the execution -----------------------


def test_a_retried_action_that_fails_again_ends_the_execution_failed(server: LiveServer) -> None:
    with server.new_client("producer", "agent-7") as producer:
        with server.new_client("reviewer", "editor-1") as editor:
            task_id, digest = approved(producer, editor)
        grant = execute(producer, task_id, 1, digest, "op-1").json()
        token = grant["execution_token"]
        report(producer, task_id, "publish_article", token, operation_id="op-1", verb="fail")
        done = report(producer, task_id, "send_newsletter", token, operation_id="op-1")
        assert done.json()["execution_status"] == "FAILED"
        # The same executor retries the failed action under a new grant; it fails again.
        server.clock.advance(1)
        retry = execute(producer, task_id, 1, digest, "op-1").json()
        assert retry["execution_status"] == "EXECUTING"
        again = report(
            producer, task_id, "publish_article", retry["execution_token"], operation_id="op-1",
            verb="fail", result={"error": "still down"},
        )  # fmt: skip
        assert again.status_code == 200, again.text
        assert again.json()["execution_status"] == "FAILED"
        shown = producer.get(f"/tasks/{task_id}").json()
        assert shown["execution_status"] == "FAILED"
        assert shown["execution_lease_expires_at"] is None
        # Nothing is left running: the sweeper has no stalled execution to report.
        server.clock.advance(server.settings.execution_lease_seconds + 1)
        sweep(server)
        types = [r["event_type"] for r in server.rows("task_events", task_id=uuid.UUID(task_id))]
        assert "task.execution_stalled" not in types
        # A repeated report of that failure is still answered from the record.
        repeat = report(
            producer, task_id, "publish_article", retry["execution_token"], operation_id="op-1",
            verb="fail",
        )  # fmt: skip
        assert (repeat.status_code, repeat.json()["execution_status"]) == (200, "FAILED")


def approved(producer: Client, editor: Client) -> tuple[str, str]:
    task = new_subject_task(producer)
    digest = decide(editor, task["id"]).json()["digest"]
    return str(task["id"]), str(digest)
