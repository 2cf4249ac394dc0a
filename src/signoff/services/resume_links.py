"""Resume links: the personal approve/reject link in a notification e-mail.

A link names one task and one approver. Opening it never changes anything (mail scanners
follow links); deciding with it is a claim and a resolve as that approver through the
very same service calls as the API, so every rule of a decision holds here as there: the
decision rules, the approver's role and groups at the moment they decide, the lease, the
revision they saw, and the approval's expiry. A link dies when its task is decided,
expires, is cancelled, or moves to another group.
"""

from __future__ import annotations

import contextlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from signoff.crypto import form_mac
from signoff.domain.approval_rules import votes_from_json
from signoff.domain.decisions import checked_notes, rule_for
from signoff.domain.edits import edited_subject
from signoff.domain.states import Decision, TaskStatus
from signoff.domain.tasks import (
    Principal,
    Task,
    can_read,
    decision_refusal,
    reviewing_elsewhere,
    task_view,
)
from signoff.errors import Conflict, ErrorCode, Forbidden, NotFound, SignoffError
from signoff.services import tasks as task_service
from signoff.services import votes
from signoff.services.context import ServiceContext
from signoff.services.notifications import hash_resume_token
from signoff.services.revisions import diff_off_loop, last_decided_revision
from signoff.store import approvals as approval_store
from signoff.store import tasks as task_store
from signoff.store import trail
from signoff.store import waiting as store
from signoff.store.runtime.database import UnitOfWork

WITHDRAWN = "This link was withdrawn (the task moved to another group)."


def csrf_token(ctx: ServiceContext, token_hash: str) -> str:
    """The resume page's form token: an HMAC of the link (see :func:`signoff.crypto.form_mac`)."""
    return form_mac(ctx.settings, "resume-link", token_hash)


@dataclass(frozen=True)
class LinkState:
    """What a resume link leads to. ``http_status``: 200 open or decided, 410 gone."""

    http_status: int
    state: str  # "open", "decided", "gone"
    message: str
    reason: str = ""
    """Why the link is where it is: ``open``, ``decided``, or why it is gone
    (``withdrawn``, ``cancelled``, ``expired``, ``link_expired``): the page's advice."""
    task: dict[str, Any] | None = None
    approver: str | None = None
    csrf: str | None = None
    revision: dict[str, Any] | None = None
    """The current revision of the subject (``subject``, ``source_revisions``, ``digest``)."""
    diff: dict[str, Any] | None = None
    """Changes since the revision the approver last viewed, when it is not the current."""
    comparison: dict[str, Any] | None = None
    """Changes between the two revisions the approver chose to compare."""


async def _load_link(
    uow: UnitOfWork, ctx: ServiceContext, token: str, now: datetime
) -> tuple[dict[str, Any], Task]:
    token_hash = hash_resume_token(token)
    row = await store.find_resume_token(uow.connection, token_hash)
    task = await task_store.find_task(uow.connection, row["task_id"]) if row else None
    if row is None or task is None:
        raise NotFound("this link is not known", error_code=ErrorCode.LINK_NOT_FOUND)
    # Read the link again, after the task: a reassignment revokes links in the same commit
    # that moves the task, so either this read sees the revocation, or the task read above
    # predates the move and the decision meets it later (the claim ends in another group,
    # the link is read again after the claim, or the move ends the lease it resolves
    # under). Reading the link only before the task let a move commit in between.
    row = await store.find_resume_token(uow.connection, token_hash)
    if row is None:
        raise NotFound("this link is not known", error_code=ErrorCode.LINK_NOT_FOUND)
    return row, task


def _state(ctx: ServiceContext, row: dict[str, Any], task: Task, now: datetime) -> LinkState:
    """A dead link says why and shows nothing of the task; a decided one shows only the
    decision."""
    if row["revoked_at"] is not None:
        return LinkState(410, "gone", WITHDRAWN, "withdrawn")
    if task.status is TaskStatus.RESOLVED:
        decided = {"id": str(task.id), "decision": task.decision, "operator_id": task.operator_id}
        return LinkState(
            200,
            "decided",
            f"The decision is already recorded: {task.decision}.",
            "decided",
            decided,
            row["principal_id"],
        )
    if task.status is TaskStatus.CANCELLED:
        return LinkState(
            410, "gone", "The producer withdrew this request; nothing to decide.", "cancelled"
        )
    if task.status is TaskStatus.EXPIRED:
        return LinkState(
            410, "gone", "This request expired before a decision; nothing was recorded.", "expired"
        )
    if row["expires_at"] <= now:
        return LinkState(410, "gone", "This link has expired.", "link_expired")
    view = task_view(task, now)
    voted = [v for v in votes_from_json(task.votes) if v.voter == row["principal_id"]]
    if voted:  # their part is done until a new revision voids the votes
        standing = view["approval_progress"]["text"]
        return LinkState(
            200,
            "decided",
            f"Your vote is recorded: {voted[-1].decision.value}. {standing}.",
            "voted",
            {"id": str(task.id), "decision": None, "operator_id": None},
            row["principal_id"],
        )
    return LinkState(
        200,
        "open",
        "Waiting for your decision.",
        "open",
        view,
        row["principal_id"],
        csrf_token(ctx, row["token_hash"]),
    )


