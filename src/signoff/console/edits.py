"""The console's edit form: the fields a producer declared ``editable``, shown with their
current values, and the edited subject rebuilt from the form. Reading the form is all this
does; what an edit may change is checked by the decision's rules
(:mod:`signoff.domain.edits`)."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from jsonpointer import JsonPointer, JsonPointerException

from signoff.domain.tasks import Task

#: The form fields' names: this prefix and the JSON Pointer.
PREFIX = "edit:"


def edit_fields(task: Task, subject: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Each editable path with its current value as text (text as it is, any other value
    as JSON), for the form's inputs."""
    if subject is None or not task.editable:
        return []
    fields = []
    for pointer in task.editable:
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
