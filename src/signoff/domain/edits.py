"""Edit, then approve: what a reviewer's edit of the subject may change.

A producer declares at escalation which parts of the subject a reviewer may edit
(``editable``: JSON Pointers, RFC 6901). An edit may change those paths and anything inside
them, nothing else; each value it changes keeps its kind (text stays text, a number a
number), and the edited subject must still be a subject (its actions' ids unique).
The edit becomes a new revision authored by the reviewer, and the approval is bound to it
(:data:`signoff.domain.decisions.DECISION_RULES`, ``edits_subject``).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

from jsonpointer import JsonPointer, JsonPointerException

from signoff.domain.revisions import changed_paths, parse_subject_fields
from signoff.errors import ErrorCode, FieldError, Unprocessable, validation_error


def within(path: str, editable: Sequence[str]) -> bool:
    """Whether a changed ``path`` is an editable path or inside one."""
    return any(path == p or path.startswith(p + "/") for p in editable)


def checked_edit(
    previous: dict[str, Any], edited: object, editable: Sequence[str] | None
) -> list[str]:
    """The paths an edit changes, after checking it against what the producer allowed.

    Raises:
        Unprocessable: ``ERR_VALIDATION`` naming ``subject`` when the edit is not a subject
            or changes nothing; ``ERR_NOT_EDITABLE`` naming each changed path the producer
            did not declare editable (or ``subject`` when it declared nothing).
    """
    if not isinstance(edited, dict):
        raise validation_error([FieldError("subject", "must be the edited subject (an object)")])
    parse_subject_fields({"subject": edited}, allow_policy=False)
    if not editable:
        raise nothing_editable()
    paths = changed_paths(previous, edited)
    if not paths:
        raise validation_error(
            [FieldError("subject", "the edit changes nothing: approve the revision instead")]
        )
    outside = [p for p in paths if not within(p, editable)]
    if outside:
        raise Unprocessable(
            f"the edit changes {', '.join(outside)}, which the producer did not declare "
            f"editable ({', '.join(editable)})",
            error_code=ErrorCode.NOT_EDITABLE,
            errors=[FieldError(f"subject{p}", "is not editable") for p in outside],
        )
    retyped = [p for p in paths if _kind(_at(previous, p)) not in (None, _kind(_at(edited, p)))]
    if retyped:
        raise validation_error(
            [FieldError(f"subject{p}", f"must stay {_kind(_at(previous, p))}") for p in retyped]
        )
    return paths


def nothing_editable() -> Unprocessable:
    """``ERR_NOT_EDITABLE``: the producer declared nothing editable on the task."""
    return Unprocessable(
        "this task declares nothing editable: approve it, or ask for changes",
        error_code=ErrorCode.NOT_EDITABLE,
        errors=[FieldError("subject", "nothing is editable on this task")],
    )


def _at(document: Any, pointer: str) -> Any:
    try:
        return JsonPointer(pointer).resolve(document)
    except JsonPointerException:
        return _MISSING


_MISSING = object()


def _kind(value: Any) -> str | None:
    """A JSON value's kind as an edit must keep it (``None``: absent, anything goes)."""
    if value is _MISSING:
        return None
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "null"


# --- the edit as the forms carry it ------------------------------------------------------

#: The form fields' names: this prefix and the JSON Pointer.
PREFIX = "edit:"


def edit_fields(editable: Sequence[str] | None, subject: Any) -> list[dict[str, Any]]:
    """Each editable path with its current value as text (text as it is, any other value
    as JSON) and the kind an edit must keep (``None``: the path is absent, anything
    goes), for a form's inputs (the console's, the resume page's, Slack's modal)."""
    if subject is None or not editable:
        return []
    fields = []
    for pointer in editable:
        try:
            value = JsonPointer(pointer).resolve(subject)
        except JsonPointerException:
            value = None
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        fields.append(
            {
                "pointer": pointer,
                "name": PREFIX + pointer,
                "id": "edit-" + "-".join(p for p in pointer.split("/") if p),
                "value": text,
                "multiline": isinstance(value, str) and (len(value) > 80 or "\n" in value),
                "kind": _kind(_at(subject, pointer)),
            }
        )
    return fields


def edited_subject(subject: dict[str, Any], form: Mapping[str, Any]) -> dict[str, Any]:
    """``subject`` with each ``edit:<pointer>`` field of the form set at its pointer: text
    where the value was text, else the field read as JSON (kept as text when it is not)."""
    edited = copy.deepcopy(subject)
    for name, raw in form.items():
        if not str(name).startswith(PREFIX):
            continue
        pointer, text = str(name)[len(PREFIX) :], str(raw)
        try:
            target = JsonPointer(pointer)
            old = target.resolve(edited, None)
            value: Any = text
            if not isinstance(old, str):
                try:
                    value = json.loads(text)
                except ValueError:
                    value = text
            target.set(edited, value)
        except JsonPointerException:
            continue  # a pointer into nothing: the edit's check names what changed
    return edited
