"""The offline verifier on bundles it cannot read: one clear BundleError, never another
exception; and the Merkle root against RFC 6962's hashing written out by hand."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import pytest

from signoff.domain.evidence import merkle_root
from signoff.domain.evidence_check import BundleError, parse_bundle, verify_bundle

GOOD: dict[str, Any] = {
    "format": "signoff.evidence-bundle/v1",
    "since": None,
    "until": None,
    "keys": {"keys": []},
    "records": [],
    "checkpoints": [],
}
RECORD = {
    "id": 1,
    "task_id": "8441bd50-e3b7-46e9-86dd-7cf6b975f016",
    "event_type": "task.created",
    "action": "escalate",
    "status": "PENDING_REVIEW",
    "version": 1,
    "actor_id": "bot",
    "actor_role": "producer",
    "created_at": "2026-12-07 01:13:21.000000",
    "details": "not json",
    "prev_hash": "",
    "hash": "0" * 64,
    "receipt": "a.b.c",
}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (json.dumps(GOOD)[:-5], "the bundle is incomplete: its JSON ends before it closes"),
        ('{"format":"signoff.evidence-bundle/v1","records":[', "the bundle is incomplete"),
        ("", "the bundle is empty"),
        (json.dumps(GOOD).replace(":", "=", 1), "not JSON (truncated or damaged?)"),
        ("[]", "not an evidence bundle"),
        (json.dumps(GOOD | {"records": {}}), '"records" is missing or not a list'),
        (json.dumps(GOOD | {"keys": []}), '"keys" is missing or not a dict'),
        (json.dumps(GOOD | {"since": "last week"}), '"since" is not an RFC 3339 time'),
    ],
)
def test_an_unreadable_bundle_is_refused_saying_why(text: str, says: str) -> None:
    with pytest.raises(BundleError, match=re.escape(says)):
        parse_bundle(text)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"records": ["nonsense"]}, "record #0 of the bundle is malformed"),
        ({"records": [RECORD | {"version": "1"}]}, "record #0 of the bundle is malformed"),
        ({"keys": {"keys": [{"kty": "OKP"}]}}, "a key of the key set has no kid"),
        ({"checkpoints": ["nonsense"]}, "checkpoint #0 of the bundle is malformed"),
    ],
)
def test_a_malformed_part_is_refused_saying_which(change: dict[str, Any], says: str) -> None:
    with pytest.raises(BundleError, match=says):
        verify_bundle(parse_bundle(json.dumps(GOOD | change)))


def test_a_record_with_garbage_is_named_not_a_crash() -> None:
    checkpoint = {"checkpoint": 7, "leaves": ["x y"]}
    report = verify_bundle(GOOD | {"records": [RECORD], "checkpoints": [checkpoint]})
    assert any("its contents do not match its hash" in f for f in report.failures)
    assert any("not a compact JWS" in f for f in report.failures)
    assert any(f.startswith("checkpoint #0: refused") for f in report.failures)


def _leaf(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def test_the_merkle_root_is_rfc_6962s() -> None:
    a, b, c = (_leaf(x.encode()) for x in "abc")
    assert merkle_root([]) == hashlib.sha256(b"").hexdigest()
    assert merkle_root(["a"]) == a.hex()
    # Three leaves split at the largest power of two below three: ((a, b), c).
    assert merkle_root(["a", "b", "c"]) == _node(_node(a, b), c).hex()
