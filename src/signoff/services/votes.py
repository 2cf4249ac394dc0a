"""Votes: how a task with an approval rule is decided.

Every door (the API's ``POST /tasks/{id}/votes``, the console, a resume link) votes
through :func:`vote`, one transaction that locks the task, checks the decision rules
(:mod:`signoff.domain.decisions`: notes, subject, the producer's principal) and the
approval rule (:mod:`signoff.domain.approval_rules`: requester, stage, groups, one vote a
person), records the vote, and — when the vote meets the rule or vetoes it — decides the
task in the same transaction. Racing votes are serialised by the task's row lock, so a
rule's quorum is reached exactly once, with one ``task.resolved``.

Votes need no lease: a lease gives one person a task for a while, and a rule asks several
people to review the same task at the same time. What a lease protects against — a
decision on content the person did not see — each vote gets from the revision and digest
it names.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from signoff.domain.approval_rules import (
    RULE_NAME,
    ApprovalRule,
    Progress,
    Vote,
    parse_rule,
    progress,
    rule_from_json,
    votes_from_json,
)
from signoff.domain.ballots import (
    Receipt,
    already_voted,
    receipt,
    retried,
    retry_receipt,
    vote_refusal,
)
from signoff.domain.change_requests import change_request
from signoff.domain.decisions import checked_notes, require_made_by_people, rule_for
from signoff.domain.doors import recorded_door
from signoff.domain.rule_reach import merge_voters, unmeetable
from signoff.domain.states import Action, Decision, Role, TaskStatus, Transition, transition
from signoff.domain.tasks import (
    Principal,
    Task,
    ballot_refusal,
    can_read,
    decision_refusal,
    require_operator,
    require_role,
)
from signoff.errors import (
    Conflict,
    ErrorCode,
    FieldError,
    NotFound,
    Unprocessable,
    task_not_found,
    validation_error,
)
from signoff.services import notifications
from signoff.services.common import parse_task_id, record_transition
from signoff.services.context import ServiceContext
from signoff.services.edits import prepared_edit
from signoff.store import approvals as revision_store
from signoff.store import tasks as task_store
from signoff.store import votes as store
from signoff.store.runtime.database import UnitOfWork
from signoff.store.writes import Edit

ADMIN = frozenset({Role.ADMIN})


@dataclass(frozen=True)
class Ballot:
    """The task after a vote, and what the vote did (recorded, counted, why)."""

    task: Task
    receipt: Receipt


async def vote(
    ctx: ServiceContext,
    principal: Principal,
    raw_task_id: str,
    *,
    decision: Decision,
    notes: object,
    revision: int | None,
    digest: str | None,
    door: str,
    operator_id: str | None = None,
    stage: int | None = None,
    subject: object = None,
) -> Ballot:
    """Cast ``principal``'s vote on a task with an approval rule; returns the task after it
    (decided, when this vote met the rule or vetoed it) and what the vote did. Repeating
    one's own live vote exactly (a retry) returns the task and writes nothing; a vote at a
    later stage than one's earlier vote names its ``stage`` (from 1).

    Raises:
        Forbidden: ``ERR_SELF_APPROVAL`` (the producer's principal, or the excluded
            requester), ``ERR_NOT_ELIGIBLE_TO_VOTE``, ``ERR_OPERATOR_MISMATCH``.
        Conflict: ``ERR_ALREADY_VOTED``, ``ERR_STAGE_NOT_OPEN``, ``ERR_STALE_REVISION``,
            ``ERR_NOT_DECIDED_BY_VOTES`` (the task has no rule), ``ERR_STATE_CONFLICT``
            (no longer in review).
        Unprocessable: notes the decision rules refuse; revision/digest missing.
    """
    step = transition(Action.VOTE)
    require_role(principal, step.roles, "vote on tasks")
    require_operator(principal, operator_id)
    require_made_by_people(decision)
    notes = checked_notes(decision, notes)
    task_id = parse_task_id(raw_task_id)
    edit = None
    if rule_for(decision).edits_subject:
        edit = await prepared_edit(ctx, task_id, revision, subject)
    elif subject is not None:
        raise validation_error([FieldError("subject", "is only for a vote that edits it")])
    async with ctx.database.transaction() as uow:
        task = await task_store.lock_task(uow.connection, task_id)
        now = ctx.now()  # read under the lock: no counted vote is later than the decision
        if task is None or not can_read(principal, task):
            raise task_not_found(raw_task_id)
        if task.approval_rule is None:
            raise Conflict(
                "this task has no approval rule: one person decides it (claim, then resolve)",
                error_code=ErrorCode.NOT_DECIDED_BY_VOTES,
            )
        rule = rule_from_json(task.approval_rule)
        if edit is not None:
            ballot = await _edit_vote(
                uow, ctx, task, principal, edit, rule=rule, notes=notes, revision=revision,
                digest=digest, door=door, now=now,
            )  # fmt: skip
            await uow.commit()
            return ballot
        votes = votes_from_json(task.votes)
        earlier = retried(
            votes,
            voter=principal.principal_id,
            decision=decision,
            notes=notes,
            revision=revision,
            stage=stage,
        )
        if earlier is not None:  # a retry of one's own live vote: nothing is written
            return Ballot(task, retry_receipt(earlier))
        if task.status not in step.sources:
            raise _not_in_review(task)
        refusal = ballot_refusal(task, principal, decision, revision, digest, stage)
        if refusal is not None:
            raise refusal
        before = progress(rule, votes)
        cast = Vote(
            voter=principal.principal_id,
            key_id=str(principal.key_id),
            groups=tuple(principal.groups),
            decision=decision,
            notes=notes,
            revision=task.current_revision,
            digest=task.digest,
            stage=before.stage,
            at=now,
            door=recorded_door(door),
        )
        if not await store.insert_vote(uow.connection, task.id, cast):
            raise already_voted(principal.principal_id)
        votes.append(cast)
        after = progress(rule, votes)
        done = receipt(rule, before, after, cast)
        task = await _write_votes(uow, step, task, votes, now)
        details: dict[str, Any] = {"vote": cast.public(), "progress": after.as_json()}
        details |= {"effect": done.as_json(), "door": cast.door}  # its receipt states the door
        await record_transition(uow, step, task, principal, now, details)
        if after.outcome is not None:
            task = await _decide(uow, ctx, task, principal, cast, after, now)
        elif after.stage != before.stage:
            await _ask_stage(uow, ctx, task, rule, after, now)
        await uow.commit()
    return Ballot(task, done)


async def _edit_vote(
    uow: UnitOfWork, ctx: ServiceContext, task: Task, principal: Principal, edit: Edit, **vote: Any
) -> Ballot:
    """An edit on a task decided by votes is a material change by the voter: it becomes
    the next revision (theirs), every live vote is void, and their approval of the edit is
    the first vote on it — counted, and deciding the task when one approval meets the rule.
    ``vote``: the ``rule``, ``notes``, ``revision``, ``digest``, ``door`` and ``now``."""
    rule, now, step = vote["rule"], vote["now"], transition(Action.VOTE)
    if task.status not in step.sources:
        raise _not_in_review(task)
    named = (vote["revision"], vote["digest"])
    refusal = decision_refusal(task, principal, Decision.APPROVED_WITH_EDITS, *named)
    refusal = refusal or vote_refusal(
        rule, [], voter=principal.principal_id, voter_groups=principal.groups,
        requested_by=task.requested_by,
    )  # fmt: skip
    if refusal is not None:  # (the edit was checked against the revision named)
        raise refusal
    await revision_store.insert_revision(
        uow.connection, task_id=task.id, revision=edit.revision, subject=edit.subject,
        digest=edit.digest, source_revisions=edit.source_revisions,
        created_by=principal.principal_id, now=now,
    )  # fmt: skip
    task = await _write_votes(uow, step, task, votes_from_json(task.votes), now, edit.values())
    revised = {"revision": edit.revision, "digest": edit.digest, "previous_revision": named[0]}
    details = revised | {"changed_paths": edit.changed_paths, "edited_by": principal.principal_id}
    await record_transition(uow, transition(Action.REVISE), task, principal, now, details)
    task = await void_votes(uow, ctx, task, principal, revision=edit.revision, now=now)
    before = progress(rule, [])
    cast = Vote(
        voter=principal.principal_id, key_id=str(principal.key_id),
        groups=tuple(principal.groups), decision=Decision.APPROVED, notes=vote["notes"],
        revision=edit.revision, digest=edit.digest, stage=before.stage, at=now,
        door=recorded_door(vote["door"]),
    )  # fmt: skip
    if not await store.insert_vote(uow.connection, task.id, cast):
        raise already_voted(principal.principal_id)
    after = progress(rule, [cast])
    done = receipt(rule, before, after, cast)
    task = await _write_votes(uow, step, task, [cast], now)
    details = {"vote": cast.public(), "progress": after.as_json(), "effect": done.as_json()}
    details |= {"door": cast.door, "edit": revised}
    await record_transition(uow, step, task, principal, now, details)
    if after.outcome is not None:
        task = await _decide(uow, ctx, task, principal, cast, after, now)
    elif after.stage != before.stage:
        await _ask_stage(uow, ctx, task, rule, after, now)
    return Ballot(task, done)


def _not_in_review(task: Task) -> Conflict:
    if task.status is TaskStatus.RESOLVED:
        what = f"was decided ({task.decision})"
    else:
        what = f"is {task.status.value.lower()}"
    return Conflict(
        f"task {task.id} {what}; no vote can be cast now",
        error_code=ErrorCode.STATE_CONFLICT,
        extra={"task_status": task.status.value},
    )


async def _write_votes(
    uow: UnitOfWork,
    step: Transition,
    task: Task,
    votes: list[Vote],
    now: datetime,
    also: dict[str, Any] | None = None,
) -> Task:
    values = {"votes": [v.as_json() for v in votes]} | (also or {})
    updated = await store.change_voted_task(uow.connection, step, task, values, now)
    assert updated is not None  # the row is locked by this transaction
    return updated


async def _decide(
    uow: UnitOfWork,
    ctx: ServiceContext,
    task: Task,
    principal: Principal,
    deciding: Vote,
    standing: Progress,
    now: datetime,
) -> Task:
    """The vote met the rule (approved) or vetoed it: the task is decided by it."""
    step = transition(Action.DECIDE_BY_VOTES)
    decision = standing.outcome
    assert decision is not None
    if decision is Decision.APPROVED and task.current_revision is not None:
        # What is approved was edited by a reviewer: the producer is told so.
        shown = await revision_store.find_revision(uow.connection, task.id, task.current_revision)
        if shown is not None and shown["created_by"] != task.producer_id:
            decision = Decision.APPROVED_WITH_EDITS
    values: dict[str, Any] = {
        "status": step.status_after().value,
        "decision": decision.value,
        "notes": deciding.notes,
        "operator_id": principal.principal_id,
        "resolved_at": now,
        "claimed_by": None,
        "lease_token_hash": None,
        "lease_expires_at": None,
        # A vetoing change request is kept like one made by a single reviewer (notes only).
        "change_request": change_request(
            decision,
            notes=deciding.notes,
            fields=[],
            revision=task.current_revision,
            by=principal.principal_id,
            at=now,
        ),
    }
    if rule_for(decision).grants_approval:
        values |= {
            "approved_revision": task.current_revision,
            "approved_digest": task.digest,
            "approver_key_id": principal.key_id,
        }
        ttl = task.approval_ttl_seconds or ctx.settings.approval_ttl_seconds
        if task.has_subject and ttl is not None:
            values["approval_expires_at"] = now + timedelta(seconds=ttl)
    decided = await store.change_voted_task(uow.connection, step, task, values, now)
    assert decided is not None  # the row is locked by this transaction
    details: dict[str, Any] = {
        "decision": decision.value,
        "decided_by_votes": True,
        "door": deciding.door,
        "votes": [v.public() for v in votes_from_json(decided.votes)],
    }
    if decided.has_subject:
        details |= {"revision": decided.current_revision, "digest": decided.digest}
    await record_transition(uow, step, decided, principal, now, details)
    return decided


async def _ask_stage(
    uow: UnitOfWork,
    ctx: ServiceContext,
    task: Task,
    rule: ApprovalRule,
    standing: Progress,
    now: datetime,
) -> None:
    """A stage was met: the next stage's groups are asked, with their links."""
    targets = [f"group:{g}" for g in rule.stages[standing.stage].group_names]
    await notifications.notify(uow, ctx, task, kind="review_requested", targets=targets, now=now)


