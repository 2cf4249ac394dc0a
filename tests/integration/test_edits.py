"""Edit, then approve (SQLite and PostgreSQL): a reviewer changes what the producer declared
editable and approves the change; it is a new revision by the reviewer, the approval binds
its digest, the producer learns it through every way of waiting, and the execution gate
takes only the edited digest."""

from __future__ import annotations

import copy
import uuid
from typing import Any

from signoff.client import Signoff
from signoff.domain.digests import json_digest
from tests.integration.test_approvals import SUBJECT, execute, new_subject_task
from tests.support import LiveServer

EDITABLE = ["/title", "/body"]


def test_a_reviewers_edit_is_what_is_approved_and_what_runs(server: LiveServer) -> None:
    producer = server.new_client("producer", "agent-7")
    editor = server.new_client("reviewer", "editor-1")
    task = new_subject_task(producer, editable=EDITABLE)
    assert task["editable"] == EDITABLE
    token = editor.claim(task["id"]).json()["lease_token"]
    pin = {"revision": 1, "digest": task["digest"]}
    edited = copy.deepcopy(SUBJECT) | {"title": "Q3 results", "body": "Revenue grew 12% (S01)."}

    # Refused before anything is written, naming what is wrong.
    refusals = [
        ({"subject": SUBJECT | {"destination": "print"}}, 422, "ERR_NOT_EDITABLE",
         "subject/destination"),
        ({"subject": SUBJECT | {"title": 7}}, 422, "ERR_VALIDATION", "subject/title"),
        ({"subject": SUBJECT}, 422, "ERR_VALIDATION", "subject"),
        ({"subject": edited, "decision": "APPROVED"}, 422, "ERR_VALIDATION", "subject"),
        ({"subject": edited, "revision": 2}, 409, "ERR_STALE_REVISION", None),
    ]  # fmt: skip
    for body, status, code, field in refusals:
        refused = editor.resolve(
            task["id"], token, pin | {"decision": "APPROVED_WITH_EDITS"} | body
        )
        assert (refused.status_code, refused.json()["error_code"]) == (status, code), refused.text
        if field is not None:
            assert field in {e["field"] for e in refused.json()["errors"]}
    assert producer.get(f"/tasks/{task['id']}").json()["version"] == 2
    assert len(producer.get(f"/tasks/{task['id']}/revisions").json()["items"]) == 1

    decided = editor.resolve(
        task["id"],
        token,
        pin | {"decision": "APPROVED_WITH_EDITS", "subject": edited, "notes": "named it"},
    )
    assert decided.status_code == 200, decided.text
    view = decided.json()
    digest = json_digest(edited)
    assert (view["decision"], view["current_revision"], view["approved_revision"]) == (
        "APPROVED_WITH_EDITS",
        2,
        2,
    )
    assert view["digest"] == view["approved_digest"] == digest
    revision = producer.get(f"/tasks/{task['id']}/revisions/2").json()
    assert (revision["created_by"], revision["subject"]) == ("editor-1", edited)
    trail = producer.get(f"/tasks/{task['id']}/events").json()["items"]
    [resolved] = [e for e in trail if e["action"] == "resolve"]
    assert resolved["details"]["edited"] == {
        "from_revision": 1,
        "from_digest": task["digest"],
        "changed_paths": ["/body", "/title"],
    }
    [event] = [
        r["payload"]
        for r in server.rows("outbox_events", task_id=uuid.UUID(task["id"]))
        if r["event_type"] == "task.resolved"
    ]
    assert (event["data"]["decision"], event["data"]["approved_digest"]) == (
        "APPROVED_WITH_EDITS",
        digest,
    )

    # The producer's SDK, waiting on the revision it sent: the edit is the decision.
    with Signoff(server.base_url, str(producer.key), backoff=0) as agent:
        waited = agent.wait_for_decision(task["id"], timeout=5, revision=1)
        assert (waited.edited, waited.is_approved) == (True, True)
        runs = agent.approved_subject(waited)
        assert runs == edited
    # Only the edit runs: the producer's own version is refused.
    stale = execute(producer, task["id"], 1, task["digest"])
    assert stale.json()["reason"] in {"STALE_DIGEST", "APPROVAL_INVALIDATED"}
    assert execute(producer, task["id"], 2, digest).status_code == 200


def test_nothing_is_editable_unless_the_producer_says_so(server: LiveServer) -> None:
    producer = server.new_client("producer", "agent-7")
    editor = server.new_client("reviewer", "editor-1")
    task = new_subject_task(producer)
    assert task["editable"] is None
    token = editor.claim(task["id"]).json()["lease_token"]
    body: dict[str, Any] = {
        "decision": "APPROVED_WITH_EDITS",
        "revision": 1,
        "digest": task["digest"],
        "subject": SUBJECT | {"title": "Q3"},
    }
    refused = editor.resolve(task["id"], token, body)
    assert (refused.status_code, refused.json()["error_code"]) == (422, "ERR_NOT_EDITABLE")
    # Declared at escalation only: a revision cannot widen it.
    widened = producer.put(
        f"/tasks/{task['id']}/subject",
        headers={"If-Match": '"1"'},
        json={"subject": SUBJECT, "editable": ["/title"]},
    )
    assert widened.status_code == 422
