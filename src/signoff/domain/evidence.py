"""Evidence anyone can check: the trail's hash chain, signed receipts and checkpoints.

Everything here is a pure function of public values, so an auditor's machine (the
``signoff verify`` command, the SDK, another language) computes the same bytes:

- **The chain.** Each trail record carries ``prev_hash`` (the hash of the task's record
  before it, ``""`` for the first) and ``hash`` = SHA-256 over :func:`link_message`:
  the record's fields, each length-prefixed, after the previous hash. The database
  computes it in the transaction that writes the record (a trigger on both engines, the
  trigger function ``signoff_trail_link`` on PostgreSQL, ``signoff_trail_hash`` registered
  on SQLite's connections); :func:`trail_hash` is the same function here.
- **Receipts.** A receipt is the record as RFC 8785 canonical JSON (:func:`receipt_claims`,
  generic over every kind of record: any decision, vote, door or extra detail), signed
  with Ed25519 as a compact JWS (RFC 7515, ``alg`` ``EdDSA`` of RFC 8037).
- **Checkpoints.** A Merkle root (RFC 6962's hashing, :func:`merkle_root`) over the
  hashes of the records in an id range, chained to the checkpoint before it and signed
  like a receipt.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from signoff.domain.digests import canonical_json

TRAIL_VERSION = "signoff-trail-v1"
RECEIPT_TYPE = "signoff.receipt/v1"
CHECKPOINT_TYPE = "signoff.checkpoint/v1"
#: The detail keys a receipt lifts to its top level when a record has them (any kind).
_LIFTED = ("decision", "revision", "digest", "door", "stage", "rule", "votes", "grant_id")


def time_text(moment: datetime) -> str:
    """The instant as the chain hashes it: UTC, ``YYYY-MM-DD HH:MM:SS.ffffff``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def link_message(prev_hash: str, fields: Sequence[str]) -> bytes:
    """What a record's hash is taken over: the version line, the previous hash, then each
    field as ``<UTF-8 length>:<text>`` on a line of its own."""
    parts = [TRAIL_VERSION, "\n", prev_hash, "\n"]
    for text in fields:
        parts += [str(len(text.encode())), ":", text, "\n"]
    return "".join(parts).encode()


def trail_hash(
    prev_hash: str,
    task_id: str,
    event_type: str,
    action: str,
    status: str,
    version: int,
    actor_id: str,
    actor_role: str,
    created_at: str,
    details: str,
) -> str:
    """The hash of a trail record. ``details``: the record's details as stored (compact
    JSON text); ``created_at``: :func:`time_text`."""
    fields = (task_id, event_type, action, status, str(version), actor_id, actor_role)
    message = link_message(prev_hash, (*fields, created_at, details))
    return hashlib.sha256(message).hexdigest()


@dataclass(frozen=True)
class TrailRecord:
    """One trail record as stored, with its chain link."""

    id: int
    task_id: str
    event_type: str
    action: str
    status: str
    version: int
    actor_id: str
    actor_role: str
    created_at: str
    details: str
    prev_hash: str
    hash: str

    def computed_hash(self) -> str:
        return trail_hash(
            self.prev_hash,
            self.task_id,
            self.event_type,
            self.action,
            self.status,
            self.version,
            self.actor_id,
            self.actor_role,
            self.created_at,
            self.details,
        )

    def as_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> TrailRecord:
        """Raises ``KeyError``/``TypeError``/``ValueError`` for a malformed record."""
        record = cls(**{name: value[name] for name in cls.__dataclass_fields__})
        for name in cls.__dataclass_fields__:
            expected = int if name in ("id", "version") else str
            if type(getattr(record, name)) is not expected:
                raise TypeError(f"{name} must be {expected.__name__}")
        return record


def receipt_claims(record: TrailRecord) -> dict[str, Any]:
    """What a receipt states about ``record``: the task, the record's kind and outcome,
    who (principal, role, door) and when, every detail recorded with it, and the chain
    link. Details named in ``_LIFTED`` (revision, digest, decision, rule, votes…) are
    also stated at the top level when the record has them."""
    details = json.loads(record.details)
    claims: dict[str, Any] = {
        "typ": RECEIPT_TYPE,
        "task_id": record.task_id,
        "record_id": record.id,
        "type": record.event_type,
        "action": record.action,
        "outcome": record.status,
        "task_version": record.version,
        "who": {
            "principal": record.actor_id,
            "role": record.actor_role,
            "door": details.get("door") if isinstance(details, dict) else None,
        },
        "at": record.created_at,
        "details": details,
        "prev_hash": record.prev_hash,
        "record_hash": record.hash,
    }
    if isinstance(details, dict):
        for key in _LIFTED:
            if key in details and key != "door":
                claims[key] = details[key]
    return claims


