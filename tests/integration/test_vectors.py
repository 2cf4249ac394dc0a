"""The shared vectors (``tests/vectors/canonical.json``) hold for the server, the Python
SDK and independent Node libraries alike (the TypeScript SDK checks them in
``sdk/typescript/test/vectors.test.ts``): one canonical form, one digest, one signature."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from signoff.client import WebhookVerificationFailed, verify_event
from signoff.client._digests import canonical_json as sdk_canonical_json
from signoff.client._digests import digest as sdk_digest
from signoff.domain.digests import canonical_json, json_digest
from signoff.webhooks import signature_headers

TESTS = Path(__file__).resolve().parents[1]
VECTORS: dict[str, Any] = json.loads((TESTS / "vectors" / "canonical.json").read_text("utf-8"))


@pytest.mark.parametrize("vector", VECTORS["canonical"], ids=lambda v: v["name"])
def test_the_server_and_the_sdk_agree_with_each_canonical_vector(vector: dict[str, Any]) -> None:
    value = json.loads(vector["json"])
    assert canonical_json(value).decode("utf-8") == vector["canonical"]
    assert sdk_canonical_json(value).decode("utf-8") == vector["canonical"]
    assert json_digest(value) == sdk_digest(value) == vector["digest"]


@pytest.mark.parametrize("vector", VECTORS["refused"], ids=lambda v: v["name"])
def test_the_server_and_the_sdk_refuse_what_no_sdk_may_digest(vector: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="safe integer domain"):
        sdk_digest(json.loads(vector["json"]))
    with pytest.raises(ValueError, match="safe integer domain"):
        json_digest(json.loads(vector["json"]))


@pytest.mark.parametrize("vector", VECTORS["webhooks"], ids=lambda v: v["name"])
def test_the_server_signs_each_webhook_vector_and_the_sdk_verifies_it(
    vector: dict[str, Any],
) -> None:
    body = vector["body"].encode("utf-8")
    headers = signature_headers(
        event_id=vector["webhook_id"],
        body=body,
        secrets_newest_first=[vector["secret"]],
        timestamp=datetime.fromtimestamp(vector["timestamp"], UTC),
    )
    assert headers["webhook-signature"] == vector["webhook_signature"]
    assert headers["X-Signature-256"] == vector["x_signature_256"]
    # The vectors' timestamps are long past (Standard Webhooks refuses them as stale): the
    # SDK verifies the body-only signature here, fresh deliveries in test_webhooks.py.
    body_only = {"X-Signature-256": vector["x_signature_256"]}
    event = verify_event(body_only, body, [vector["secret"]])
    assert event.dedupe_key == vector["webhook_id"]
    with pytest.raises(WebhookVerificationFailed):
        verify_event(body_only, body + b" ", [vector["secret"]])


def test_independent_node_libraries_agree_with_every_vector() -> None:
    done = subprocess.run(
        ["node", str(TESTS / "node" / "vectors.mjs")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr
