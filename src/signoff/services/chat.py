"""Chat doors (Slack today): who a chat user is here, what a card shows and what its
buttons are bound to, and a decision asked for from a card.

A chat door parses what its chat system sends, asks :func:`person_for` who the chat user
is in Signoff, reads the card's signed value with :func:`read_button`, and decides through
:func:`decide`, which calls the same service functions every other door calls (a vote on a
task with an approval rule; otherwise a claim and a resolve, as a resume link does). An
edit, then approve, is read from an edit form (:func:`edit_form`) and decided the same way,
the edited subject handed to those functions. It restates no rule: refusals come from
those functions as they are.

:class:`ChatChannel` is the seam a second chat system implements (docs/architecture.md).
"""

from __future__ import annotations

import hmac
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from signoff.crypto import form_mac
from signoff.domain.chat_cards import CardInput, card_blocks, decided_text
from signoff.domain.decisions import checked_notes, rule_for
from signoff.domain.doors import door_words
from signoff.domain.edits import edit_fields, edited_subject, nothing_editable
from signoff.domain.states import ACTIVE_STATUSES, Decision, TaskStatus
from signoff.domain.tasks import (
    Principal,
    Task,
    can_read,
    decision_refusal,
    reviewing_elsewhere,
    task_view,
)
from signoff.errors import Conflict, ErrorCode, Forbidden, SignoffError, task_not_found
from signoff.services import votes as vote_service
from signoff.services.context import ServiceContext
from signoff.services.edits import prepared_edit
from signoff.services.leases import claim, release
from signoff.services.tasks import resolve
from signoff.store import approvals as approval_store
from signoff.store import chat as store
from signoff.store import tasks as task_store
from signoff.store import trail
from signoff.store import users as user_store

log = structlog.get_logger("signoff.chat")

#: What a card's buttons are signed for (a value of one purpose is worthless in another).
BUTTON_PURPOSE = "chat-card"
#: The form of a button's value: ``v1.<task>.<revision or ->.<digest or ->.<mac>``.
VALUE_VERSION = "v1"


class ChatChannel(Protocol):
    """What Signoff needs of a chat system to show cards and take decisions from them.

    Slack implements it (:mod:`signoff.chat.slack`); a second system (Microsoft Teams)
    implements the same five calls with its own cards and identities, and decides through
    :func:`decide` with its own ``door`` name. Nothing in the decision core changes.
    """

    door: str

    async def post_card(self, task_id: uuid.UUID, channel: str) -> str:
        """Post a task's card to ``channel``; returns the message's id there."""

    async def redraw(self, task_id: uuid.UUID, channel: str, message: str) -> None:
        """Draw the card of ``message`` again for the task as it is now."""

    async def tell(self, channel: str, user: str, text: str) -> None:
        """A private (ephemeral) note to one person in ``channel``."""

    async def email_of(self, user: str) -> str | None:
        """The chat user's e-mail address, when the chat system has verified it."""

    async def send_notice(self, principal_id: str, text: str) -> str | None:
        """A direct message to a Signoff person (a reminder, a reassignment, an expiry:
        :mod:`signoff.services.chat_notices`); returns its id, ``None`` when the person
        has no account in the chat system."""


@dataclass(frozen=True)
class Bound:
    """What a button was drawn for: the task, its revision and digest."""

    task_id: uuid.UUID
    revision: int | None
    digest: str | None


def _unsigned(task_id: uuid.UUID, revision: int | None, digest: str | None) -> str:
    return ".".join(
        [VALUE_VERSION, str(task_id), str(revision) if revision is not None else "-", digest or "-"]
    )


def sign_button(ctx: ServiceContext, task: Task) -> str:
    """The value every button of a card for ``task`` as it is now carries."""
    body = _unsigned(task.id, task.current_revision, task.digest)
    return f"{body}.{form_mac(ctx.settings, BUTTON_PURPOSE, body)}"


