"""Digests the SDK computes locally, exactly as the server does: SHA-256 (lowercase hex)
over the RFC 8785 (JSON Canonicalization Scheme) form."""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, date, datetime
from typing import Any

import rfc8785

__all__ = ["canonical_json", "digest", "escalation_ids", "precheck_hash"]

#: Names every escalation id the SDK derives from a caller's key.
ESCALATION_NAMESPACE = uuid.UUID("5d0c6a36-4b5e-4f6a-9d57-0f1d3c2b8e71")


def _plain(value: Any) -> Any:
    """Datetimes as RFC 3339 UTC strings (the server's format); containers recursively."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("datetimes must be timezone-aware")
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def canonical_json(value: Any) -> bytes:
    """RFC 8785 canonical UTF-8 bytes of ``value`` (NaN, ±Infinity and integers beyond
    ±(2^53−1) cannot be represented and raise)."""
    return bytes(rfc8785.dumps(_plain(value)))


def digest(subject: Any) -> str:
    """The digest of a subject: what the execution gate compares with the approved one."""
    return hashlib.sha256(canonical_json(subject)).hexdigest()


def precheck_hash(attempted_actions: Any) -> str:
    """The escalation's precheck hash over ``diagnostic_bundle.attempted_actions``."""
    return digest(attempted_actions)


def escalation_ids(key: str, principal_id: str) -> tuple[str, str]:
    """``(escalation_id, idempotency_key)`` derived from a caller's stable key: the same key
    always names the same escalation, so a re-run never creates a second task.

    The escalation id is scoped by the producer's principal (``GET /me``): two producers
    may use the same key without naming each other's escalation. Idempotency keys are
    already scoped per producer by the server."""
    if not key:
        raise ValueError("key must not be empty")
    escalation_id = str(uuid.uuid5(ESCALATION_NAMESPACE, f"{principal_id}\n{key}"))
    idempotency_key = "sdk-" + hashlib.sha256(key.encode("utf-8")).hexdigest()
    return escalation_id, idempotency_key