async def view_link(
    ctx: ServiceContext, token: str, compare: tuple[int, int] | None = None
) -> LinkState:
    """What ``GET /r/{token}`` shows (``compare``: two revisions to show the changes
    between, when both exist and differ). Never changes state: mail scanners follow GETs."""
    now = ctx.now()
    chosen: list[dict[str, Any] | None] = []
    async with ctx.database.transaction(write=False) as uow:
        row, task = await _load_link(uow, ctx, token, now)
        state = _state(ctx, row, task, now)
        if state.state != "open" or not task.has_subject:
            return state
        current, before = await _revisions(uow, task, row["principal_id"])
        if compare is not None and compare[0] != compare[1]:
            chosen = [
                await approval_store.find_revision(uow.connection, task.id, number)
                for number in compare
            ]
    comparison = None
    start, end = chosen if len(chosen) == 2 else (None, None)
    if start is not None and end is not None:
        comparison = {"from": start["revision"], "to": end["revision"]} | await diff_off_loop(
            ctx, start, end
        )
    state = replace(state, comparison=comparison)
    diff = None
    if current is not None and before is not None:  # after the transaction: CPU work
        diff = {"from": before["revision"], "to": task.current_revision} | await diff_off_loop(
            ctx, before, current
        )
    return replace(state, revision=current, diff=diff)


