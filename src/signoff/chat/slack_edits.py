"""Edit, then approve, in Slack: the card's "Edit and approve" button opens a modal with
one input per field the producer declared ``editable`` (prefilled, each with its kind);
submitting it decides ``APPROVED_WITH_EDITS`` through :func:`signoff.services.chat.decide`
— the edit's rules and the decision's are the core's, as at every other door.

The click is refused before any modal opens when the card is stale or the person may not
edit it (said privately, the card drawn again). A refusal of what was typed (a value of
the wrong kind, a field that is not editable, an edit that changes nothing, notes) keeps
the modal open with the message under its field; any other refusal closes it and is said
privately, the card drawn again.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

import structlog
from slack_sdk.errors import SlackApiError

from signoff.domain.chat_cards import edit_modal
from signoff.domain.edits import PREFIX, within
from signoff.domain.states import Decision
from signoff.errors import SignoffError
from signoff.services import chat
from signoff.services.context import ServiceContext

log = structlog.get_logger("signoff.slack")

#: Where a refusal that names no input of the modal is shown.
NOTES = "notes"


class EditDoor(Protocol):
    """What of the Slack door the edit modal uses."""

    door: str
    ctx: ServiceContext

    async def _call(self, method: str, **params: Any) -> Any: ...

    async def email_of(self, user: str) -> str | None: ...

    async def _refused(
        self, user: str, channel: str, ts: str, bound: chat.Bound, error: SignoffError
    ) -> None: ...

    async def _done(self, user: str, channel: str, ts: str, done: chat.Decided) -> None: ...

    async def _tell_quietly(self, channel: str, user: str, text: str) -> None: ...


async def open_edit(
    door: EditDoor,
    user: str,
    where: tuple[str, str],
    bound: chat.Bound,
    value: str,
    trigger_id: str,
) -> None:
    """The click on "Edit and approve": the modal, for the revision the card showed."""
    channel, ts = where
    try:
        person = await chat.person_for(door.ctx, await door.email_of(user))
        fields = await chat.edit_form(door.ctx, person, bound)
    except SignoffError as error:
        await door._refused(user, channel, ts, bound, error)
        return
    modal = edit_modal(fields, value, f"{channel} {ts}", int(bound.revision or 0))
    if modal is None:
        url = f"{door.ctx.settings.public_base_url.rstrip('/')}/console/tasks/{bound.task_id}"
        text = (
            "Nothing was decided: this task's editable fields do not fit in a Slack form. "
            f"Edit them on the task page: {url}"
        )
        await door._tell_quietly(channel, user, text)
        return
    try:
        await door._call("views.open", trigger_id=trigger_id, view=modal)
    except (SlackApiError, OSError) as error:  # e.g. the click's trigger expired
        log.warning("slack.edit_form_not_opened", error=str(error)[:200])
        await door._tell_quietly(
            channel, user, "Nothing was decided: Slack did not open the form. Click again."
        )


async def submitted(door: EditDoor, ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
    """The edit modal sent: decided, or the modal's field errors, or a private refusal."""
    try:
        user = str(body["user"]["id"])
        meta = json.loads(view.get("private_metadata") or "{}")
        bound = chat.read_button(door.ctx, meta.get("value"))
        channel, _, ts = str(meta["where"]).partition(" ")
        values = view["state"]["values"]
        edits = {str(block): _typed(inputs) for block, inputs in values.items() if block != NOTES}
        notes = _typed(values.get(NOTES) or {}) or None
    except (ValueError, KeyError, TypeError, AttributeError, SignoffError):
        await ack(response_action="errors", errors={NOTES: "This form was not drawn here."})
        return
    try:
        person = await chat.person_for(door.ctx, await door.email_of(user))
        done = await chat.decide(
            door.ctx,
            door=door.door,
            chat_user=user,
            person=person,
            bound=bound,
            decision=Decision.APPROVED_WITH_EDITS,
            notes=notes,
            edits=edits,
        )
    except SignoffError as error:
        errors = field_errors(error, list(edits))
        if errors:  # the modal stays open and says what to change
            await ack(response_action="errors", errors=errors)
            return
        await ack()
        await door._refused(user, channel, ts, bound, error)
        return
    await ack()
    await door._done(user, channel, ts, done)


def _typed(inputs: dict[str, Any]) -> str:
    """What one input holds (Slack sends no value for an emptied one: empty text)."""
    for state in inputs.values():
        return str(state.get("value") or "")
    return ""


def field_errors(error: SignoffError, blocks: list[str]) -> dict[str, str]:
    """The refusal's field errors under the modal's inputs: ``subject/<pointer>`` under
    the input of the editable field holding it, ``subject`` (the edit as a whole) under
    the first input, ``notes`` under the notes. Empty: the refusal names no input (a
    stale card, the decision rules): the modal closes and the person is told."""
    errors: dict[str, str] = {}
    for problem in error.errors:
        block = None
        if problem.field == NOTES:
            block = NOTES
        elif problem.field == "subject" and blocks:
            block = blocks[0]
        elif problem.field.startswith("subject/"):
            path = problem.field[len("subject") :]
            pointers = [b[len(PREFIX) :] for b in blocks if b.startswith(PREFIX)]
            holding = [p for p in pointers if within(path, [p])]
            block = PREFIX + holding[0] if holding else (blocks[0] if blocks else None)
        if block is not None:
            said = errors.get(block)
            errors[block] = f"{said}; {problem.message}" if said else problem.message
    return errors
