"""The escalation contract: what a producer must send to hand work to a human.

Checks run in this order, and the first that fails decides the answer:

1. context proof: ``diagnostic_bundle.attempted_actions`` present
   and non-empty, ``diagnostic_bundle.evaluator_verdict`` present →
   422 ``ERR_INSUFFICIENT_CONTEXT_PROOF`` with ``missing_fields``;
2. the contract's JSON Schema (``contract/escalation-request.schema.json``, draft-07, formats
   ``uuid`` and ``date-time`` enforced) → 422 ``ERR_VALIDATION`` listing every field;
3. Signoff's own rules, documented in ``docs/api.md``: fields the server owns
   (``status``, ``version``, lease fields…) → 422 ``ERR_READ_ONLY_FIELD``; the indexed
   text fields (``entity_type``, ``entity_id``, ``reason_code``, ``idempotency_key``)
   non-empty, at most 255 characters → 422 ``ERR_VALIDATION`` (U+0000 never gets this
   far: :mod:`signoff.domain.text_guard` refuses it at the request boundary);
4. the precheck hash → 422 ``ERR_PRECHECK_HASH_MISMATCH``.
"""

from __future__ import annotations

import json
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from signoff.domain.digests import json_digest, precheck_hash_matches
from signoff.domain.json_input import join_path
from signoff.errors import ErrorCode, FieldError, Unprocessable, validation_error

if TYPE_CHECKING:
    import jsonschema_rs
    from jsonschema import Draft7Validator
    from jsonschema.exceptions import ValidationError

# jsonschema and jsonschema-rs are imported by the validators, built at the first check:
# a server starts without them.

