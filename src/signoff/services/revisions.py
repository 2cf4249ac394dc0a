"""Use cases of a subject's revisions: a new revision and its effect on the approval,
source revocation, revision history, diffs and what a reviewer last saw."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from signoff.domain.clock import rfc3339
from signoff.domain.digests import json_digest
from signoff.domain.headline import rebind
from signoff.domain.inbox import search_text
from signoff.domain.params import number_or_none
from signoff.domain.revisions import (
    RevisionEffect,
    SubjectInput,
    changed_paths,
    is_material_change,
    parse_subject_fields,
    revision_effect,
    source_matches,
    structured_diff,
)
from signoff.domain.states import Action, Role, transition
from signoff.domain.tasks import Principal, Task, require_role
from signoff.errors import (
    Conflict,
    ErrorCode,
    FieldError,
    NotFound,
    PreconditionFailed,
    PreconditionRequired,
    Unprocessable,
    validation_error,
)
from signoff.services import notifications, votes
from signoff.services.common import get_task, producer_task, record_transition
from signoff.services.context import ServiceContext
from signoff.services.diff_cache import sized
from signoff.store import approvals as store
from signoff.store import tasks as task_store

PRECONDITION_FAILED_HINT = "GET the task for its current ETag and review what changed"


def parse_if_match(header: str | None) -> int:
    """``If-Match: "<revision>"`` (a strong ETag, quotes optional) → the revision number.

    Raises:
        PreconditionRequired: 428 when the header is missing.
        PreconditionFailed: 412 when it names no revision.
    """
    if header is None or not header.strip():
        raise PreconditionRequired(
            "If-Match with the current revision's ETag is required",
            error_code=ErrorCode.PRECONDITION_REQUIRED,
        )
    value = header.strip().removeprefix("W/").strip('"')
    revision = number_or_none(value)
    if revision is None:
        raise PreconditionFailed(
            f"If-Match {header!r} names no revision; {PRECONDITION_FAILED_HINT}"
        )
    return revision


async def revise_subject(
    ctx: ServiceContext, principal: Principal, raw_task_id: str, *, if_match: str | None, body: Any
) -> Task:
    """Store a new revision of the subject and apply its effect. Omitting
    ``source_revisions`` keeps the previous revision's sources.

    * in review: it becomes current (resolves naming the old one get ``ERR_STALE_REVISION``);
    * approved: the approval is invalidated and the task returns to review — unless the
      change is confined to paths outside ``material_paths``, when the approval is carried
      forward to the new revision (the diff is in the audit trail);
    * revision requested: back to review;
    * executing, completed or rejected: 409.

    Raises:
        PreconditionRequired, PreconditionFailed: ``If-Match`` missing or stale (428/412).
        Conflict: ``ERR_TASK_CONFLICT`` when reopening meets another active task for the
            entity; ``ERR_STATE_CONFLICT`` as above; ``ERR_REVISION_LIMIT`` when the task
            has ``SIGNOFF_MAX_REVISIONS_PER_TASK`` revisions.
    """
    expected = parse_if_match(if_match)
    if not isinstance(body, dict):
        raise validation_error([FieldError("(root)", "must be an object")])
    unknown = sorted(set(body) - {"subject", "source_revisions"})
    if unknown:
        raise validation_error([FieldError(name, "is not allowed here") for name in unknown])
    proposal = parse_subject_fields(body, allow_policy=False)
    if proposal is None:
        raise validation_error([FieldError("subject", "is required")])
    require_role(principal, frozenset({Role.PRODUCER}), "revise subjects")
    task = await producer_task(ctx, principal, raw_task_id)
    if not task.has_subject:
        raise Conflict("this task has no subject to revise", error_code=ErrorCode.STATE_CONFLICT)
    if task.current_revision != expected:
        raise PreconditionFailed(
            f"revision {expected} is not current (current: {task.current_revision}); "
            + PRECONDITION_FAILED_HINT,
            extra={"current_revision": task.current_revision},
        )
    limit = ctx.settings.max_revisions_per_task
    if expected >= limit:  # revisions are numbered from 1 and never deleted
        raise Conflict(
            f"task {task.id} has {expected} revisions, the most a task may have "
            f"(SIGNOFF_MAX_REVISIONS_PER_TASK is {limit}): escalate a new task",
            error_code=ErrorCode.REVISION_LIMIT,
            extra={"limit": limit},
        )
    now = ctx.now()
    digest = json_digest(proposal.subject)
    # The headline follows the revision: re-rendered from it, refused before any write.
    headline = rebind(task.headline, proposal.subject, expected + 1)
    async with ctx.database.transaction(write=False) as uow:
        previous = await store.find_revision(uow.connection, task.id, expected)
    assert previous is not None  # revisions are immutable and never deleted
    paths = changed_paths(previous["subject"], proposal.subject)
    if "source_revisions" not in body:  # omitted: the sources did not change
        proposal = replace(proposal, source_revisions=list(previous["source_revisions"]))
    sources_changed = previous["source_revisions"] != proposal.source_revisions
    effect, voided = _plan(task, paths, now, sources_changed)
    carried_diff = None
    if effect is RevisionEffect.CARRY_FORWARD:  # worked out before the write transaction
        carried_diff = await _diff_of(ctx, previous, proposal, digest)
    async with ctx.database.transaction() as uow:
        conn = uow.connection
        # The row lock orders this revision with votes and decisions: what they changed
        # (the version, the votes, the status) is read again here, and only a change of
        # revision makes the If-Match stale.
        locked = await task_store.lock_task(conn, task.id)
        assert locked is not None  # tasks are never deleted
        if locked.current_revision != expected:
            raise PreconditionFailed(
                f"revision {expected} is not current (current: {locked.current_revision}); "
                + PRECONDITION_FAILED_HINT,
                extra={"current_revision": locked.current_revision},
            )
        if locked.version != task.version:
            task = locked
            effect, voided = _plan(task, paths, now, sources_changed)
            if effect is RevisionEffect.CARRY_FORWARD and carried_diff is None:
                carried_diff = await _diff_of(ctx, previous, proposal, digest)
        step = transition(_ACTION_FOR[effect])
        revision = expected + 1
        if not await store.insert_revision(
            conn,
            task_id=task.id,
            revision=revision,
            subject=proposal.subject,
            digest=digest,
            source_revisions=proposal.source_revisions,
            created_by=principal.principal_id,
            now=now,
        ):
            raise PreconditionFailed(
                f"revision {revision} was just created by someone else; {PRECONDITION_FAILED_HINT}"
            )
        values: dict[str, Any] = {"current_revision": revision, "digest": digest}
        if headline is not None:
            words = search_text(
                task.entity_type, task.entity_id, task.reason_code, task.summary, headline
            )
            values |= {"headline": headline, "search_text": words}
        if effect is RevisionEffect.CARRY_FORWARD:
            values |= {"approved_revision": revision, "approved_digest": digest}
        elif effect in (RevisionEffect.INVALIDATE_APPROVAL, RevisionEffect.REOPEN_FOR_REVISION):
            values |= _REOPENED
        if effect is RevisionEffect.INVALIDATE_APPROVAL:
            # Remembered so an execute naming this revision is told why precisely.
            values["invalidated_revision"] = task.approved_revision
        if task.votes and not voided:
            values["votes"] = await votes.carry_votes(uow, task, revision=revision, digest=digest)
        try:
            updated = await store.apply_revision(conn, step, task, values, now)
        except store.ActiveTaskExists:
            active = await task_store.find_active_task_for_entity(
                conn, task.entity_type, task.entity_id
            )
            # Another producer's task ids are not this producer's to learn.
            mine = active is not None and active.producer_id == task.producer_id
            raise Conflict(
                f"another active task for {task.entity_type}/{task.entity_id} exists; "
                "this one cannot reopen",
                error_code=ErrorCode.TASK_CONFLICT,
                extra={"task_id": str(active.id)} if mine and active else {},
            ) from None
        if updated is None:
            raise PreconditionFailed(f"the task changed while revising; {PRECONDITION_FAILED_HINT}")
        details: dict[str, Any] = {
            "revision": revision,
            "digest": digest,
            "previous_revision": expected,
            "changed_paths": paths,
            "sources_changed": sources_changed,
            "effect": effect.value,
        }
        if effect in (RevisionEffect.INVALIDATE_APPROVAL, RevisionEffect.REOPEN_FOR_REVISION):
            # The decision being cleared stays readable, notes included (the console shows
            # a reviewer their own earlier notes beside the diff).
            details["previous_decision"] = {
                "decision": task.decision,
                "notes": task.notes,
                "by": task.operator_id,
                "revision": expected,
            }
        if effect is RevisionEffect.INVALIDATE_APPROVAL:
            details |= {
                "reason": "the subject changed after approval",
                "invalidated_approval": {
                    "revision": task.approved_revision,
                    "digest": task.approved_digest,
                    "approved_by": task.operator_id,
                    "approved_at": rfc3339(task.resolved_at),
                },
            }
        if carried_diff is not None:
            details["diff"] = carried_diff
        await record_transition(uow, step, updated, principal, now, details)
        if voided:
            updated = await votes.void_votes(
                uow, ctx, updated, principal, revision=revision, now=now
            )
        elif effect is RevisionEffect.INVALIDATE_APPROVAL:
            # The approver and the task's group learn that the approval no longer holds,
            # with a fresh link to the new revision.
            targets = [f"principal:{task.operator_id}"] if task.operator_id else []
            if updated.assigned_group:
                targets.append(f"group:{updated.assigned_group}")
            await notifications.notify(
                uow, ctx, updated, kind="approval_invalidated", targets=targets, now=now
            )
        await uow.commit()
    return updated


def _plan(
    task: Task, paths: list[str], now: datetime, sources_changed: bool
) -> tuple[RevisionEffect, bool]:
    """The new revision's effect on ``task`` as it stands, and whether it voids the votes
    (votes follow the approval: a material change voids them, any other carries them)."""
    effect = revision_effect(task, paths, now, sources_changed=sources_changed)
    voided = bool(task.votes) and (
        effect in (RevisionEffect.INVALIDATE_APPROVAL, RevisionEffect.REOPEN_FOR_REVISION)
        or (
            effect is RevisionEffect.KEEP_REVIEWING
            and is_material_change(task, paths, sources_changed)
        )
    )
    return effect, voided


async def _diff_of(
    ctx: ServiceContext, previous: dict[str, Any], proposal: SubjectInput, digest: str
) -> dict[str, Any]:
    new = {"subject": proposal.subject, "digest": digest}
    return await diff_off_loop(ctx, previous, new | {"source_revisions": proposal.source_revisions})


_ACTION_FOR = {
    RevisionEffect.KEEP_REVIEWING: Action.REVISE,
    RevisionEffect.CARRY_FORWARD: Action.CARRY_FORWARD,
    RevisionEffect.INVALIDATE_APPROVAL: Action.REOPEN,
    RevisionEffect.REOPEN_FOR_REVISION: Action.REOPEN,
}

#: Back to review: the decision and the approval binding are cleared (they stay in the
#: audit trail, with the reason).
_REOPENED: dict[str, Any] = {
    "status": "PENDING_REVIEW",
    "decision": None,
    "notes": None,
    "resolution_payload": None,
    "operator_id": None,
    "resolved_at": None,
    "claimed_by": None,
    "lease_token_hash": None,
    "lease_expires_at": None,
    "approved_revision": None,
    "approved_digest": None,
    "approval_expires_at": None,
    "approver_key_id": None,
}


async def revoke_source(
    ctx: ServiceContext, principal: Principal, raw_task_id: str, source_id: str
) -> dict[str, Any]:
    """Mark a source revoked (``S01`` or ``S01:r7``); approvals relying on it cannot execute.

    Raises:
        NotFound: ``ERR_SOURCE_NOT_FOUND`` when the current revision names no such source.
    """
    step = transition(Action.REVOKE_SOURCE)
    require_role(principal, step.roles, "revoke sources")
    task = await producer_task(ctx, principal, raw_task_id)
    now = ctx.now()
    async with ctx.database.transaction() as uow:
        current = await store.find_revision(uow.connection, task.id, task.current_revision or 0)
        sources = current["source_revisions"] if current else []
        if not any(source_matches(entry, source_id) for entry in sources):
            raise NotFound(
                f"the current revision names no source {source_id!r}",
                error_code=ErrorCode.SOURCE_NOT_FOUND,
            )
        if await store.revoke_source(
            uow.connection, task_id=task.id, source_id=source_id, by=principal.principal_id, now=now
        ):
            revoked = await store.new_task_version(uow.connection, task.id, now)
            await record_transition(uow, step, revoked, principal, now, {"source_id": source_id})
            await uow.commit()
    return {"task_id": str(task.id), "source_id": source_id, "revoked": True}


async def list_revisions(
    ctx: ServiceContext, principal: Principal, raw_task_id: str
) -> list[dict[str, Any]]:
    task = await get_task(ctx, principal, raw_task_id)
    async with ctx.database.transaction(write=False) as uow:
        return [dict(r) for r in await store.list_revisions(uow.connection, task.id)]


async def get_revision(
    ctx: ServiceContext,
    principal: Principal,
    raw_task_id: str,
    revision: int,
    *,
    as_viewed: bool = True,
) -> dict[str, Any]:
    """One revision. ``as_viewed``: reading it counts as having viewed it (for "changed
    since you looked"); the console's page reads without it and records a view only
    through :func:`record_viewed`."""
    task = await get_task(ctx, principal, raw_task_id)
    async with ctx.database.transaction() as uow:
        row = await store.find_revision(uow.connection, task.id, revision)
        if row is None:
            raise NotFound(
                f"task {task.id} has no revision {revision}",
                error_code=ErrorCode.REVISION_NOT_FOUND,
            )
        if as_viewed and principal.role is not Role.PRODUCER:
            await store.record_view(
                uow.connection,
                task_id=task.id,
                principal_id=principal.principal_id,
                revision=revision,
                now=ctx.now(),
            )
        await uow.commit()
    return row


async def diff(
    ctx: ServiceContext, principal: Principal, raw_task_id: str, start: int, end: int
) -> dict[str, Any]:
    """Structured diff between two revisions (JSON Pointer paths, line diffs for long
    strings, and which sources changed)."""
    task = await get_task(ctx, principal, raw_task_id)
    async with ctx.database.transaction(write=False) as uow:
        old = await store.find_revision(uow.connection, task.id, start)
        new = await store.find_revision(uow.connection, task.id, end)
    missing = [
        FieldError(name, "no such revision")
        for name, row in (("from", old), ("to", new))
        if row is None
    ]
    if missing:
        raise Unprocessable("unknown revision", error_code=ErrorCode.VALIDATION, errors=missing)
    assert old is not None
    assert new is not None
    return {
        "from": start,
        "to": end,
        **await diff_off_loop(ctx, old, new),
    }


async def diff_off_loop(
    ctx: ServiceContext, old: Mapping[str, Any], new: Mapping[str, Any]
) -> dict[str, Any]:
    """:func:`structured_diff` of two revisions (their ``subject``, ``digest`` and
    ``source_revisions``) on the diff threads (:mod:`signoff.services.cpu`): line diffs of
    long strings are CPU work, bounded per diff, that must not hold up the event loop nor
    other kinds of work. Kept per revision pair (:mod:`signoff.services.diff_cache`); the
    result is shared: read it, never change it."""
    key = (
        old["digest"],
        new["digest"],
        tuple(old["source_revisions"]),
        tuple(new["source_revisions"]),
    )

    def work() -> tuple[dict[str, Any], int]:
        return sized(
            structured_diff(
                old["subject"],
                new["subject"],
                old["source_revisions"],
                new["source_revisions"],
            )
        )

    async def compute() -> tuple[dict[str, Any], int]:
        return await ctx.cpu.diffs.run(work)

    return await ctx.diff_cache.get(key, compute)


def last_decided_revision(trail: Sequence[dict[str, Any]], principal_id: str) -> int | None:
    """The latest revision ``principal_id`` decided on, from a task's audit trail (their
    decisions, and the ones a new revision cleared), or ``None``. A reviewer back on a
    task revised since their decision reads the changes since that revision."""
    found: int | None = None
    for event in trail:
        details = event.get("details") or {}
        revision = None
        if event.get("actor_id") == principal_id and event.get("type") == "task.resolved":
            revision = details.get("revision")
        previous = details.get("previous_decision")
        if isinstance(previous, dict) and previous.get("by") == principal_id:
            revision = previous.get("revision")
        if isinstance(revision, int) and not isinstance(revision, bool):
            found = revision
    return found


async def last_viewed(ctx: ServiceContext, principal: Principal, task: Task) -> int | None:
    """The revision the caller last viewed (``None``: never), recording nothing."""
    if principal.role is Role.PRODUCER or not task.has_subject:
        return None
    async with ctx.database.transaction(write=False) as uow:
        return await store.last_viewed_revision(
            uow.connection, task_id=task.id, principal_id=principal.principal_id
        )


async def record_viewed(
    ctx: ServiceContext, principal: Principal, raw_task_id: str, revision: int
) -> None:
    """Record that the caller looked at ``revision`` of a task they may read (the
    console's page says so once the reviewer acts on it).

    Raises:
        NotFound: ``ERR_TASK_NOT_FOUND``, ``ERR_REVISION_NOT_FOUND``.
    """
    await get_revision(ctx, principal, raw_task_id, revision)


async def note_view(ctx: ServiceContext, principal: Principal, task: Task) -> int | None:
    """Record that a reviewer looked at the task's current revision; returns the revision
    they had seen before (``None``: never)."""
    if principal.role is Role.PRODUCER or not task.has_subject:
        return None
    async with ctx.database.transaction() as uow:
        previous = await store.record_view(
            uow.connection,
            task_id=task.id,
            principal_id=principal.principal_id,
            revision=int(task.current_revision or 0),
            now=ctx.now(),
        )
        await uow.commit()
    return previous
