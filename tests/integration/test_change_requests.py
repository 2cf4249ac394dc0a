"""Request changes, as a loop: a reviewer sends the work back with structured feedback, the
task waits on its producer (out of every reviewer's queue), and the next revision returns
it to review with the diff and the feedback side by side (SQLite and PostgreSQL)."""

from __future__ import annotations

import copy
import uuid
from typing import Any

from tests.integration.test_approvals import SUBJECT, execute, new_subject_task, revise
from tests.integration.test_timeouts import timed
from tests.integration.test_waiting import sweep
from tests.support import LiveServer

__all__ = ["timed"]  # the fixture, shared with test_timeouts.py

FIELDS = [
    {"path": "/body", "reason": "cite the source of the 12%"},
    {"path": "/title", "reason": "name the quarter"},
]


def _outbox(server: LiveServer, task_id: str, event_type: str) -> list[dict[str, Any]]:
    rows = server.rows("outbox_events", task_id=uuid.UUID(task_id))
    return [r["payload"] for r in rows if r["event_type"] == event_type]


def test_changes_asked_for_wait_on_the_producer_and_come_back_with_the_feedback(
    server: LiveServer,
) -> None:
    producer = server.new_client("producer", "agent-7")
    editor = server.new_client("reviewer", "editor-1")
    other = server.new_client("reviewer", "editor-2")
    task = new_subject_task(producer)
    token = editor.claim(task["id"]).json()["lease_token"]
    assert task["awaiting"] == "reviewers"
    assert task["change_request"] is None
    pin = {"revision": 1, "digest": task["digest"], "notes": "needs work"}

    # Bad feedback is refused before anything is written, naming the offending field.
    refusals = [
        ({"decision": "APPROVED", "fields": FIELDS[:1]}, "fields"),
        ({"decision": "REVISION_REQUESTED", "fields": [{"path": "body", "reason": "x"}]},
         "fields[0].path"),
        ({"decision": "REVISION_REQUESTED", "fields": [{"path": "/body", "reason": " "}]},
         "fields[0].reason"),
        ({"decision": "REVISION_REQUESTED", "fields": [FIELDS[0], FIELDS[0]]},
         "fields[1].path"),
    ]  # fmt: skip
    for body, field in refusals:
        refused = editor.resolve(task["id"], token, pin | body)
        assert refused.status_code == 422, refused.text
        assert refused.json()["error_code"] == "ERR_VALIDATION"
        assert field in {e["field"] for e in refused.json()["errors"]}
    held = editor.get(f"/tasks/{task['id']}").json()
    assert (held["status"], held["version"], held["decision"]) == ("CLAIMED", 2, None)

    # Sent back: the task waits on the producer, with the feedback on it.
    body = pin | {"decision": "REVISION_REQUESTED", "notes": "Please revise.", "fields": FIELDS}
    asked = editor.resolve(task["id"], token, body)
    assert asked.status_code == 200, asked.text
    sent = asked.json()
    assert (sent["status"], sent["decision"], sent["awaiting"]) == (
        "RESOLVED",
        "REVISION_REQUESTED",
        "producer",
    )
    feedback = sent["change_request"]
    assert feedback["notes"] == "Please revise."
    assert feedback["fields"] == FIELDS
    assert (feedback["revision"], feedback["by"]) == (1, "editor-1")
    # The identical request again is a retry; other fields are not.
    assert editor.resolve(task["id"], token, body).json()["version"] == sent["version"]
    changed = editor.resolve(task["id"], token, body | {"fields": FIELDS[:1]})
    assert changed.status_code == 409
    # Out of every reviewer's queue, and nothing executes.
    assert other.post("/tasks/claim-next").status_code == 204
    assert other.claim(task["id"]).status_code == 409
    listed = other.get("/tasks", params={"status": "PENDING_REVIEW"}).json()["items"]
    assert task["id"] not in {t["id"] for t in listed}
    gate = execute(producer, task["id"], 1, task["digest"])
    assert gate.json()["reason"] == "REVISION_REQUESTED"
    # The producer hears it with the feedback (the event's view, on either engine's path).
    [resolved] = _outbox(server, task["id"], "task.resolved")
    assert resolved["data"]["awaiting"] == "producer"
    assert resolved["data"]["change_request"]["fields"] == FIELDS

    # The next revision returns it to review; the feedback stays beside the diff.
    subject = copy.deepcopy(SUBJECT) | {
        "title": "Q3 results",
        "body": "Revenue grew 12% year on year (source: S01).",
    }
    back = revise(producer, task["id"], 1, subject)
    assert back.status_code == 200, back.text
    review = back.json()
    assert (review["status"], review["awaiting"], review["current_revision"]) == (
        "PENDING_REVIEW",
        "reviewers",
        2,
    )
    assert review["change_request"] == feedback
    [reopened] = _outbox(server, task["id"], "task.approval_invalidated")
    assert reopened["data"]["change_request"] == feedback
    diff = editor.get(f"/tasks/{task['id']}/diff", params={"from": 1, "to": 2}).json()
    changed_paths = {c["path"] for c in diff["changed"]}
    assert {f["path"] for f in FIELDS} <= changed_paths
    # Back in the queue: claim-next finds it; approving clears the request.
    claimed = other.post("/tasks/claim-next").json()
    assert claimed["id"] == task["id"]
    assert claimed["change_request"] == feedback
    pin2 = {"revision": 2, "digest": review["digest"]}
    done = other.resolve(task["id"], claimed["lease_token"], pin2 | {"decision": "APPROVED"})
    assert (done.json()["awaiting"], done.json()["change_request"]) == (None, None)
    assert execute(producer, task["id"], 2, review["digest"]).status_code == 200


def test_deadlines_keep_counting_while_the_producer_revises(timed: LiveServer) -> None:
    """Nothing fires while the task waits on its producer; its deadline is not moved, so a
    revision after it returns a task the next sweep decides as its time limit says."""
    producer = timed.new_client("producer", "agent-7")
    editor = timed.new_client("reviewer", "editor-1")
    task = new_subject_task(producer, timeout={"after_seconds": 60, "outcome": "reject"})
    token = editor.claim(task["id"]).json()["lease_token"]
    pin = {"revision": 1, "digest": task["digest"], "notes": "Source?"}
    editor.resolve(task["id"], token, pin | {"decision": "REVISION_REQUESTED"})
    timed.clock.advance(120)
    assert sweep(timed) == 0
    waiting = producer.get(f"/tasks/{task['id']}").json()
    assert (waiting["status"], waiting["awaiting"]) == ("RESOLVED", "producer")
    back = revise(producer, task["id"], 1, SUBJECT | {"body": "Revenue grew 12% (S01)."})
    assert back.json()["deadline_at"] == task["deadline_at"]
    assert sweep(timed) == 1
    decided = producer.get(f"/tasks/{task['id']}").json()
    assert (decided["decision"], decided["operator_id"], decided["awaiting"]) == (
        "REJECTED",
        "signoff-sweeper",
        None,
    )