async def _revisions(
    uow: UnitOfWork, task: Task, approver: str
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """What is being decided: the current revision, and the one to show changes from when
    that is another: the one the approver last viewed, or else the latest they decided on
    (as the console shows them; read only: a GET records nothing)."""
    conn = uow.connection
    current = await approval_store.find_revision(conn, task.id, int(task.current_revision or 0))
    seen = await approval_store.last_viewed_revision(conn, task_id=task.id, principal_id=approver)
    if seen is None or seen == task.current_revision:
        events = await trail.audit_events_for_task(conn, task.id)
        decided = last_decided_revision(events, approver)
        seen = decided if decided is not None and decided != task.current_revision else seen
    before = None
    if current is not None and seen is not None and seen != task.current_revision:
        before = await approval_store.find_revision(conn, task.id, seen)
    return current, before


async def decide_by_link(
    ctx: ServiceContext,
    token: str,
    decision: Decision,
    *,
    csrf: str | None,
    caller: Principal | None,
    revision: int | None = None,
    notes: object = None,
    edits: Mapping[str, str] | None = None,
) -> LinkState:
    """Decide as the link's approver: a claim and a resolve through
    :func:`signoff.services.tasks.claim` and :func:`signoff.services.tasks.resolve`, as
    the approver is now (their live reviewer key or console account, its role and groups).

    A repeated or late click shows the recorded outcome; after expiry, cancellation or a
    withdrawal (the task moved to another group), 410 and nothing changes. ``csrf`` is
    required from browsers (forms) and ``None`` for JSON callers; a JSON caller that
    authenticates must be the link's approver. What the decision rules refuse is refused
    before anything is claimed. An approver who holds the task in the console decides
    there (their lease is theirs: a link never replaces it). Everything else that stops
    the decision after the claim gives the task back at once; only a process that dies
    in between leaves the lease to lapse (``SIGNOFF_LEASE_SECONDS``).

    Raises:
        NotFound: unknown link. Forbidden: wrong form token, another principal, the
        producer's own principal, an approver no longer in the task's group or without a
        reviewer role. Conflict: someone else holds a live lease (the approver too, in
        the console), the approver already holds as many leases as anyone may, or the
        subject changed. Unprocessable: what the decision rules require (notes, a
        subject).
    """
    now = ctx.now()
    async with ctx.database.transaction(write=False) as uow:
        row, task = await _load_link(uow, ctx, token, now)
        approver_id = row["principal_id"]
        if caller is not None and caller.principal_id != approver_id:
            raise Forbidden("this link belongs to another approver", error_code=ErrorCode.FORBIDDEN)
        state = _state(ctx, row, task, now)
        if state.state != "open":
            return state  # what the page shows anyway: no form, nothing to protect
        if csrf is not None and not hmac.compare_digest(csrf, csrf_token(ctx, row["token_hash"])):
            raise Forbidden(
                "the form is not valid for this link; reload the page", error_code=ErrorCode.CSRF
            )
        approver = await store.approver_principal(uow.connection, approver_id)
    if approver is None:
        raise Forbidden(
            f"{approver_id} no longer holds a reviewer key or account",
            error_code=ErrorCode.FORBIDDEN,
        )
    if not can_read(approver, task):  # the link's holder knows the task: say why
        raise Forbidden(
            f"task {task.id} is assigned to group {task.assigned_group!r}, which "
            f"{approver_id} is not in",
            error_code=ErrorCode.NOT_IN_GROUP,
        )
    if task.has_subject and revision != task.current_revision:
        raise Conflict(
            f"name the revision you reviewed; the current one is {task.current_revision}: "
            "reload the page",
            error_code=ErrorCode.STALE_REVISION,
            extra={"current_revision": task.current_revision},
        )
    digest = task.digest if task.has_subject else None
    if task.approval_rule is not None:  # several people vote: no lease, the same rules
        return await _vote_by_link(ctx, token, approver, task, decision, notes, revision, digest)
    notes = checked_notes(decision, notes)
    refusal = decision_refusal(task, approver, decision, revision, digest)
    if refusal is not None:
        raise refusal
    subject = None
    if rule_for(decision).edits_subject and revision is not None:
        # The page's edit fields over the revision it showed (checked by the decision).
        async with ctx.database.transaction(write=False) as uow:
            shown = await approval_store.find_revision(uow.connection, task.id, revision)
        subject = edited_subject(shown["subject"], edits or {}) if shown else None
    elsewhere = reviewing_elsewhere(task, approver, now)
    if elsewhere is not None:
        raise elsewhere
    try:
        grant = await task_service.claim(ctx, approver, str(task.id))
    except SignoffError as error:
        return await _as_the_link_shows_it(ctx, token, error)
    try:
        # The link may have been withdrawn (a reassignment commits the move and the
        # withdrawal together) between its reading above and the claim: decide nothing.
        async with ctx.database.transaction(write=False) as uow:
            row, _ = await _load_link(uow, ctx, token, now)
        if row["revoked_at"] is not None:
            await _give_back(ctx, approver, str(task.id), grant.lease_token)
            return LinkState(410, "gone", WITHDRAWN, "withdrawn")
        resolved = await task_service.resolve(
            ctx,
            approver,
            str(task.id),
            grant.lease_token,
            decision=decision,
            notes=notes,
            resolution_payload=None,
            revision=revision,
            digest=digest,
            subject=subject,
            door="link",
        )
    except SignoffError as error:
        # Changed after the claim (a new revision, a move, a cancellation): give it back,
        # and answer what the link shows now if it is no longer open.
        await _give_back(ctx, approver, str(task.id), grant.lease_token)
        return await _as_the_link_shows_it(ctx, token, error)
    except BaseException:
        await _give_back(ctx, approver, str(task.id), grant.lease_token)
        raise
    if resolved.has_subject:
        async with ctx.database.transaction() as uow:
            await approval_store.record_view(
                uow.connection,
                task_id=resolved.id,
                principal_id=approver.principal_id,
                revision=int(resolved.current_revision or 0),
                now=now,
            )
            await uow.commit()
    return LinkState(
        200,
        "decided",
        f"Recorded: {decision.value}. Thank you.",
        "decided",
        task_view(resolved, ctx.now()),
        approver.principal_id,
    )


async def _vote_by_link(
    ctx: ServiceContext,
    token: str,
    approver: Principal,
    task: Task,
    decision: Decision,
    notes: object,
    revision: int | None,
    digest: str | None,
) -> LinkState:
    """A vote through the link, by :func:`signoff.services.votes.vote` like every door's."""
    try:
        ballot = await votes.vote(
            ctx,
            approver,
            str(task.id),
            decision=decision,
            notes=notes,
            revision=revision,
            digest=digest,
            door="link",
        )
    except SignoffError as error:
        return await _as_the_link_shows_it(ctx, token, error)
    voted = ballot.task
    if voted.has_subject:
        async with ctx.database.transaction() as uow:
            await approval_store.record_view(
                uow.connection,
                task_id=voted.id,
                principal_id=approver.principal_id,
                revision=int(voted.current_revision or 0),
                now=ctx.now(),
            )
            await uow.commit()
    standing = task_view(voted, ctx.now())["approval_progress"]["text"]
    return LinkState(
        200,
        "decided",
        f"{ballot.receipt.text()} {standing}. Thank you.",
        "voted",
        task_view(voted, ctx.now()),
        approver.principal_id,
    )


async def _as_the_link_shows_it(ctx: ServiceContext, token: str, error: SignoffError) -> LinkState:
    """A refusal because the task moved on (decided by a racing click, cancelled, expired,
    withdrawn) answers what the link shows now; any other refusal (someone else is
    reviewing, not in the group) is the error."""
    now = ctx.now()
    async with ctx.database.transaction(write=False) as uow:
        row, task = await _load_link(uow, ctx, token, now)
    state = _state(ctx, row, task, now)
    if state.state != "open":
        return state
    raise error


async def _give_back(ctx: ServiceContext, approver: Principal, task_id: str, token: str) -> None:
    """Best effort: a lease that already ended, or a database that cannot be reached, leaves
    nothing more to do here (an unreleased lease lapses by itself)."""
    with contextlib.suppress(Exception):
        await task_service.release(ctx, approver, task_id, token)
