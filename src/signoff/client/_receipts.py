"""Checking a receipt before acting on it: a compact JWS (EdDSA) over the RFC 8785 form of
a trail record, signed by a key of the server's ``/.well-known/jwks.json``.

Imports ``cryptography`` when first used (installed with Signoff)."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from signoff.client._errors import SignoffError

__all__ = ["ReceiptInvalid", "verify_receipt"]


class ReceiptInvalid(SignoffError):
    """A receipt that is malformed, signed by no key given, badly signed, signed by a key
    retired before the record, or that states something other than what was expected."""


def _decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _shown(value: Any) -> str:
    """A JSON value as a reason quotes it (as the TypeScript SDK's ``verifyReceipt`` does)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def verify_receipt(
    receipt: str,
    jwks: Mapping[str, Any],
    *,
    task_id: str | None = None,
    digest: str | None = None,
    decision: str | None = None,
) -> dict[str, Any]:
    """The claims of ``receipt`` once its signature verifies with a key of ``jwks`` (a JWK
    Set) and it names ``task_id``, ``digest`` and ``decision`` where given.

    Raises:
        ReceiptInvalid: saying why.
    """
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    parts = receipt.split(".") if isinstance(receipt, str) else []
    if len(parts) != 3:
        raise ReceiptInvalid("not a compact JWS")
    try:
        header = json.loads(_decode(parts[0]))
        claims = json.loads(_decode(parts[1]))
        signature = _decode(parts[2])
    except ValueError as error:
        raise ReceiptInvalid(f"not a compact JWS: {error}") from None
    if not isinstance(header, dict) or header.get("alg") != "EdDSA":
        raise ReceiptInvalid("not signed with EdDSA")
    listed = jwks.get("keys") if isinstance(jwks, Mapping) else None
    keys = {
        k.get("kid"): k
        for k in (listed if isinstance(listed, list) else [])
        if isinstance(k, Mapping)
    }
    kid = header.get("kid")
    jwk = keys.get(kid) if isinstance(kid, str) else None
    if jwk is None or jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
        raise ReceiptInvalid(f"signed by an unknown key {_shown(kid)}")
    try:
        Ed25519PublicKey.from_public_bytes(_decode(jwk["x"])).verify(
            signature, f"{parts[0]}.{parts[1]}".encode()
        )
    except (InvalidSignature, ValueError, KeyError, TypeError):
        raise ReceiptInvalid("the signature does not verify") from None
    if not isinstance(claims, dict):
        raise ReceiptInvalid("the payload is not an object")
    exp = jwk.get("exp")
    at = claims.get("at")
    if isinstance(exp, int) and not isinstance(exp, bool) and isinstance(at, str):
        try:
            made = datetime.fromisoformat(at).replace(tzinfo=UTC).timestamp()
        except ValueError:
            raise ReceiptInvalid(f"the receipt's at is not a time: {_shown(at)}") from None
        if made >= exp:
            raise ReceiptInvalid("signed with a key retired before the record was made")
    for name, expected in (("task_id", task_id), ("digest", digest), ("decision", decision)):
        if expected is not None and claims.get(name) != expected:
            raise ReceiptInvalid(
                f"the receipt's {name} is {_shown(claims.get(name))}, not {_shown(expected)}"
            )
    return claims