# --- JWS (compact, EdDSA) ---------------------------------------------------------------


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign_compact(key: Ed25519PrivateKey, kid: str, claims: Mapping[str, Any]) -> str:
    """A compact JWS over the RFC 8785 form of ``claims``."""
    header = b64url(canonical_json({"alg": "EdDSA", "kid": kid, "typ": "JWT"}))
    payload = b64url(canonical_json(dict(claims)))
    signature = key.sign(f"{header}.{payload}".encode())
    return f"{header}.{payload}.{b64url(signature)}"


class BadSignature(ValueError):
    """A JWS that is malformed, names an unknown key, or whose signature is wrong."""


def public_key_from_jwk(jwk: Mapping[str, Any]) -> Ed25519PublicKey:
    if jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519" or not isinstance(jwk.get("x"), str):
        raise BadSignature(f"key {jwk.get('kid')!r} is not an OKP Ed25519 JWK")
    return Ed25519PublicKey.from_public_bytes(b64url_decode(jwk["x"]))


def open_compact(jws: str, keys: Mapping[str, Mapping[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The key id and claims of a compact JWS whose signature ``keys`` (JWKs by ``kid``)
    verify. Raises :class:`BadSignature`."""
    parts = jws.split(".") if isinstance(jws, str) else []
    if len(parts) != 3:
        raise BadSignature("not a compact JWS (three dot-separated parts)")
    try:
        header = json.loads(b64url_decode(parts[0]))
        claims = json.loads(b64url_decode(parts[1]))
        signature = b64url_decode(parts[2])
    except ValueError as error:
        raise BadSignature(f"not a compact JWS ({error})") from None
    if not isinstance(header, dict) or header.get("alg") != "EdDSA":
        raise BadSignature("the JWS header does not name alg EdDSA")
    kid = header.get("kid")
    if not isinstance(kid, str) or kid not in keys:
        raise BadSignature(f"signed by an unknown key {kid!r}")
    try:
        public_key_from_jwk(keys[kid]).verify(signature, f"{parts[0]}.{parts[1]}".encode())
    except (InvalidSignature, ValueError):
        raise BadSignature(f"the signature does not verify with key {kid}") from None
    if not isinstance(claims, dict):
        raise BadSignature("the JWS payload is not a JSON object")
    return kid, claims


def public_jwk(
    public_bytes: bytes, kid: str, *, created_at: datetime, retired_at: datetime | None
) -> dict[str, Any]:
    """An OKP/Ed25519 JWK (RFC 8037) with the key's lifetime: ``iat`` (seconds) and,
    once retired, ``exp`` — a record after ``exp`` signed by this key is refused."""
    jwk: dict[str, Any] = {
        "kty": "OKP",
        "crv": "Ed25519",
        "x": b64url(public_bytes),
        "kid": kid,
        "alg": "EdDSA",
        "use": "sig",
        "iat": int(created_at.timestamp()),
    }
    if retired_at is not None:
        jwk["exp"] = int(retired_at.timestamp()) + 1
    return jwk


def key_id(public_bytes: bytes) -> str:
    """The RFC 7638 thumbprint of the public key: its id anywhere."""
    members = {"crv": "Ed25519", "kty": "OKP", "x": b64url(public_bytes)}
    return b64url(hashlib.sha256(canonical_json(members)).digest())


# --- Merkle roots (RFC 6962 hashing) ----------------------------------------------------


def merkle_root(leaves: Sequence[str]) -> str:
    """The RFC 6962 Merkle tree hash (hex) of ``leaves``, each taken as its UTF-8 bytes."""
    if not leaves:
        return hashlib.sha256(b"").hexdigest()
    return _tree([leaf.encode() for leaf in leaves]).hex()


def _tree(leaves: Sequence[bytes]) -> bytes:
    if len(leaves) == 1:
        return hashlib.sha256(b"\x00" + leaves[0]).digest()
    split = 1 << ((len(leaves) - 1).bit_length() - 1)  # the largest power of 2 below n
    return hashlib.sha256(b"\x01" + _tree(leaves[:split]) + _tree(leaves[split:])).digest()


def leaf(record_id: int, task_id: str, created_at: str, record_hash: str) -> str:
    """A checkpoint's leaf: which record, of which task, when, and its hash."""
    return f"{record_id} {task_id} {created_at} {record_hash}"


def checkpoint_claims(
    *,
    seq: int,
    first_record_id: int,
    last_record_id: int,
    size: int,
    root: str,
    prev_root: str,
    made_at: datetime,
) -> dict[str, Any]:
    return {
        "typ": CHECKPOINT_TYPE,
        "seq": seq,
        "first_record_id": first_record_id,
        "last_record_id": last_record_id,
        "size": size,
        "root": root,
        "prev_root": prev_root,
        "made_at": time_text(made_at),
    }
