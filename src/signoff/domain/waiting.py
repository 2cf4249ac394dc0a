"""The waiting fields of an escalation: deadline, policy, group, time limit, AI summary."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import TYPE_CHECKING, Any

from signoff.domain.json_input import join_path
from signoff.domain.policies import Timeout, TimeoutOutcome
from signoff.errors import ErrorCode, FieldError, Unprocessable, validation_error

if TYPE_CHECKING:
    from jsonschema import Draft7Validator

WAITING_FIELDS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "deadline": {"type": "string", "format": "date-time"},
        "review_deadline": {"type": "string", "format": "date-time"},
        "policy": {"type": "string", "minLength": 1, "maxLength": 100},
        "assigned_group": {"type": "string", "minLength": 1, "maxLength": 100},
        "timeout": {
            "type": "object",
            "description": (
                "The producer's time limit: when nobody decided within after_seconds, the "
                "task is rejected (the default: a task.resolved event with decision "
                "REJECTED), expires "
                "(task.expired), or is escalated to group (reassigned there, its reviewers "
                "notified; the policy's final level follows). Replaces the policy's levels; "
                "not with deadline. approve is refused: only a person approves."
            ),
            "required": ["after_seconds"],
            "properties": {
                "after_seconds": {"type": "integer", "minimum": 1, "maximum": 31536000},
                "outcome": {"enum": [o.value for o in TimeoutOutcome]},
                "group": {"type": "string", "minLength": 1, "maxLength": 100},
            },
            "additionalProperties": False,
        },
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
    from jsonschema import Draft7Validator, FormatChecker  # at the first check, not at start

    return Draft7Validator(WAITING_FIELDS_SCHEMA, format_checker=FormatChecker())


@dataclass(frozen=True)
class WaitingInput:
    deadline: datetime | None
    policy_name: str | None
    assigned_group: str | None
    summary: dict[str, Any] | None
    timeout: Timeout | None = None


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
    if "timeout" in body and ("deadline" in body or "review_deadline" in body):
        errors.append(FieldError("timeout", "give a deadline or a timeout, not both"))
    if errors:
        raise validation_error(errors)
    timeout = _parse_timeout(body["timeout"]) if "timeout" in body else None
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
        timeout=timeout,
    )


def _parse_timeout(raw: dict[str, Any]) -> Timeout:
    """The schema checked the shape; here what it cannot say.

    Raises:
        Unprocessable: ``ERR_TIMEOUT_APPROVAL_NOT_ALLOWED`` (outcome ``approve``);
            ``ERR_VALIDATION`` when ``group`` is missing to escalate or given otherwise.
    """
    outcome = TimeoutOutcome(raw.get("outcome", TimeoutOutcome.REJECT.value))
    if outcome is TimeoutOutcome.APPROVE:
        raise Unprocessable(
            "a time limit cannot approve: only a person approves; choose reject, expire "
            "or escalate",
            error_code=ErrorCode.TIMEOUT_APPROVAL_NOT_ALLOWED,
            errors=[FieldError("timeout.outcome", "approve is not allowed")],
        )
    group = raw.get("group")
    if outcome is TimeoutOutcome.ESCALATE and group is None:
        raise validation_error([FieldError("timeout.group", "is required to escalate")])
    if outcome is not TimeoutOutcome.ESCALATE and group is not None:
        raise validation_error([FieldError("timeout.group", "is only for escalate")])
    return Timeout(after_seconds=raw["after_seconds"], outcome=outcome, group=group)
