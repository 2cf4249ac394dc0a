"""The escalation rules of ``docs/api.md`` ("Escalation rules, in the order they
are checked"), restated as a model of what the service must answer, for one producer.

The model is written from the documentation, not from the service's code: it predicts the
status, ``error_code`` and offending field paths of ``POST /tasks/escalate`` for any JSON
value, and remembers what was accepted (idempotency keys, escalation ids, active
entities) so that later predictions account for deduplication. Nothing ever gets claimed
or resolved while a model is in use, so every accepted task stays active.
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rfc8785
from jsonschema import Draft7Validator, FormatChecker

SCHEMA_PATH = (
    Path(__file__).resolve().parents[2]
    / "src"
    / "signoff"
    / "domain"
    / "contract"
    / "escalation-request.schema.json"
)
SCHEMA: dict[str, Any] = json.loads(SCHEMA_PATH.read_text())

#: docs/api.md rule 4.
READ_ONLY = (
    "id",
    "task_id",
    "status",
    "version",
    "producer_id",
    "claimed_by",
    "lease_token",
    "lease_expires_at",
    "decision",
    "notes",
    "resolution_payload",
    "operator_id",
    "created_at",
    "updated_at",
    "resolved_at",
)
#: Signoff's optional escalation fields (docs/approvals.md, docs/waiting.md), each with
#: rules of its own that their own tests cover; the generated contract bodies leave them out.
EXTENSION_FIELDS = (
    "headline",
    "subject",
    "source_revisions",
    "material_paths",
    "approval_ttl_seconds",
    "deadline",
    "review_deadline",
    "policy",
    "assigned_group",
    "summary",
    "metadata",
)
#: docs/api.md rule 5: indexed text fields and their shortest length (longest: 255).
INDEXED_TEXT = {"entity_type": 1, "entity_id": 1, "reason_code": 1, "idempotency_key": 16}
MAX_SAFE_INTEGER = 2**53 - 1
#: docs/api.md rule 9.
MAX_DEPTH = 64


def path_join(parent: str, key: str | int) -> str:
    """The documented path notation: ``a.b[0].c``."""
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else key


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def jcs_hash(value: Any) -> str:
    """SHA-256 (hex) of the RFC 8785 canonical JSON of ``value``."""
    return sha256_hex(rfc8785.dumps(value))


def compact_in_sent_order(value: Any) -> bytes:
    """JavaScript's ``JSON.stringify(value)``: no whitespace, keys in insertion order,
    numbers and strings as ECMAScript (= RFC 8785) writes them."""
    if isinstance(value, dict):
        return (
            b"{"
            + b",".join(
                rfc8785.dumps(k) + b":" + compact_in_sent_order(v) for k, v in value.items()
            )
            + b"}"
        )
    if isinstance(value, list):
        return b"[" + b",".join(compact_in_sent_order(v) for v in value) + b"]"
    return bytes(rfc8785.dumps(value))


def unrepresentable(value: Any, path: str = "", depth: int = 0) -> Iterator[str]:
    """Paths of values refused before anything else (docs/api.md rules 1 and 9):
    non-finite numbers, integers beyond ±(2^53−1), lone surrogates in strings (at the
    string) or in keys (at the object holding them), and values nested deeper than
    ``MAX_DEPTH`` levels (at the first one too deep; the root is level 0)."""
    where = path or "(root)"
    if depth > MAX_DEPTH:
        yield where
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            yield where
    elif isinstance(value, float):
        if not math.isfinite(value):
            yield where
    elif isinstance(value, str):
        if any("\ud800" <= c <= "\udfff" for c in value):
            yield where
    elif isinstance(value, dict):
        for key, item in value.items():
            if any("\ud800" <= c <= "\udfff" for c in key):
                yield where
            yield from unrepresentable(item, path_join(path, key), depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from unrepresentable(item, path_join(path, index), depth + 1)


_validator = Draft7Validator(SCHEMA, format_checker=FormatChecker())


def schema_valid(body: Any) -> bool:
    return _validator.is_valid(body)


@dataclass(frozen=True)
class Expected:
    """A predicted answer. ``fields`` is the exact set of ``errors[].field`` values, or
    ``None`` when the model does not predict them; ``missing`` is ``missing_fields``;
    ``task_id`` the task a 409/422 must name; ``replay`` the exact bytes of a replayed
    201."""

    status: int
    error_code: str | None = None
    fields: frozenset[str] | None = None
    missing: tuple[str, ...] | None = None
    task_id: str | None = None
    replay: bytes | None = None

    @property
    def rule(self) -> str:
        if self.status == 201:
            return "replayed" if self.replay is not None else "created"
        return str(self.error_code)


#: Top-level fields stored whole as JSON documents: the text guard leaves them alone.
DOCUMENTS = {"diagnostic_bundle", "subject", "resolution_payload", "result", "summary", "metadata"}


def unstorable_text(body: Any) -> Iterator[str]:
    """The request boundary's text guard (docs/api.md): outside documents, no string or
    key holds U+0000 or runs over 500 characters (``notes`` 10,000,
    ``url`` 2,048, ``description`` 1,000)."""
    if not isinstance(body, dict):
        return
    bounds = {"notes": 10_000, "url": 2048, "description": 1000}

    def walk(value: Any, path: str, limit: int) -> Iterator[str]:
        # A top-level field named "" has the empty path: reported as "(root)".
        if isinstance(value, str):
            if "\x00" in value or len(value) > limit:
                yield path or "(root)"
        elif isinstance(value, dict):
            for key, item in value.items():
                if "\x00" in key or len(key) > 500:
                    yield path or "(root)"
                else:  # a key under the empty path is the path itself, as the guard joins
                    yield from walk(item, f"{path}.{key}" if path else key, limit)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                yield from walk(item, f"{path}[{index}]", limit)

    for key, value in body.items():
        if "\x00" in key or len(key) > 500:
            yield "(root)"
        elif key not in DOCUMENTS:
            yield from walk(value, key, bounds.get(key, 500))


@dataclass
class EscalationModel:
    """What one producer has successfully escalated so far (the service's TTL never
    passes during a test: the test server's clock is frozen)."""

    keys: dict[str, tuple[str, bytes, str]] = field(default_factory=dict)
    """idempotency key → (body fingerprint, first response bytes, task id)"""
    ids: set[uuid.UUID] = field(default_factory=set)
    active: dict[tuple[str, str], str] = field(default_factory=dict)
    accepted: list[dict[str, Any]] = field(default_factory=list)

    def expect(self, body: Any) -> Expected:
        """The answer the documented rules give for ``body``, in their documented order."""
        bad = sorted(set(unrepresentable(body)))
        if bad:
            return Expected(422, "ERR_VALIDATION", frozenset(bad))
        unstorable = sorted(set(unstorable_text(body)))
        if unstorable:
            return Expected(422, "ERR_VALIDATION", frozenset(unstorable))
        if isinstance(body, dict):
            missing = self._missing_context_proof(body)
            if missing:
                return Expected(
                    422, "ERR_INSUFFICIENT_CONTEXT_PROOF", frozenset(missing), tuple(missing)
                )
        if not schema_valid(body):
            return Expected(422, "ERR_VALIDATION")
        assert isinstance(body, dict)
        read_only = [name for name in READ_ONLY if name in body]
        if read_only:
            return Expected(422, "ERR_READ_ONLY_FIELD", frozenset(read_only))
        too_long_or_nul = [
            name
            for name, shortest in INDEXED_TEXT.items()
            if not shortest <= len(body[name]) <= 255
        ]
        if too_long_or_nul:
            return Expected(422, "ERR_VALIDATION", frozenset(too_long_or_nul))
        actions = body["diagnostic_bundle"]["attempted_actions"]
        accepted_hashes = (jcs_hash(actions), sha256_hex(compact_in_sent_order(actions)))
        if body["precheck_hash"] not in accepted_hashes:
            return Expected(422, "ERR_PRECHECK_HASH_MISMATCH", frozenset({"precheck_hash"}))
        known = set(SCHEMA["properties"]) | set(EXTENSION_FIELDS) | set(READ_ONLY)
        unknown = [name for name in body if name not in known]
        if unknown:
            return Expected(422, "ERR_VALIDATION", frozenset(unknown))
        key = body["idempotency_key"]
        if key in self.keys:
            fingerprint, first, task_id = self.keys[key]
            if fingerprint == jcs_hash(body):
                return Expected(201, replay=first, task_id=task_id)
            return Expected(
                422, "ERR_IDEMPOTENCY_KEY_REUSED", frozenset({"idempotency_key"}), task_id=task_id
            )
        escalation_id = uuid.UUID(body["escalation_id"])
        if escalation_id in self.ids:
            return Expected(409, "ERR_TASK_CONFLICT", task_id=str(escalation_id))
        entity = (body["entity_type"], body["entity_id"])
        if entity in self.active:
            return Expected(409, "ERR_TASK_CONFLICT", task_id=self.active[entity])
        return Expected(201, task_id=str(escalation_id))

    @staticmethod
    def _missing_context_proof(body: dict[str, Any]) -> list[str]:
        bundle = body.get("diagnostic_bundle")
        if bundle is None:
            return ["diagnostic_bundle.attempted_actions", "diagnostic_bundle.evaluator_verdict"]
        if not isinstance(bundle, dict):
            return []
        missing = []
        if bundle.get("attempted_actions") is None or bundle.get("attempted_actions") == []:
            missing.append("diagnostic_bundle.attempted_actions")
        if bundle.get("evaluator_verdict") is None:
            missing.append("diagnostic_bundle.evaluator_verdict")
        return missing

    def record_created(self, body: dict[str, Any], response: bytes) -> None:
        """Remember an escalation the service created (201, not a replay)."""
        task_id = str(uuid.UUID(body["escalation_id"]))
        self.keys[body["idempotency_key"]] = (jcs_hash(body), response, task_id)
        self.ids.add(uuid.UUID(body["escalation_id"]))
        self.active[(body["entity_type"], body["entity_id"])] = task_id
        self.accepted.append(body)
