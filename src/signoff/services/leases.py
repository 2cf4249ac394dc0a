"""Leases on review tasks: claim, claim-next, renew and release.

Each change is one conditional write of the engine's write path
(:mod:`signoff.store.writes`) with its events in the same transaction; a refusal is
explained afterwards, from the task as it was read then.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from signoff.domain.states import Action, Transition, transition
from signoff.domain.tasks import (
    Principal,
    Task,
    hash_lease_token,
    new_lease_token,
    refusal_for,
    require_operator,
    require_role,
    visibility,
)
from signoff.errors import claim_limit
from signoff.services.common import note_transition, parse_task_id
from signoff.services.context import ServiceContext
from signoff.store.writes import Lease, OverLimit, Refusal


@dataclass(frozen=True)
class LeaseGrant:
    """A successful claim: the task and the lease token (only ever shown here)."""

    task: Task
    lease_token: str


def lease_for(ctx: ServiceContext, principal: Principal, now: datetime, token_hash: str) -> Lease:
    """The lease ``principal`` acts under at ``now``; a lease taken or renewed now lasts
    ``SIGNOFF_LEASE_SECONDS``."""
    return Lease(
        principal=principal,
        token_hash=token_hash,
        now=now,
        expires_at=now + timedelta(seconds=ctx.settings.lease_seconds),
        groups=visibility(principal).groups,  # a claim takes only a task one may read
    )


async def claim(
    ctx: ServiceContext, principal: Principal, raw_task_id: str, *, operator_id: str | None = None
) -> LeaseGrant:
    """Claim one task under a new lease.

    The current holder claiming again gets a fresh lease token (the old one stops
    working), audited as a claim.

    Raises:
        NotFound: ``ERR_TASK_NOT_FOUND``.
        Conflict: ``ERR_STATE_CONFLICT`` when another principal holds a live lease;
            ``ERR_CLAIM_LIMIT`` when the caller already holds
            ``SIGNOFF_MAX_LEASES_PER_PRINCIPAL`` live leases.
        Forbidden: ``ERR_FORBIDDEN`` (role) or ``ERR_OPERATOR_MISMATCH``.
    """
    step = transition(Action.CLAIM)
    require_role(principal, step.roles, "claim tasks")
    require_operator(principal, operator_id)
    task_id = parse_task_id(raw_task_id)
    token, now = new_lease_token(), ctx.now()
    limit = ctx.settings.max_leases_per_principal
    lease = lease_for(ctx, principal, now, hash_lease_token(token))
    outcome = await ctx.database.writes.claim(lease, task_id, limit=limit)
    if isinstance(outcome, OverLimit):
        raise claim_limit(limit, outcome.live_leases)
    if isinstance(outcome, Refusal):
        raise _refusal(step, outcome, task_id, principal, None, now)
    return _granted(step, outcome, principal, token)


async def claim_next(
    ctx: ServiceContext,
    principal: Principal,
    *,
    entity_type: str | None = None,
    reason_code: str | None = None,
    operator_id: str | None = None,
) -> LeaseGrant | None:
    """Claim the oldest claimable task matching the filters; ``None`` when there is none.

    Raises:
        Conflict: ``ERR_CLAIM_LIMIT`` (see :func:`claim`).
    """
    step = transition(Action.CLAIM)
    require_role(principal, step.roles, "claim tasks")
    require_operator(principal, operator_id)
    token, now = new_lease_token(), ctx.now()
    limit = ctx.settings.max_leases_per_principal
    outcome = await ctx.database.writes.claim_next(
        lease_for(ctx, principal, now, hash_lease_token(token)),
        limit=limit,
        entity_type=entity_type,
        reason_code=reason_code,
    )
    if isinstance(outcome, OverLimit):
        raise claim_limit(limit, outcome.live_leases)
    if outcome is None:
        return None
    return _granted(step, outcome, principal, token)


def _granted(step: Transition, task: Task, principal: Principal, token: str) -> LeaseGrant:
    note_transition(step, task, principal)
    return LeaseGrant(task=task, lease_token=token)


async def renew(
    ctx: ServiceContext, principal: Principal, raw_task_id: str, lease_token: str
) -> Task:
    """Extend the caller's lease by ``SIGNOFF_LEASE_SECONDS`` from now. A lapsed lease may
    be renewed while nobody else has claimed the task (the token is still current); that
    takes a lease up again, so it counts against the claim limit as a claim does.

    Raises:
        Conflict: ``ERR_LEASE_LOST`` when the token is not the caller's current lease;
            ``ERR_CLAIM_LIMIT`` when the lease lapsed and the caller already holds
            ``SIGNOFF_MAX_LEASES_PER_PRINCIPAL`` other live leases.
    """
    return await _change_held_lease(ctx, principal, raw_task_id, lease_token, Action.RENEW)


async def release(
    ctx: ServiceContext, principal: Principal, raw_task_id: str, lease_token: str
) -> Task:
    """Give the task back to the queue (``PENDING_REVIEW``).

    Raises:
        Conflict: ``ERR_LEASE_LOST``.
    """
    return await _change_held_lease(ctx, principal, raw_task_id, lease_token, Action.RELEASE)


async def _change_held_lease(
    ctx: ServiceContext,
    principal: Principal,
    raw_task_id: str,
    lease_token: str,
    action: Action,
) -> Task:
    step = transition(action)
    require_role(principal, step.roles, f"{action.value} leases")
    task_id = parse_task_id(raw_task_id)
    token_hash, now = hash_lease_token(lease_token), ctx.now()
    lease = lease_for(ctx, principal, now, token_hash)
    writes = ctx.database.writes
    limit = ctx.settings.max_leases_per_principal
    outcome: Task | OverLimit | Refusal
    if action is Action.RENEW:
        outcome = await writes.renew(lease, task_id, limit=limit)
    else:
        outcome = await writes.release(lease, task_id)
    if isinstance(outcome, OverLimit):
        raise claim_limit(limit, outcome.live_leases)
    if isinstance(outcome, Refusal):
        raise _refusal(step, outcome, task_id, principal, token_hash, now)
    note_transition(step, outcome, principal)
    return outcome


def _refusal(
    step: Transition,
    refusal: Refusal,
    task_id: object,
    principal: Principal,
    token_hash: str | None,
    now: datetime,
) -> Exception:
    return refusal_for(
        step,
        refusal.current,
        task_id=task_id,
        principal=principal,
        lease_token_hash=token_hash,
        now=now,
    )
