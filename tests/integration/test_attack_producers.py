"""Regressions found by attacking the producers' side (SDK, execution leases, metadata,
long-poll) against a real server on both engines."""

from __future__ import annotations

import pytest

from signoff.client import Signoff, verify_event
from tests.integration.test_sdk import escalate
from tests.support import LiveServer
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


@pytest.mark.xfail(
    strict=True,
    reason="SDK escalation ids derive from the key alone, not scoped to the producer",
)
def test_two_producers_may_use_the_same_escalation_key(server: LiveServer) -> None:
    keys = [server.new_client("producer", p).key for p in ("tenant-a", "tenant-b")]
    a = Signoff(server.base_url, str(keys[0]), backoff=0)
    b = Signoff(server.base_url, str(keys[1]), backoff=0)
    with a, b:
        mine = escalate(a, "langgraph:1:approve", entity_id="art-a")
        theirs = escalate(b, "langgraph:1:approve", entity_id="art-b")
    assert mine.id != theirs.id
    assert theirs.entity_id == "art-b"