def read_button(ctx: ServiceContext, value: object) -> Bound:
    """The task, revision and digest a button's value was signed for.

    Raises:
        Forbidden: ``ERR_FORBIDDEN``: the value is not one this server signed (forged,
            altered, or signed with another ``SIGNOFF_SECRET_KEY``).
    """
    forged = Forbidden(
        "this button was not drawn by this Signoff (its signature does not match)",
        error_code=ErrorCode.FORBIDDEN,
    )
    if not isinstance(value, str) or len(value) > 512:
        raise forged
    body, _, mac = value.rpartition(".")
    expected = form_mac(ctx.settings, BUTTON_PURPOSE, body)
    if not body or not hmac.compare_digest(mac.encode(), expected.encode()):
        raise forged
    version, task_id, revision, digest = body.split(".")
    if version != VALUE_VERSION:
        raise forged
    return Bound(
        task_id=uuid.UUID(task_id),
        revision=None if revision == "-" else int(revision),
        digest=None if digest == "-" else digest,
    )


async def person_for(ctx: ServiceContext, email: str | None) -> Principal:
    """The Signoff person a chat user acts as: the one enabled account whose e-mail is the
    chat user's verified e-mail. Read at every action, so disabling the account or
    changing its e-mail takes effect at the next click.

    Raises:
        Forbidden: ``ERR_FORBIDDEN`` with what to do: no verified e-mail, no account with
            it (or several), or the account is disabled.
    """
    if not email:
        raise Forbidden(
            "your chat account has no verified e-mail address, so Signoff cannot tell who "
            "you are: decide in the console",
            error_code=ErrorCode.FORBIDDEN,
        )
    async with ctx.database.transaction(write=False) as uow:
        user = await user_store.find_user_by_email(uow.connection, email)
    if user is None:
        raise Forbidden(
            f"no Signoff account has the e-mail {email}: ask an admin to set it on your "
            "account (People, in the console), then try again",
            error_code=ErrorCode.FORBIDDEN,
        )
    if user.disabled_at is not None:
        raise Forbidden(
            f"the Signoff account {user.principal_id} is disabled", error_code=ErrorCode.FORBIDDEN
        )
    return user.principal


@dataclass(frozen=True)
class Drawn:
    """A card as drawn now: the message (text and blocks) and the revision it shows."""

    message: dict[str, Any]
    task: Task
    revision: int | None


async def draw(
    ctx: ServiceContext,
    task_id: uuid.UUID,
    *,
    door: str,
    channel: str | None = None,
    ts: str | None = None,
    outcome: str | None = None,
) -> Drawn:
    """The card of a task as it is now. A card already posted (``channel``, ``ts``) shows
    what changed since it was last drawn. Chat cards are posted where an admin routed them,
    so the task is read as the system reads it, not as one person."""
    async with ctx.database.transaction(write=False) as uow:
        conn = uow.connection
        task = await task_store.find_task(conn, task_id)
        if task is None:
            raise task_not_found(str(task_id))
        subject = previous = None
        shown = await store.card_at(conn, door, channel, ts) if channel and ts else None
        if task.current_revision is not None:
            row = await approval_store.find_revision(conn, task.id, task.current_revision)
            subject = row["subject"] if row else None
        before = shown["revision"] if shown else None
        if before is not None and before != task.current_revision:
            row = await approval_store.find_revision(conn, task.id, before)
            previous = row["subject"] if row else None
        decided_door = (
            await trail.decision_door(conn, task.id)
            if task.status is TaskStatus.RESOLVED and task.approval_rule is None
            else None
        )
    base = ctx.settings.public_base_url.rstrip("/")
    card = CardInput(
        view=task_view(task, ctx.now()),
        task_url=f"{base}/console/tasks/{task.id}",
        button_value=sign_button(ctx, task),
        now=ctx.now(),
        subject=subject,
        previous_subject=previous,
        previous_revision=before,
        outcome=outcome or outcome_text(task, decided_door),
    )
    return Drawn(card_blocks(card), task, task.current_revision)