#: Fields the server sets; a request that tries to set them is refused, never applied.
READ_ONLY_FIELDS: tuple[str, ...] = (
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

#: Text fields stored in indexed columns of their own, with their shortest length
#: (the schema's ``minLength`` for the idempotency key). Longer values would not fit a
#: B-tree index entry, and PostgreSQL text cannot hold U+0000.
LIMITED_TEXT_FIELDS: dict[str, int] = {
    "entity_type": 1,
    "entity_id": 1,
    "reason_code": 1,
    "idempotency_key": 16,
}
MAX_TEXT_LENGTH = 255


@dataclass(frozen=True)
class EscalationRequest:
    """A validated escalation. ``fingerprint`` is SHA-256 of the RFC 8785 form of the
    whole body, used to tell a replay from a reused idempotency key."""

    escalation_id: uuid.UUID
    idempotency_key: str
    entity_type: str
    entity_id: str
    reason_code: str
    precheck_hash: str
    diagnostic_bundle: dict[str, Any]
    fingerprint: str


@cache
def contract_schema() -> dict[str, Any]:
    """The escalation contract's JSON Schema, shipped inside the package."""
    text = (
        resources.files("signoff.domain")
        .joinpath("contract/escalation-request.schema.json")
        .read_text("utf-8")
    )
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def _validator() -> Draft7Validator:
    from jsonschema import Draft7Validator, FormatChecker

    return Draft7Validator(contract_schema(), format_checker=FormatChecker())


def _dotted(parts: Iterable[str | int]) -> str:
    path = ""
    for part in parts:
        path = join_path(path, part)
    return path


@cache
def _fast_validator() -> jsonschema_rs.Draft7Validator:
    """The same schema, compiled (``jsonschema-rs``), with every format checked by the
    very functions :func:`_validator` uses. It only answers "valid or not": a valid body
    (the common case) costs microseconds; any other is described by :func:`_validator`,
    so errors, paths and messages stay those of ``jsonschema``. A test holds the two to
    the same verdict on generated and mutated bodies."""
    import jsonschema_rs
    from jsonschema import FormatChecker

    checker = FormatChecker()

    def conforms(name: str) -> Any:
        return lambda instance: checker.conforms(instance, name)

    return jsonschema_rs.Draft7Validator(
        contract_schema(),
        formats={name: conforms(name) for name in checker.checkers},
        validate_formats=True,
    )


def _schema_errors(body: Any) -> list[FieldError]:
    if _fast_validator().is_valid(body):
        return []
    found: list[FieldError] = []
    for error in _validator().iter_errors(body):
        found.extend(_describe(error))
    return sorted(set(found), key=lambda e: (e.field, e.message))


def _describe(error: ValidationError) -> list[FieldError]:
    parent = _dotted(deque(error.absolute_path))
    if error.validator == "required" and isinstance(error.instance, dict):
        required = error.validator_value if isinstance(error.validator_value, list) else []
        return [
            FieldError(join_path(parent, name), "is required")
            for name in required
            if name not in error.instance
        ]
    message = error.message
    if error.validator == "format":
        message = f"is not a valid {error.validator_value}"
    elif error.validator == "type":
        message = f"must be of type {error.validator_value}"
    return [FieldError(parent or "(root)", message)]


def _missing_context_proof(body: dict[str, Any]) -> list[str]:
    bundle = body.get("diagnostic_bundle")
    if bundle is None:
        return ["diagnostic_bundle.attempted_actions", "diagnostic_bundle.evaluator_verdict"]
    if not isinstance(bundle, dict):
        return []  # a wrongly typed bundle is a schema error, reported with its path
    missing = []
    if bundle.get("attempted_actions") in (None, []):
        missing.append("diagnostic_bundle.attempted_actions")
    if bundle.get("evaluator_verdict") is None:
        missing.append("diagnostic_bundle.evaluator_verdict")
    return missing


def _business_rule_errors(body: dict[str, Any]) -> list[FieldError]:
    errors = []
    for name, shortest in LIMITED_TEXT_FIELDS.items():
        value = body[name]
        if not shortest <= len(value) <= MAX_TEXT_LENGTH:
            errors.append(FieldError(name, f"must be {shortest} to {MAX_TEXT_LENGTH} characters"))
    return errors


def parse_escalation(body: Any) -> EscalationRequest:
    """Validate a parsed escalation body (see the module docstring for the order).

    Raises:
        Unprocessable: ``ERR_INSUFFICIENT_CONTEXT_PROOF``, ``ERR_VALIDATION``,
            ``ERR_READ_ONLY_FIELD`` or ``ERR_PRECHECK_HASH_MISMATCH``.
    """
    if isinstance(body, dict):
        missing = _missing_context_proof(body)
        if missing:
            raise Unprocessable(
                "escalation refused: the diagnostic bundle must include the attempted "
                "actions and the evaluator's verdict",
                error_code=ErrorCode.INSUFFICIENT_CONTEXT_PROOF,
                errors=[FieldError(f, "is required and must not be empty") for f in missing],
                extra={"missing_fields": missing},
            )
    schema_errors = _schema_errors(body)
    if schema_errors:
        raise validation_error(schema_errors)
    assert isinstance(body, dict)  # the schema's root type is object
    read_only = [name for name in READ_ONLY_FIELDS if name in body]
    if read_only:
        raise Unprocessable(
            "these fields are set by the server and may not be sent: " + ", ".join(read_only),
            error_code=ErrorCode.READ_ONLY_FIELD,
            errors=[FieldError(name, "is set by the server") for name in read_only],
        )
    rule_errors = _business_rule_errors(body)
    if rule_errors:
        raise validation_error(rule_errors)
    bundle = body["diagnostic_bundle"]
    if not precheck_hash_matches(bundle["attempted_actions"], body["precheck_hash"]):
        raise Unprocessable(
            "precheck_hash is not the SHA-256 of the RFC 8785 canonical JSON of "
            "diagnostic_bundle.attempted_actions",
            error_code=ErrorCode.PRECHECK_HASH_MISMATCH,
            errors=[
                FieldError("precheck_hash", "does not match diagnostic_bundle.attempted_actions")
            ],
        )
    return EscalationRequest(
        escalation_id=uuid.UUID(body["escalation_id"]),
        idempotency_key=body["idempotency_key"],
        entity_type=body["entity_type"],
        entity_id=body["entity_id"],
        reason_code=body["reason_code"],
        precheck_hash=body["precheck_hash"],
        diagnostic_bundle=bundle,
        fingerprint=json_digest(body),
    )
