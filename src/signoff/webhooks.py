"""Signing and verifying Signoff webhooks — for the dispatcher and for receivers.

Every delivery carries two independent signature schemes over the exact raw body:

* ``X-Signature-256: sha256=<hex>`` — HMAC-SHA256 keyed with the endpoint secret string
  (``whsec_…``) as UTF-8 bytes, GitHub's format;
* Standard Webhooks: ``webhook-id`` (the event id, the same on every retry),
  ``webhook-timestamp`` (Unix seconds) and ``webhook-signature`` (``v1,<base64>`` per
  live secret, space-separated during a rotation), made by the ``standardwebhooks``
  package; for an endpoint with ``asymmetric_signature``, also ``v1a,<base64>``: Ed25519
  by the server's signing key over ``<id>.<timestamp>.<body>``, which receivers check
  with a public key of ``/.well-known/jwks.json`` (:func:`verify_asymmetric`).

Receivers call :func:`verify` with the request headers, the raw body and their secret, or
:func:`verify_event` (from the SDK, :mod:`signoff.client`) to get a typed event back.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from signoff.domain.params import number_or_none

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

    from signoff.client._webhooks import verify_event

__all__ = [
    "WebhookVerificationError",
    "new_secret",
    "signature_headers",
    "verify",
    "verify_asymmetric",
    "verify_event",
    "x_signature_256",
]


def __getattr__(name: str) -> Any:
    """``verify_event`` comes from the SDK when asked for: the server starts without it."""
    if name == "verify_event":
        from signoff.client._webhooks import verify_event

        return verify_event
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


SECRET_PREFIX = "whsec_"  # noqa: S105 (a prefix, not a secret)


def new_secret() -> str:
    """``whsec_`` + base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def x_signature_256(secret: str, body: bytes) -> str:
    """``sha256=`` + lowercase hex HMAC-SHA256 of ``body`` keyed with ``secret`` (UTF-8)."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def signature_headers(
    *,
    event_id: str,
    body: bytes,
    secrets_newest_first: Sequence[str],
    timestamp: datetime,
    asymmetric_key: Ed25519PrivateKey | None = None,
) -> dict[str, str]:
    """All signature headers for one attempt. ``X-Signature-256`` uses the newest secret;
    ``webhook-signature`` carries one ``v1,`` signature per live secret, and a ``v1a,``
    one by ``asymmetric_key`` when given."""
    text = body.decode("utf-8")
    signatures = [Webhook(s).sign(event_id, timestamp, text) for s in secrets_newest_first]
    if asymmetric_key is not None:
        signed = asymmetric_key.sign(_signed_content(event_id, timestamp, body))
        signatures.append("v1a," + base64.b64encode(signed).decode("ascii"))
    return {
        "webhook-id": event_id,
        "webhook-timestamp": str(int(timestamp.timestamp())),
        "webhook-signature": " ".join(signatures),
        "X-Signature-256": x_signature_256(secrets_newest_first[0], body),
    }


def _signed_content(event_id: str, timestamp: datetime | int, body: bytes) -> bytes:
    seconds = timestamp if isinstance(timestamp, int) else int(timestamp.timestamp())
    return f"{event_id}.{seconds}.".encode() + body


def verify_asymmetric(
    headers: Mapping[str, str],
    raw_body: bytes,
    public_key: Ed25519PublicKey,
    tolerance_seconds: int = 300,
) -> None:
    """Check a delivery's ``v1a`` signature with the server's public key only.

    Raises:
        WebhookVerificationError: no ``v1a`` signature verifies, or the timestamp is stale.
    """
    from cryptography.exceptions import InvalidSignature

    lowered = {k.lower(): v for k, v in headers.items()}
    seconds = number_or_none(lowered.get("webhook-timestamp", ""), most=10**12)
    if seconds is None or abs(time.time() - seconds) > tolerance_seconds:
        raise WebhookVerificationError("stale or missing webhook-timestamp")
    content = _signed_content(lowered.get("webhook-id", ""), seconds, raw_body)
    for signature in lowered.get("webhook-signature", "").split(" "):
        version, _, value = signature.partition(",")
        if version != "v1a":
            continue
        try:
            public_key.verify(base64.b64decode(value), content)
        except (InvalidSignature, ValueError):
            continue
        return
    raise WebhookVerificationError("no v1a signature verifies with this public key")


def verify(
    headers: Mapping[str, str],
    raw_body: bytes,
    secret: str,
    tolerance_seconds: int = 300,
    *,
    allow_body_only_signature: bool = False,
) -> None:
    """Check a delivery's signature, in constant time.

    By default the Standard Webhooks scheme is required: ``webhook-id``,
    ``webhook-timestamp`` (within ``tolerance_seconds`` of now, in seconds) and
    ``webhook-signature``, which signs the id and timestamp too, so a captured delivery
    cannot be replayed later. ``allow_body_only_signature=True`` also accepts
    ``X-Signature-256`` alone (GitHub's scheme), which signs only the body and so cannot
    prove freshness: receivers that use it must deduplicate on the event id in the body.
    Header names are matched case-insensitively.

    Raises:
        WebhookVerificationError: the signature does not match, the timestamp is stale, or
            the required scheme is missing.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    if "webhook-signature" in lowered:
        timestamp = lowered.get("webhook-timestamp", "")
        seconds = number_or_none(timestamp, most=10**12)
        if seconds is None or abs(time.time() - seconds) > tolerance_seconds:
            raise WebhookVerificationError("stale or missing webhook-timestamp")
        names = ("webhook-id", "webhook-timestamp", "webhook-signature")
        Webhook(secret).verify(raw_body, {k: lowered[k] for k in names if k in lowered})
        return
    if not allow_body_only_signature:
        raise WebhookVerificationError("webhook-signature is required")
    given = lowered.get("x-signature-256", "")
    if not hmac.compare_digest(given.encode(), x_signature_256(secret, raw_body).encode()):
        raise WebhookVerificationError("X-Signature-256 does not match")
