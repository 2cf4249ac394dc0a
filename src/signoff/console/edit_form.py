"""Edit, then approve, in the console: one form of the editable fields (``_edits.html``) in
the decide form of a task one person decides and in the vote form of a task decided by
votes. What it sends is read back here into the edited subject, over the revision the
page showed, and handed to the core with the decision; a refused edit comes back with
each field's problem beside it and what the person typed kept."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from signoff.console.shared import Form
from signoff.domain.edits import PREFIX, edit_fields, edited_subject, within
from signoff.domain.tasks import Principal, Task
from signoff.errors import SignoffError
from signoff.services import revisions as approval_service
from signoff.services.context import ServiceContext


async def edited(
    context: ServiceContext, principal: Principal, task_id: str, revision: int, form: Form
) -> dict[str, Any]:
    """The subject of revision ``revision`` with the form's ``edit:<pointer>`` fields set
    (the decision's rules then check the edit).

    Raises:
        SignoffError: the revision cannot be read (``ERR_TASK_NOT_FOUND``…).
    """
    shown = await approval_service.get_revision(
        context, principal, task_id, revision, as_viewed=False
    )
    return edited_subject(shown["subject"], {k: v[0] for k, v in form.fields.items() if v})


def keep_refused(request: Request, form: Form, error: SignoffError) -> None:
    """An edit the rules refused at its fields (a value of another kind, a path not
    editable): the page drawn next shows each problem at its field, with what was typed.
    Any other refusal keeps nothing (the next revision's fields start afresh)."""
    problems = {
        e.field.removeprefix("subject"): e.message
        for e in error.errors
        if e.field.startswith("subject/")
    }
    if not problems:
        return
    request.state.edit_problems = problems
    request.state.edit_kept = {
        name.removeprefix(PREFIX): values[0]
        for name, values in form.fields.items()
        if name.startswith(PREFIX) and values
    }


def form_fields(request: Request, task: Task, subject: Any) -> list[dict[str, Any]]:
    """The edit form's fields (:func:`signoff.domain.edits.edit_fields`), each with what
    was typed and its ``problem`` when the last edit was refused."""
    kept: dict[str, str] = getattr(request.state, "edit_kept", {})
    problems: dict[str, str] = getattr(request.state, "edit_problems", {})
    fields = edit_fields(task.editable, subject)
    for field in fields:
        pointer = field["pointer"]
        if pointer in kept:
            field["value"] = kept[pointer]
        said = [message for path, message in problems.items() if within(path, [pointer])]
        field["problem"] = _problem_text(said[0], field["kind"]) if said else None
    return fields


def _problem_text(message: str, kind: str | None) -> str:
    """ "Must stay a number: type a number (as JSON), then send the edit again.": what is
    wrong with the field and what to do; nothing was recorded."""
    sentence = message[:1].upper() + message[1:]
    advice = f"type {kind} (as JSON)" if kind not in (None, "text") else "correct it"
    return f"{sentence}: {advice}, then send the edit again. Nothing was recorded."
