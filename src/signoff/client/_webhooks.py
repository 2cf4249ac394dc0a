"""Verifying a delivery and reading it as a typed event (no server code needed)."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from collections.abc import Mapping, Sequence

from pydantic import ValidationError
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from signoff.client._errors import WebhookVerificationFailed
from signoff.client._models import WebhookEvent

__all__ = ["verify_event"]

STANDARD_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")


def _is_time(timestamp: str) -> bool:
    """Seconds since the epoch in the digits 0-9 (``"²".isdigit()`` is true too)."""
    return re.fullmatch(r"[0-9]{1,12}", timestamp) is not None


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in headers.items()}


def verify_event(
    headers: Mapping[str, str],
    body: bytes | str,
    secrets: Sequence[str] | str,
    *,
    tolerance_seconds: int = 300,
    allow_body_only_signature: bool = True,
) -> WebhookEvent:
    """Verify a delivery over its **raw** body and return it as a :class:`WebhookEvent`.

    ``secrets`` are the endpoint's secrets, newest first (``[current, previous]`` during a
    rotation); any one that verifies is enough. Standard Webhooks headers are checked first
    (they sign the id and the timestamp, which must be within ``tolerance_seconds``). Only
    when they are absent is ``X-Signature-256`` accepted (signs the body alone, so it proves
    no freshness: deduplicate on ``event.dedupe_key``); ``allow_body_only_signature=False``
    refuses such deliveries. A delivery carrying a bad Standard Webhooks signature is
    refused even if its ``X-Signature-256`` matches.

    Raises:
        WebhookVerificationFailed: answer 400 and do nothing.
    """
    raw = body.encode("utf-8") if isinstance(body, str) else bytes(body)
    keys = [secrets] if isinstance(secrets, str) else [s for s in secrets if s]
    if not keys:
        raise ValueError("at least one secret is needed")
    lowered = _lower(headers)
    if "webhook-signature" in lowered:
        scheme = "standard-webhooks"
        timestamp = lowered.get("webhook-timestamp", "")
        if not _is_time(timestamp) or abs(time.time() - int(timestamp)) > tolerance_seconds:
            raise WebhookVerificationFailed("stale or missing webhook-timestamp")
        signed = {name: lowered[name] for name in STANDARD_HEADERS if name in lowered}
        if not any(_standard_ok(secret, raw, signed) for secret in keys):
            raise WebhookVerificationFailed("webhook-signature does not match")
    elif "x-signature-256" in lowered and allow_body_only_signature:
        scheme = "x-signature-256"
        given = lowered["x-signature-256"].encode()
        expected = (
            ("sha256=" + hmac.new(s.encode(), raw, hashlib.sha256).hexdigest()).encode()
            for s in keys
        )
        if not any(hmac.compare_digest(given, e) for e in expected):
            raise WebhookVerificationFailed("X-Signature-256 does not match")
    else:
        raise WebhookVerificationFailed("no signature a receiver may accept")
    try:
        document = json.loads(raw)
        # What a receiver deduplicates on must be signed: Standard Webhooks signs the
        # webhook-id header; X-Signature-256 signs only the body, whose "id" is the same
        # event id (an unsigned header would let a replay pick a fresh key).
        signed_id = lowered.get("webhook-id") if scheme == "standard-webhooks" else None
        return WebhookEvent.model_validate(
            {**document, "webhook_id": signed_id or document.get("id"), "scheme": scheme}
        )
    except (ValueError, ValidationError, TypeError) as error:
        raise WebhookVerificationFailed(f"the body is not a Signoff event: {error}") from error


def _standard_ok(secret: str, raw: bytes, headers: dict[str, str]) -> bool:
    try:
        Webhook(secret).verify(raw, headers)
    except WebhookVerificationError:
        return False
    return True