def first_stage_targets(rule: ApprovalRule) -> list[str]:
    """Who is asked when a task with ``rule`` enters review: the first stage's groups."""
    return [f"group:{g}" for g in rule.stages[0].group_names]


async def void_votes(
    uow: UnitOfWork,
    ctx: ServiceContext,
    task: Task,
    principal: Principal,
    *,
    revision: int,
    now: datetime,
) -> Task:
    """A material revision: every live vote stops counting (2 of 2 becomes 0 of 2); each
    voter is told, with a link to the new revision, and the first stage is asked again."""
    step = transition(Action.VOID_VOTES)
    voided = votes_from_json(task.votes)
    if not voided:
        return task
    await store.void_votes(
        uow.connection, task.id, now=now, reason=f"revision {revision} changed what was voted on"
    )
    updated = await store.change_voted_task(uow.connection, step, task, {"votes": []}, now)
    assert updated is not None  # the caller's transaction holds the row
    details = {
        "revision": revision,
        "reason": "a material change: every vote on the earlier revision is void",
        "voided": [v.public() for v in voided],
    }
    await record_transition(uow, step, updated, principal, now, details)
    voters = [f"principal:{v.voter}" for v in voided]
    await notifications.notify(uow, ctx, updated, kind="votes_voided", targets=voters, now=now)
    rule = rule_from_json(updated.approval_rule or {})
    others = [t for t in first_stage_targets(rule) if t not in voters]
    await notifications.notify(uow, ctx, updated, kind="review_requested", targets=others, now=now)
    return updated


