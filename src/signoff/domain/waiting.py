"""The waiting fields of an escalation: deadline, policy, group, AI summary."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any

from jsonschema import Draft7Validator, FormatChecker

from signoff.domain.json_input import join_path
from signoff.errors import FieldError, validation_error

WAITING_FIELDS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "deadline": {"type": "string", "format": "date-time"},
        "review_deadline": {"type": "string", "format": "date-time"},
        "policy": {"type": "string", "minLength": 1, "maxLength": 100},
        "assigned_group": {"type": "string", "minLength": 1, "maxLength": 100},
        "summary": {
            "type": "object",
            "description": "An AI-prepared decision summary. It only recommends; a person decides.",
            "required": ["recommendation", "rationale"],
            "properties": {
                "recommendation": {"enum": ["APPROVE", "REJECT"]},
                "rationale": {"type": "string", "maxLength": 10000},
                "risks": {"type": "array", "items": {"type": "string", "maxLength": 2000}},
                "evidence_links": {
                    "type": "array",
                    "items": {"type": "string", "maxLength": 2000, "pattern": "^https?://[^\\s]+$"},
                },
                "generated_by": {"type": "string", "maxLength": 255},
            },
            "additionalProperties": False,
        },
    },
}


EARLIEST_DEADLINE = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_DEADLINE = datetime(9000, 1, 1, tzinfo=UTC)


@cache
def _validator() -> Draft7Validator:
    return Draft7Validator(WAITING_FIELDS_SCHEMA, format_checker=FormatChecker())


@dataclass(frozen=True)
class WaitingInput:
    deadline: datetime | None
    policy_name: str | None
    assigned_group: str | None
    summary: dict[str, Any] | None


def _parse_rfc3339(raw: str, field: str) -> datetime:
    """RFC 3339 allows ``t`` and ``z`` in lower case (section 5.6, note); Python's parser
    wants them upper case."""
    try:
        moment = datetime.fromisoformat(raw.upper().replace("Z", "+00:00"))
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise validation_error([FieldError(field, "is not an RFC 3339 date-time with an offset")])
    return moment


#: A body with none of the waiting fields: the defaults.
NO_WAITING_FIELDS = WaitingInput(deadline=None, policy_name=None, assigned_group=None, summary=None)


def parse_waiting_fields(body: dict[str, Any]) -> WaitingInput:
    """Read the optional waiting fields; ``deadline`` and its older name ``review_deadline``
    are synonyms (RFC 3339 with an offset).

    Raises:
        Unprocessable: ``ERR_VALIDATION`` with the offending paths.
    """
    if type(body) is dict and body.keys().isdisjoint(WAITING_FIELDS_SCHEMA["properties"]):
        return NO_WAITING_FIELDS  # nothing the schema could refuse (most bodies)
    errors = []
    for error in _validator().iter_errors(body):
        path = ""
        for part in error.absolute_path:
            path = join_path(path, part)
        errors.append(FieldError(path or "(root)", error.message))
    if "deadline" in body and "review_deadline" in body:
        errors.append(FieldError("review_deadline", "give deadline or review_deadline, not both"))
    if errors:
        raise validation_error(errors)
    raw = body.get("deadline", body.get("review_deadline"))
    field = "deadline" if "deadline" in body else "review_deadline"
    deadline = _parse_rfc3339(raw, field) if raw else None
    if deadline is not None and not EARLIEST_DEADLINE <= deadline <= LATEST_DEADLINE:
        raise validation_error([FieldError(field, "must be between the years 1970 and 9000")])
    return WaitingInput(
        deadline=deadline,
        policy_name=body.get("policy"),
        assigned_group=body.get("assigned_group"),
        summary=body.get("summary"),
    )
