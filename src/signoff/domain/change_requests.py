"""A change request: the feedback a reviewer sends back with a decision that asks the
producer for changes (``DecisionRule.asks_for_changes``).

It is the decision's notes and, optionally, the subject's fields that should change, each
named by a JSON Pointer (RFC 6901) with its reason. It is kept on the task as
``change_request`` (with the revision it was about, who asked and when) until the task is
decided again, so the next revision is reviewed with the diff and the feedback side by
side. Every door reads the fields through :func:`checked_fields`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from jsonpointer import JsonPointer, JsonPointerException

from signoff.domain.clock import rfc3339
from signoff.domain.decisions import rule_for
from signoff.domain.json_input import text_problem
from signoff.domain.states import Decision
from signoff.errors import FieldError, validation_error

#: At most this many fields in one change request.
MAX_FIELDS = 50
#: The longest reason for one field, in characters.
REASON_MAX_LENGTH = 1_000
#: The longest pointer, in characters.
POINTER_MAX_LENGTH = 500


def checked_fields(decision: Decision, raw: object) -> list[dict[str, str]]:
    """The fields named by a decision, as recorded: ``[{"path", "reason"}]`` in the order
    given, each path once.

    Raises:
        Unprocessable: ``ERR_VALIDATION`` naming the field (``fields``, ``fields[2].path``…):
            fields on a decision that does not ask for changes, not a list, too many, a
            path that is not a JSON Pointer or is named twice, a reason missing or too long.
    """
    if raw is None or raw == []:
        return []
    rule = rule_for(decision)
    if not rule.asks_for_changes:
        raise _error("fields", f"are only for a decision that asks for changes, not to {rule.verb}")
    if not isinstance(raw, list):
        raise _error("fields", "must be a list of {path, reason}")
    if len(raw) > MAX_FIELDS:
        raise _error("fields", f"must name at most {MAX_FIELDS} fields")
    problems: list[FieldError] = []
    seen: set[str] = set()
    result: list[dict[str, str]] = []
    for index, item in enumerate(raw):
        where = f"fields[{index}]"
        if not isinstance(item, dict) or set(item) - {"path", "reason"}:
            problems.append(FieldError(where, "must be an object with path and reason"))
            continue
        path, reason = item.get("path"), item.get("reason")
        if not isinstance(path, str) or not _is_pointer(path):
            problems.append(FieldError(f"{where}.path", "must be a JSON Pointer such as /title"))
        elif path in seen:
            problems.append(FieldError(f"{where}.path", "is named twice"))
        text = reason.strip() if isinstance(reason, str) else ""
        problem = text_problem(reason, limit=REASON_MAX_LENGTH) if isinstance(reason, str) else None
        if problem is not None:
            problems.append(FieldError(f"{where}.reason", problem))
        elif not text:
            problems.append(FieldError(f"{where}.reason", "is required: say why it should change"))
        if isinstance(path, str):
            seen.add(path)
        if not problems:
            result.append({"path": str(path), "reason": text})
    if problems:
        raise validation_error(problems, "The fields named for change are not valid.")
    return result


def change_request(
    decision: Decision,
    *,
    notes: str | None,
    fields: list[dict[str, str]],
    revision: int | None,
    by: str,
    at: datetime,
) -> dict[str, Any] | None:
    """What a decision leaves on the task as its ``change_request``: ``None`` for a
    decision that does not ask for changes (it clears an earlier one)."""
    if not rule_for(decision).asks_for_changes:
        return None
    return {"notes": notes, "fields": fields, "revision": revision, "by": by, "at": rfc3339(at)}


def _is_pointer(path: str) -> bool:
    if len(path) > POINTER_MAX_LENGTH or not path.startswith("/"):
        return False
    try:
        JsonPointer(path)
    except JsonPointerException:
        return False
    return True


def _error(field: str, problem: str) -> Exception:
    return validation_error([FieldError(field, problem)], f"The {field} {problem}.")