async def note_card(ctx: ServiceContext, drawn: Drawn, *, door: str, channel: str, ts: str) -> None:
    """Remember which message shows the task, and the revision it was drawn for."""
    async with ctx.database.transaction() as uow:
        await store.record_card(
            uow.connection,
            door=door,
            task_id=drawn.task.id,
            channel=channel,
            ts=ts,
            revision=drawn.revision,
            now=ctx.now(),
        )
        await uow.commit()


@dataclass(frozen=True)
class Decided:
    """What a chat decision did: the task after it, a sentence for the card (everyone in
    the channel reads it) and one for the person who clicked alone (a vote's receipt)."""

    task: Task
    text: str
    private: str | None = None


async def decide(
    ctx: ServiceContext,
    *,
    door: str,
    chat_user: str,
    person: Principal,
    bound: Bound,
    decision: Decision,
    notes: object,
    edits: Mapping[str, str] | None = None,
) -> Decided:
    """``person`` decides (or votes on) the task a card's button was bound to, on the
    revision and digest the card showed, through the service functions every door uses.
    Every request is recorded with the chat user behind the person. A decision that
    edits the subject (``APPROVED_WITH_EDITS``) carries ``edits``: the edit form's
    fields (``edit:<pointer>`` and the value as typed, :func:`edit_form`), set over the
    revision the card showed as the console's and the resume page's forms are.

    Raises:
        SignoffError: whatever :func:`signoff.services.votes.vote`,
            :func:`signoff.services.leases.claim` or
            :func:`signoff.services.tasks.resolve` refuse (a stale revision, not eligible,
            one's own task, someone else holds it, the notes the decision needs…).
    """
    raw = str(bound.task_id)
    try:
        subject = await _edited(ctx, bound, edits) if rule_for(decision).edits_subject else None
        outcome = await _decide(ctx, door, person, bound, decision, notes, subject)
    except SignoffError as error:
        await _record(ctx, door, chat_user, person, bound, decision, error.error_code.value)
        raise
    await _record(ctx, door, chat_user, person, bound, decision, store.RECORDED)
    log.info("chat.decided", door=door, task_id=raw, actor=person.principal_id, user=chat_user)
    return outcome


async def _decide(
    ctx: ServiceContext,
    door: str,
    person: Principal,
    bound: Bound,
    decision: Decision,
    notes: object,
    subject: object,
) -> Decided:
    raw = str(bound.task_id)
    async with ctx.database.transaction(write=False) as uow:
        task = await task_store.find_task(uow.connection, bound.task_id)
    if task is None:
        raise task_not_found(raw)
    where = door_words(door)
    if task.approval_rule is not None:  # several people vote: no lease
        ballot = await vote_service.vote(
            ctx,
            person,
            raw,
            decision=decision,
            notes=notes,
            revision=bound.revision,
            digest=bound.digest,
            door=door,
            subject=subject,
        )
        label = rule_for(decision).label
        return Decided(
            ballot.task, f"{person.principal_id} voted {where}: {label}", ballot.receipt.text()
        )
    # What the decision rules refuse is refused before anything is claimed (as a resume
    # link does): a stale card or one's own task leaves no claim and release behind.
    notes = checked_notes(decision, notes)
    refusal = decision_refusal(task, person, decision, bound.revision, bound.digest)
    refusal = refusal or reviewing_elsewhere(task, person, ctx.now())
    if refusal is not None:
        raise refusal
    if rule_for(decision).edits_subject:  # a refused edit, too, leaves no claim behind
        await prepared_edit(ctx, task.id, bound.revision, subject)
    grant = await claim(ctx, person, raw)
    try:
        decided = await resolve(
            ctx,
            person,
            raw,
            grant.lease_token,
            decision=decision,
            notes=notes,
            resolution_payload=None,
            revision=bound.revision,
            digest=bound.digest,
            subject=subject,
            door=door,
        )
    except BaseException:
        await _give_back(ctx, person, raw, grant.lease_token)
        raise
    label = rule_for(decision).label
    return Decided(decided, f"{label}: decided by {person.principal_id} {where}")