async def carry_votes(
    uow: UnitOfWork, task: Task, *, revision: int, digest: str
) -> list[dict[str, Any]]:
    """A change confined to non-material paths: the live votes stand for the new revision
    (as a single approval is carried forward). Returns the votes as now stored."""
    carried = [replace(v, revision=revision, digest=digest) for v in votes_from_json(task.votes)]
    await store.carry_votes(uow.connection, task.id, revision=revision, digest=digest)
    return [v.as_json() for v in carried]


# --- Named rules (admins) ---------------------------------------------------------------


async def check_reach(
    uow: UnitOfWork,
    rule: ApprovalRule,
    *,
    field: str,
    staged: bool,
    assigned_group: str | None = None,
    producer: str | None = None,
    requested_by: str | None = None,
) -> None:
    """Refuse a rule the people who may vote cannot meet (:mod:`signoff.domain.rule_reach`).

    Raises:
        Unprocessable: ``ERR_UNMEETABLE_APPROVAL_RULE`` naming the short group or stage.
    """
    people = merge_voters(await store.voters(uow.connection))
    refusal = unmeetable(
        rule,
        people,
        field=field,
        staged=staged,
        assigned_group=assigned_group,
        producer=producer,
        requested_by=requested_by,
    )
    if refusal is not None:
        raise refusal


