"""Digests of JSON values, reproducible in any language.

Every hash of JSON in Signoff is SHA-256 (lowercase hex) over the RFC 8785 (JSON
Canonicalization Scheme) serialisation, computed by the ``rfc8785`` package — or, for
the values where the two provably write the same bytes, by ``orjson`` (compiled; the
reference is pure Python and was a tenth of an escalation's CPU). :func:`_plain` says
which values those are; ``tests/unit/test_digests.py`` holds the two equal on generated
values.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import orjson
import rfc8785

#: Integers RFC 8785 (I-JSON) can represent exactly.
_SAFE_INTEGER = 2**53 - 1


def _plain(value: Any) -> bool:
    """Whether ``orjson`` serialises ``value`` exactly as RFC 8785 does: strings, booleans,
    null, safe integers, and finite floats that are not integral (an integral float such
    as ``1.0`` is ``1`` in RFC 8785, ``1.0`` in orjson) nor in [1e-6, 1e-5) (``1e-6`` there,
    ``0.000001`` in RFC 8785), in objects whose keys are ASCII
    (sorted by UTF-8 bytes, as orjson sorts, which is then the UTF-16 order RFC 8785
    prescribes) and arrays. Anything else goes to the reference implementation."""
    pending = [value]  # a loop, not recursion: this runs on every escalation's body
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind is str or kind is bool or item is None:
            continue
        if kind is dict:
            for key in item:
                if type(key) is not str or not key.isascii():
                    return False
            pending.extend(item.values())
        elif kind is list:
            pending.extend(item)
        elif kind is int:
            if not -_SAFE_INTEGER <= item <= _SAFE_INTEGER:
                return False
        elif kind is float:
            # orjson writes [1e-6, 1e-5) with an exponent where ECMAScript does not.
            if not math.isfinite(item) or item.is_integer() or 1e-6 <= abs(item) < 1e-5:
                return False
        else:
            return False
    return True


def canonical_json(value: Any) -> bytes:
    """RFC 8785 canonical UTF-8 bytes of ``value``.

    Raises:
        rfc8785.CanonicalizationError: for values JCS cannot represent (callers validate
            input with :func:`signoff.domain.json_input.parse_json_strict` first).
    """
    if _plain(value):
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:  # e.g. a lone surrogate: the reference decides
            pass
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

    Clients that hash ``JSON.stringify`` output compute their precheck hash this way; see
    :func:`precheck_hash_matches`.
    """
    if _plain(value):
        try:
            return orjson.dumps(value)  # keys in the order given, scalars as RFC 8785
        except orjson.JSONEncodeError:
            pass
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
    the order sent (JavaScript's ``JSON.stringify``, accepted for clients that hash that)."""
    return (
        json_digest(attempted_actions),
        sha256_hex(compact_json_in_sent_order(attempted_actions)),
    )


def precheck_hash_matches(attempted_actions: Any, claimed: str) -> bool:
    """True when ``claimed`` is either accepted precheck hash (the second is computed
    only when the first does not match)."""
    if json_digest(attempted_actions) == claimed:
        return True
    return sha256_hex(compact_json_in_sent_order(attempted_actions)) == claimed