async def edit_form(ctx: ServiceContext, person: Principal, bound: Bound) -> list[dict[str, Any]]:
    """The fields of an "Edit and approve" form for the revision a card showed
    (:func:`signoff.domain.edits.edit_fields`), once the decision rules would take an
    edit from ``person`` on it: the person may read the task, it is in review, the card's
    revision is current and the person did not escalate it (the rest is checked when the
    edit is sent).

    Raises:
        SignoffError: ``ERR_STALE_REVISION``, ``ERR_SELF_APPROVAL``, ``ERR_NOT_EDITABLE``,
            ``ERR_STATE_CONFLICT`` (decided, cancelled or expired),
            ``ERR_TASK_NOT_FOUND``.
    """
    async with ctx.database.transaction(write=False) as uow:
        task = await task_store.find_task(uow.connection, bound.task_id)
        shown = None
        if task is not None and bound.revision is not None:
            shown = await approval_store.find_revision(uow.connection, task.id, bound.revision)
    if task is None or not can_read(person, task):  # as every door answers it
        raise task_not_found(str(bound.task_id))
    if task.status not in ACTIVE_STATUSES:
        raise Conflict(
            f"task {task.id} is {task.status.value.lower()}: there is nothing to decide",
            error_code=ErrorCode.STATE_CONFLICT,
            extra={"task_status": task.status.value},
        )
    decision = Decision.APPROVED_WITH_EDITS
    refusal = decision_refusal(task, person, decision, bound.revision, bound.digest)
    if refusal is not None:
        raise refusal
    if not task.editable or shown is None:
        raise nothing_editable()
    return edit_fields(task.editable, shown["subject"])


async def _edited(ctx: ServiceContext, bound: Bound, edits: Mapping[str, str] | None) -> object:
    """The subject as edited: ``edits`` set over the revision the card showed (``None``
    when the card showed none: the decision rules say what is missing)."""
    if bound.revision is None:
        return None
    async with ctx.database.transaction(write=False) as uow:
        shown = await approval_store.find_revision(uow.connection, bound.task_id, bound.revision)
    return edited_subject(shown["subject"], edits or {}) if shown else None


async def _give_back(ctx: ServiceContext, person: Principal, raw: str, token: str) -> None:
    """Best effort: a lease that already ended leaves nothing to give back (an unreleased
    lease lapses by itself)."""
    try:
        await release(ctx, person, raw, token)
    except Exception:  # a refusal here changes nothing for the person
        log.info("chat.give_back_failed", task_id=raw, actor=person.principal_id)


async def _record(
    ctx: ServiceContext,
    door: str,
    chat_user: str,
    person: Principal | None,
    bound: Bound,
    decision: Decision,
    outcome: str,
) -> None:
    async with ctx.database.transaction() as uow:
        await store.record_action(
            uow.connection,
            door=door,
            chat_user=chat_user,
            principal_id=person.principal_id if person else None,
            task_id=bound.task_id,
            decision=decision.value,
            revision=bound.revision,
            outcome=outcome[:64],
            created_at=ctx.now(),
        )
        await uow.commit()


def outcome_text(task: Task, door: str | None = None) -> str | None:
    """A decided (or ended) task's outcome as a card says it, from what the task records;
    ``door``: the door the decision came through, when known ("Approved by alice in
    Slack")."""
    if task.status is TaskStatus.EXPIRED:
        return "Expired without a decision"
    if task.status is TaskStatus.CANCELLED:
        return "Cancelled by the producer"
    if task.status is not TaskStatus.RESOLVED or task.decision is None:
        return None
    return decided_text(Decision(task.decision), task.operator_id, door)
