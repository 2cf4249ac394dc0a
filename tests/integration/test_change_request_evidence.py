"""The proof of what a reviewer asked to change, on both engines: a revision request's
``fields`` are in its trail record and so in its signed receipt; the chain, the receipt
and ``signoff verify`` on an export hold with them, beside records without them; a
decision naming no fields records exactly what it did before."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from signoff.client import verify_receipt
from signoff.domain.evidence import TrailRecord, b64url_decode
from signoff.domain.evidence_check import verify_receipt as verify_against_record
from tests.integration.test_evidence import cli
from tests.support import Client, LiveServer, escalation

SUBJECT: dict[str, Any] = {
    "title": "Quarterly results",
    "body": "Revenue grew 12% year on year.",
    "actions": [{"id": "publish_article"}],
}
FIELDS = [
    {"path": "/title", "reason": "Name the quarter"},
    {"path": "/body", "reason": "Cite the source of the 12%"},
]


def _ask(producer: Client, reviewer: Client, **body: Any) -> tuple[str, Any]:
    """A task escalated, claimed and sent back for revision with ``body``."""
    made = producer.escalate(escalation(subject=copy.deepcopy(SUBJECT)))
    assert made.status_code == 201, made.text
    task = made.json()
    token = reviewer.claim(task["id"]).json()["lease_token"]
    pin = {"revision": task["current_revision"], "digest": task["digest"]}
    asked = reviewer.resolve(
        task["id"], token, pin | {"decision": "REVISION_REQUESTED", "notes": "Not yet."} | body
    )
    assert asked.status_code == 200, asked.text
    return str(task["id"]), asked


def _resolved(reviewer: Client, task_id: str) -> dict[str, Any]:
    """The task's ``task.resolved`` record as its receipts list it (chain link included)."""
    items = reviewer.get(f"/tasks/{task_id}/receipts").json()["items"]
    [record] = [item for item in items if item["type"] == "task.resolved"]
    return dict(record)


def test_a_revision_requests_fields_are_in_its_trail_record_and_receipt(
    server: LiveServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    producer = server.new_client("producer", "bot")
    reviewer = server.new_client("reviewer", "rita")
    jwks = server.client(None).get("/.well-known/jwks.json").json()

    # Without fields: the record is what it always was.
    plain_id, plain = _ask(producer, reviewer)
    [plain_event] = [
        e
        for e in reviewer.get(f"/tasks/{plain_id}/events").json()["items"]
        if e["type"] == "task.resolved"
    ]
    assert set(plain_event["details"]) == {"decision", "door", "revision", "digest"}
    plain_claims = verify_receipt(plain.headers["Signoff-Receipt"], jwks, task_id=plain_id)
    assert "fields" not in plain_claims["details"]

    # With fields: the trail record carries them, in the order asked, with their reasons.
    task_id, asked = _ask(producer, reviewer, fields=FIELDS)
    assert asked.json()["change_request"]["fields"] == FIELDS
    [event] = [
        e
        for e in reviewer.get(f"/tasks/{task_id}/events").json()["items"]
        if e["type"] == "task.resolved"
    ]
    assert event["details"]["fields"] == FIELDS
    assert (event["details"]["decision"], event["details"]["revision"]) == (
        "REVISION_REQUESTED",
        1,
    )
    # ... and so does the receipt answered with the decision, which the keys verify.
    claims = verify_receipt(
        asked.headers["Signoff-Receipt"],
        jwks,
        task_id=task_id,
        decision="REVISION_REQUESTED",
        digest=asked.json()["digest"],
    )
    assert claims["details"]["fields"] == FIELDS
    assert claims["details"] == event["details"]
    # The receipt states exactly the stored record, whose hash its chain link holds.
    listed = _resolved(reviewer, task_id)
    payload = json.loads(b64url_decode(listed["receipt"].split(".")[1]))
    assert payload == claims
    record = _record(server, task_id, listed)
    assert record.computed_hash() == record.hash == listed["hash"]
    assert verify_against_record(listed["receipt"], jwks, record) == claims

    # An export of both (and of every record before them) verifies offline.
    with server.admin() as admin:
        bundle = admin.get("/evidence/export").json()
    exported = [json.loads(r["details"]) for r in bundle["records"]]
    assert FIELDS in [d.get("fields") for d in exported]
    keys_file, bundle_file = tmp_path / "jwks.json", tmp_path / "bundle.json"
    keys_file.write_text(json.dumps(jwks))
    bundle_file.write_text(json.dumps(bundle))
    status, out, _ = cli(capsys, "verify", str(bundle_file), "--keys", str(keys_file))
    assert status == 0, out
    assert "OK" in out


def _record(server: LiveServer, task_id: str, listed: dict[str, Any]) -> TrailRecord:
    """The stored trail record behind ``listed`` (its details as stored, not re-serialised)."""
    with server.admin() as admin:
        bundle = admin.get("/evidence/export").json()
    [found] = [r for r in bundle["records"] if r["id"] == listed["record_id"]]
    assert found["task_id"] == task_id
    return TrailRecord.from_json(found)
