"""Digests of JSON values, reproducible in any language.

Every hash of JSON in Signoff is SHA-256 (lowercase hex) over the RFC 8785 (JSON
Canonicalization Scheme) serialisation, computed by the ``rfc8785`` package.
"""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785


def canonical_json(value: Any) -> bytes:
    """RFC 8785 canonical UTF-8 bytes of ``value``.

    Raises:
        rfc8785.CanonicalizationError: for values JCS cannot represent (callers validate
            input with :func:`signoff.domain.json_input.parse_json_strict` first).
    """
    return bytes(rfc8785.dumps(value))


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def json_digest(value: Any) -> str:
    """SHA-256 (hex) of the RFC 8785 form of ``value``."""
    return sha256_hex(canonical_json(value))


def compact_json_in_sent_order(value: Any) -> bytes:
    """What JavaScript's ``JSON.stringify(value)`` produces: no whitespace, object keys in
    the order they were sent. Scalars are serialised by RFC 8785, which specifies exactly
    ECMAScript's number and string formatting, so only key order differs from JCS.

    Seed ``000`` computes its precheck hash this way; see :func:`precheck_hash_matches`.
    """
    if isinstance(value, dict):
        members = (
            canonical_json(key) + b":" + compact_json_in_sent_order(item)
            for key, item in value.items()
        )
        return b"{" + b",".join(members) + b"}"
    if isinstance(value, list):
        return b"[" + b",".join(compact_json_in_sent_order(item) for item in value) + b"]"
    return canonical_json(value)


def precheck_hash_candidates(attempted_actions: Any) -> tuple[str, str]:
    """The two accepted precheck hashes for ``diagnostic_bundle.attempted_actions``:
    SHA-256 of the RFC 8785 form (preferred), and SHA-256 of the compact serialisation in
    the order sent (seed ``000``'s ``JSON.stringify``, kept for seed-era clients)."""
    return (
        json_digest(attempted_actions),
        sha256_hex(compact_json_in_sent_order(attempted_actions)),
    )


def precheck_hash_matches(attempted_actions: Any, claimed: str) -> bool:
    """True when ``claimed`` is either accepted precheck hash."""
    return claimed in precheck_hash_candidates(attempted_actions)
