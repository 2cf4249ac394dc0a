"""Review tasks as values, their public representation, and the rules read from them.

Pure functions: nothing here touches a database or HTTP.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from signoff.domain.approval_rules import progress, rule_from_json, votes_from_json
from signoff.domain.ballots import vote_refusal
from signoff.domain.clock import rfc3339
from signoff.domain.decisions import DecisionRule, decisions_where, rule_for
from signoff.domain.digests import canonical_json
from signoff.domain.states import (
    ACTIVE_STATUSES,
    Action,
    Decision,
    LeaseRule,
    Role,
    TaskStatus,
    Transition,
    transition,
)
from signoff.errors import (
    Conflict,
    ErrorCode,
    FieldError,
    Forbidden,
    SignoffError,
    task_not_found,
    validation_error,
)


@dataclass(frozen=True)
class Principal:
    """Who is calling: the API key's id (for a person signed in to the console, their
    user's id), the principal it names, its role and groups."""

    key_id: uuid.UUID
    principal_id: str
    role: Role
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class Task:
    """A review task as stored. Datetimes are timezone-aware UTC."""

    id: uuid.UUID
    status: TaskStatus
    entity_type: str
    entity_id: str
    reason_code: str
    precheck_hash: str
    diagnostic_bundle: dict[str, Any]
    producer_id: str
    version: int
    claimed_by: str | None
    lease_token_hash: str | None
    lease_expires_at: datetime | None
    decision: str | None
    notes: str | None
    resolution_payload: Any
    operator_id: str | None
    created_at: datetime
    updated_at: datetime
    resolved_at: datetime | None
    current_revision: int | None = None
    digest: str | None = None
    material_paths: list[str] | None = None
    approval_ttl_seconds: int | None = None
    approved_revision: int | None = None
    approved_digest: str | None = None
    approval_expires_at: datetime | None = None
    approver_key_id: uuid.UUID | None = None
    execution_status: str | None = None
    execution_operation_id: str | None = None
    executed_at: datetime | None = None
    deadline_at: datetime | None = None
    escalation_level: int = 0
    escalation_policy: dict[str, Any] | None = None
    assigned_group: str | None = None
    summary: dict[str, Any] | None = None
    producer_metadata: dict[str, Any] | None = None
    traceparent: str | None = None
    execution_token_hash: str | None = None
    execution_lease_expires_at: datetime | None = None
    execution_stalled_at: datetime | None = None
    invalidated_revision: int | None = None
    approval_rule: dict[str, Any] | None = None
    requested_by: str | None = None
    votes: list[dict[str, Any]] | None = None
    due_at: datetime | None = None
    """The first deadline, kept as given while the levels move ``deadline_at``."""
    headline: dict[str, Any] | None = None
    """The headline bound to the current revision (:mod:`signoff.domain.headline`)."""
    editable: list[str] | None = None
    """JSON Pointers of the subject a reviewer may edit before approving."""
    grant_id: uuid.UUID | None = None
    """The remembered approval that approved the task (:mod:`signoff.domain.grants`)."""
    change_request: dict[str, Any] | None = None
    """The feedback of the last decision that asked for changes, kept until the task is
    decided again (:mod:`signoff.domain.change_requests`)."""

    @property
    def has_subject(self) -> bool:
        return self.current_revision is not None

    def lease_lapsed(self, now: datetime) -> bool:
        """A lease is live while ``now < lease_expires_at``; at that instant it lapses."""
        return (
            self.status is TaskStatus.CLAIMED
            and self.lease_expires_at is not None
            and self.lease_expires_at <= now
        )

    def effective_status(self, now: datetime) -> TaskStatus:
        """The status users see: a claim whose lease lapsed is available again, so it is
        shown (and filtered) as ``PENDING_REVIEW`` even before anyone re-claims it."""
        if self.lease_lapsed(now):
            return TaskStatus.PENDING_REVIEW
        return self.status