async def rule_named(uow: UnitOfWork, name: str) -> ApprovalRule:
    """The admin-managed rule ``name``, to copy onto a task.

    Raises:
        Unprocessable: ``ERR_UNKNOWN_APPROVAL_RULE``.
    """
    row = await store.find_rule(uow.connection, name)
    if row is None:
        raise Unprocessable(
            f"no approval rule named {name!r}",
            error_code=ErrorCode.UNKNOWN_APPROVAL_RULE,
            errors=[FieldError("approval_rule", "no such rule")],
        )
    return parse_rule(row["rule"], name=name)


async def save_rule(
    ctx: ServiceContext, caller: Principal, name: str, body: Any
) -> tuple[dict[str, Any], bool]:
    """Create or replace the rule ``name`` (admins); ``True`` when it is new. Tasks keep
    the rule they were escalated with: changing or deleting a rule never changes a
    waiting task's."""
    require_role(caller, ADMIN, "manage approval rules")
    if not RULE_NAME.match(name):
        raise validation_error(
            [FieldError("name", "lowercase letters, digits, '.', '_' or '-'; at most 63")]
        )
    if isinstance(body, dict) and body.get("name", name) != name:
        raise validation_error([FieldError("name", "must match the path")])
    rule = parse_rule(body, "(root)", name=name)
    document = rule.as_json()
    async with ctx.database.transaction() as uow:
        await check_reach(uow, rule, field="(root)", staged="stages" in body)
        now = ctx.now()
        conn = uow.connection
        created = await store.upsert_rule(conn, name=name, rule=document, now=now, create=True)
        if not created:
            await store.upsert_rule(conn, name=name, rule=document, now=now, create=False)
        await uow.commit()
    return document, created


async def get_rule(ctx: ServiceContext, caller: Principal, name: str) -> dict[str, Any]:
    require_role(caller, ADMIN, "read approval rules")
    async with ctx.database.transaction(write=False) as uow:
        row = await store.find_rule(uow.connection, name)
    if row is None:
        raise _rule_not_found(name)
    return parse_rule(row["rule"], name=name).as_json()


async def list_rules(ctx: ServiceContext, caller: Principal) -> list[dict[str, Any]]:
    require_role(caller, ADMIN, "read approval rules")
    async with ctx.database.transaction(write=False) as uow:
        rows = await store.list_rules(uow.connection)
    return [parse_rule(row["rule"], name=row["name"]).as_json() for row in rows]


async def delete_rule(ctx: ServiceContext, caller: Principal, name: str) -> None:
    require_role(caller, ADMIN, "manage approval rules")
    async with ctx.database.transaction() as uow:
        if not await store.delete_rule(uow.connection, name):
            raise _rule_not_found(name)
        await uow.commit()


def _rule_not_found(name: str) -> NotFound:
    return NotFound(f"no approval rule {name!r}", error_code=ErrorCode.APPROVAL_RULE_NOT_FOUND)