def hash_lease_token(token: str) -> str:
    """Lease tokens are stored as SHA-256 so a database dump cannot be used to resolve."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_lease_token() -> str:
    """A fresh fencing token for one claim (a random UUID, 122 bits)."""
    return str(uuid.uuid4())


def task_view(
    task: Task, now: datetime, *, metadata: bool = False, traceparent: bool = False
) -> dict[str, Any]:
    """The one public representation of a task (API responses, audit, outbox events).

    Timestamps are RFC 3339 UTC strings. The lease token never appears here; claim
    responses add it explicitly. ``metadata`` and ``traceparent`` add the producer's own
    fields (for its producer and admins, see :func:`view_for`; events carry ``metadata``).
    """
    status = task.effective_status(now)
    held = status is TaskStatus.CLAIMED
    view = _base_view(task, now, status, held)
    if metadata:
        view["metadata"] = task.producer_metadata
    if traceparent:
        view["traceparent"] = task.traceparent
    if task.requested_by is not None:
        view["requested_by"] = task.requested_by
    if task.approval_rule is not None:
        view |= votes_view(task)
    return view


def votes_view(task: Task) -> dict[str, Any]:
    """A task with an approval rule: the rule, its live votes and where it stands."""
    rule = rule_from_json(task.approval_rule or {})
    votes = votes_from_json(task.votes)
    return {
        "approval_rule": rule.as_json(),
        "votes": [vote.public() for vote in votes],
        "approval_progress": progress(rule, votes).as_json(),
    }


def sees_producer_fields(principal: Principal, task: Task) -> bool:
    """A task's ``metadata`` and ``traceparent`` belong to its producer: shown to it and to
    admins, never to reviewers or supervisors."""
    return principal.role is Role.ADMIN or (
        principal.role is Role.PRODUCER and task.producer_id == principal.principal_id
    )


def view_for(principal: Principal, task: Task, now: datetime) -> dict[str, Any]:
    """:func:`task_view` as ``principal`` may see it."""
    private = sees_producer_fields(principal, task)
    return task_view(task, now, metadata=private, traceparent=private)


def _base_view(task: Task, now: datetime, status: TaskStatus, held: bool) -> dict[str, Any]:
    leased = task.execution_token_hash is not None
    return {
        "id": str(task.id),
        "status": status.value,
        "headline": task.headline,
        "entity_type": task.entity_type,
        "entity_id": task.entity_id,
        "reason_code": task.reason_code,
        "precheck_hash": task.precheck_hash,
        "diagnostic_bundle": task.diagnostic_bundle,
        "producer_id": task.producer_id,
        "version": task.version,
        "claimed_by": task.claimed_by if held else None,
        "lease_expires_at": rfc3339(task.lease_expires_at) if held else None,
        "decision": task.decision,
        "notes": task.notes,
        "resolution_payload": task.resolution_payload,
        "operator_id": task.operator_id,
        "created_at": rfc3339(task.created_at),
        "updated_at": rfc3339(task.updated_at),
        "resolved_at": rfc3339(task.resolved_at),
        "current_revision": task.current_revision,
        "digest": task.digest,
        "material_paths": task.material_paths,
        "approved_revision": task.approved_revision,
        "approved_digest": task.approved_digest,
        "approval_expires_at": rfc3339(task.approval_expires_at),
        "execution_status": task.execution_status,
        "execution_lease_expires_at": (
            rfc3339(task.execution_lease_expires_at) if leased else None
        ),
        "deadline_at": rfc3339(task.deadline_at) if task.status in ACTIVE_STATUSES else None,
        "escalation_level": task.escalation_level,
        "policy": (task.escalation_policy or {}).get("name"),
        "assigned_group": task.assigned_group,
        "summary": _summary_view(task.summary),
        "editable": task.editable,
        "grant_id": str(task.grant_id) if task.grant_id else None,
        "awaiting": awaiting(task, status),
        "change_request": task.change_request,
    }


def awaiting(task: Task, status: TaskStatus) -> str | None:
    """Whose move it is: ``reviewers`` while the task is in review, ``producer`` while a
    decision that asks for changes waits for the next revision, else nobody (``None``)."""
    if status in ACTIVE_STATUSES:
        return "reviewers"
    if status is TaskStatus.RESOLVED and task.decision in decisions_where("asks_for_changes"):
        return "producer"
    return None


SUMMARY_LABEL = "AI recommendation: a person decides"


def _summary_view(summary: dict[str, Any] | None) -> dict[str, Any] | None:
    """An AI-prepared summary only recommends; it is always shown as such."""
    if summary is None:
        return None
    return {**summary, "label": SUMMARY_LABEL}


@dataclass(frozen=True)
class Visibility:
    """Which tasks a principal may read: the one rule every read path applies (one
    task, lists, the audit trail, long-polls, revisions, the console's pages and inbox).

    ``producer_id``: only the tasks this producer escalated; ``groups``: only unassigned
    tasks and these groups' tasks. The store builds the same rule as SQL
    (:func:`signoff.store.tasks.visible`) for lists; a test holds the two equal.
    """

    producer_id: str | None = None
    groups: tuple[str, ...] | None = None

    def admits(self, task: Task) -> bool:
        if self.producer_id is not None and task.producer_id != self.producer_id:
            return False
        return (
            self.groups is None or task.assigned_group is None or task.assigned_group in self.groups
        )


def visibility(principal: Principal) -> Visibility:
    """Producers read the tasks they escalated; reviewers the unassigned tasks and their
    groups' tasks; supervisors and admins every task."""
    if principal.role is Role.PRODUCER:
        return Visibility(producer_id=principal.principal_id)
    if principal.role is Role.REVIEWER:
        return Visibility(groups=principal.groups)
    return Visibility()


def can_read(principal: Principal, task: Task) -> bool:
    """Whether ``principal`` may read ``task`` (:func:`visibility`). Any other task is
    answered as not found, so its existence does not leak."""
    return visibility(principal).admits(task)


def require_role(principal: Principal, allowed: frozenset[Role], what: str) -> None:
    """Raises ``Forbidden`` (403 ``ERR_FORBIDDEN``) unless the caller's role may ``what``."""
    if principal.role not in allowed:
        roles = ", ".join(sorted(r.value for r in allowed))
        raise Forbidden(f"role {principal.role.value} may not {what} (needs one of: {roles})")


def require_operator(principal: Principal, operator_id: str | None) -> None:
    """An ``operator_id`` in a body must name the caller (403 ``ERR_OPERATOR_MISMATCH``)."""
    if operator_id is not None and operator_id != principal.principal_id:
        raise Forbidden(
            f"operator_id {operator_id!r} is not the caller's principal id",
            error_code=ErrorCode.OPERATOR_MISMATCH,
        )


def same_resolution(
    task: Task,
    *,
    decision: str,
    notes: str | None,
    resolution_payload: Any,
    fields: list[dict[str, str]] | None = None,
) -> bool:
    """Whether a resolve request repeats the recorded one exactly (payload compared in
    canonical form, so key order and whitespace do not matter; the fields a change request
    named, in order)."""
    return (
        task.decision == decision
        and task.notes == notes
        and canonical_json(task.resolution_payload) == canonical_json(resolution_payload)
        and (task.change_request or {}).get("fields", []) == (fields or [])
    )


def refusal_for(
    transition: Transition,
    task: Task | None,
    *,
    task_id: object,
    principal: Principal,
    lease_token_hash: str | None,
    now: datetime,
    decision: Decision | None = None,
    revision: int | None = None,
    digest: str | None = None,
) -> SignoffError:
    """Explain why a conditional update of ``transition`` matched no row.

    Called only *after* the atomic update failed, with the task as it is now, so the
    answer never decides anything: it only names the precise ``error_code``.
    """
    if task is None or not can_read(principal, task):
        return task_not_found(task_id)
    if task.status is TaskStatus.EXPIRED:
        return Conflict(
            f"task {task.id} expired at its final deadline; no decision can be recorded",
            error_code=ErrorCode.TASK_EXPIRED,
        )
    if task.status is TaskStatus.CANCELLED:
        return Conflict(
            f"task {task.id} was cancelled by its producer", error_code=ErrorCode.TASK_CANCELLED
        )
    if transition.by_votes is False and task.approval_rule is not None:
        return Conflict(
            f"task {task.id} has an approval rule: it is decided by votes "
            f"(POST /tasks/{task.id}/votes), with no lease to take",
            error_code=ErrorCode.DECIDED_BY_VOTES,
        )
    if transition.lease in (LeaseRule.CLAIMABLE, LeaseRule.CLAIMABLE_OR_OWN):
        holder = task.claimed_by if task.status is TaskStatus.CLAIMED else None
        return Conflict(
            f"task {task.id} is {task.status.value}"
            + (f" and its lease is held by {holder}" if holder else "")
            + "; it cannot be claimed now",
            error_code=ErrorCode.STATE_CONFLICT,
            extra={"task_status": task.effective_status(now).value},
        )
    held_by_caller = task.claimed_by == principal.principal_id
    if (
        task.status is not TaskStatus.CLAIMED
        or task.lease_token_hash != lease_token_hash
        # A valid token in another principal's hands gets the same answer as a wrong
        # one, so the answer does not confirm that a token is live.
        or not held_by_caller
    ):
        return Conflict(
            "the lease token is not the caller's current lease: the task was claimed by "
            "someone else, released or resolved",
            error_code=ErrorCode.LEASE_LOST,
            extra={"task_status": task.effective_status(now).value},
        )
    if task.lease_lapsed(now):
        return Conflict(
            "the lease has lapsed; renew it explicitly (POST /tasks/{id}/lease/renew) "
            "before resolving",
            error_code=ErrorCode.LEASE_EXPIRED,
            extra={"lease_expired_at": rfc3339(task.lease_expires_at)},
        )
    if decision is not None:
        refusal = decision_refusal(task, principal, decision, revision, digest)
        if refusal is not None:
            return refusal
    return Conflict(
        f"task {task.id} changed concurrently; retry", error_code=ErrorCode.STATE_CONFLICT
    )


def decision_refusal(
    task: Task, principal: Principal, decision: Decision, revision: int | None, digest: str | None
) -> SignoffError | None:
    """What the decision rules say of this decision on ``task`` now: a decision on a
    subject names the revision and digest the reviewer saw, and the principal that
    escalated a task decides nothing on it."""
    rule = rule_for(decision)
    if not task.has_subject:
        if revision is not None or digest is not None:
            return validation_error([FieldError("revision", "this task has no subject")])
        if rule.needs_subject:
            return validation_error(
                [FieldError("decision", f"{decision.value} needs a task with a subject")]
            )
    elif revision is None or digest is None:
        return validation_error(
            [
                FieldError(name, "is required for a task with a subject")
                for name in ("revision", "digest")
            ]
        )
    elif (revision, digest) != (task.current_revision, task.digest):
        return Conflict(
            f"revision {revision} is not the current revision {task.current_revision} "
            "(or its digest differs): review the current one",
            error_code=ErrorCode.STALE_REVISION,
            extra={"current_revision": task.current_revision, "digest": task.digest},
        )
    if not rule.producer_may_decide and task.producer_id == principal.principal_id:
        return self_decision(principal.principal_id, rule)
    return None


def reviewing_elsewhere(task: Task, principal: Principal, now: datetime) -> Conflict | None:
    """A door that claims and decides in one go (a resume link, a chat card) leaves a
    person's own live lease alone: they are reviewing the task in the console, their
    notes in progress there."""
    if task.claimed_by == principal.principal_id and not task.lease_lapsed(now):
        return Conflict(
            "you are reviewing this task in the console: decide there (your lease and notes "
            "are waiting), or release it first",
            error_code=ErrorCode.STATE_CONFLICT,
        )
    return None


def ballot_refusal(
    task: Task,
    principal: Principal,
    decision: Decision,
    revision: int | None,
    digest: str | None,
    stage: int | None = None,
) -> SignoffError | None:
    """Whether ``principal`` may cast this vote on ``task`` (which has an approval rule)
    now, at ``stage`` when the vote names one: the decision rules first
    (:func:`decision_refusal`), then the approval rule's
    (:func:`signoff.domain.ballots.vote_refusal`). Every door asks this."""
    return decision_refusal(task, principal, decision, revision, digest) or vote_refusal(
        rule_from_json(task.approval_rule or {}),
        votes_from_json(task.votes),
        voter=principal.principal_id,
        voter_groups=principal.groups,
        requested_by=task.requested_by,
        stage=stage,
    )


def awaits_vote(task: Task, principal: Principal) -> bool:
    """Whether ``task`` awaits ``principal``'s vote: it is decided by an approval rule, still
    open to votes, the principal may read it and vote on tasks, and a vote by them at the
    stage being voted on, on the current revision, would be accepted now
    (:func:`ballot_refusal`, what every door asks before a vote)."""
    step = transition(Action.VOTE)
    if task.approval_rule is None or task.status not in step.sources:
        return False
    if principal.role not in step.roles or not can_read(principal, task):
        return False
    stage = progress(rule_from_json(task.approval_rule), votes_from_json(task.votes)).stage
    refusal = ballot_refusal(
        task, principal, Decision.APPROVED, task.current_revision, task.digest, stage + 1
    )
    return refusal is None


def self_decision(principal_id: str, rule: DecisionRule) -> Forbidden:
    """The principal that escalated a task may not decide it, under any key or door."""
    return Forbidden(
        f"{principal_id} escalated this task and may not {rule.verb} it",
        error_code=ErrorCode.SELF_APPROVAL,
    )
