"""Use cases on review tasks. The only code that commits.

Each state change is one conditional update (see :mod:`signoff.store.tasks`) followed,
in the same transaction, by its audit event and (for changes source systems care about)
its outbox event, both written by :func:`_record`.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from signoff.domain.clock import rfc3339
from signoff.domain.digests import json_digest
from signoff.domain.escalation import EscalationRequest, parse_escalation
from signoff.domain.policies import Policy
from signoff.domain.producer import ProducerFields, parse_producer_fields, refuse_unknown_fields
from signoff.domain.revisions import SubjectInput, parse_subject_fields
from signoff.domain.states import (
    Action,
    Decision,
    ExecutionStatus,
    Role,
    TaskStatus,
    Transition,
    transition,
)
from signoff.domain.tasks import (
    Principal,
    Task,
    hash_lease_token,
    new_lease_token,
    refusal_for,
    require_operator,
    require_role,
    same_resolution,
    task_view,
)
from signoff.domain.waiting import WaitingInput, parse_waiting_fields
from signoff.errors import (
    Conflict,
    ErrorCode,
    FieldError,
    Unprocessable,
    claim_limit,
    validation_error,
)
from signoff.services import waiting as waiting_service
from signoff.services.common import (
    dumps,
    get_task,
    note_transition,
    parse_task_id,
    record_transition,
)
from signoff.services.context import ServiceContext
from signoff.store import approvals as approval_store
from signoff.store import grouped, idempotency, lite, oneshot, trail
from signoff.store import tasks as task_store
from signoff.store.database import UnitOfWork
from signoff.store.idempotency import StoredIdempotencyKey

log = structlog.get_logger("signoff.tasks")

MAX_PAGE_SIZE = 200


@dataclass(frozen=True)
class EscalationOutcome:
    """The response to an escalation: ``body`` is the exact JSON text to send, replayed
    byte for byte when the same idempotency key and body come again."""

    status_code: int
    body: str
    replayed: bool
    #: The task the body describes, when known without reading the body back.
    task_id: uuid.UUID | None = None


@dataclass(frozen=True)
class LeaseGrant:
    """A successful claim: the task and the lease token (only ever shown here)."""

    task: Task
    lease_token: str


@dataclass(frozen=True)
class TaskPage:
    tasks: Sequence[Task]
    next_cursor: str | None


async def escalate(
    ctx: ServiceContext, principal: Principal, body: Any, *, traceparent: str | None = None
) -> EscalationOutcome:
    """Create a review task from a producer's escalation (seed ``000``).

    ``body`` is the parsed JSON request. Returns the 201 response, or the replay of the
    first response for the same idempotency key and body within the TTL.

    Raises:
        Forbidden: the caller is not a producer.
        Unprocessable: any rule of :func:`signoff.domain.escalation.parse_escalation`;
            ``ERR_IDEMPOTENCY_KEY_REUSED`` for the same key with another body.
        Conflict: ``ERR_TASK_CONFLICT`` (with ``task_id``) when the escalation id exists
            or the entity already has an active task.
    """
    step = transition(Action.ESCALATE)
    require_role(principal, step.roles, "escalate")
    request = parse_escalation(body)
    refuse_unknown_fields(body)
    producer_fields = parse_producer_fields(body, traceparent)
    proposal = parse_subject_fields(body)
    waiting = parse_waiting_fields(body)
    if ctx.shield is None:
        return await _escalate(ctx, principal, request, producer_fields, proposal, waiting)
    entity = (request.entity_type, request.entity_id)
    async with ctx.shield.escalation(
        principal.principal_id, request.idempotency_key, request.fingerprint, entity
    ) as guard:
        if guard.replay is not None:
            return EscalationOutcome(guard.replay.status_code, guard.replay.body, replayed=True)
        outcome = await _escalate(ctx, principal, request, producer_fields, proposal, waiting)
        await guard.committed(outcome.status_code, outcome.body)
        return outcome


async def _escalate(
    ctx: ServiceContext,
    principal: Principal,
    request: EscalationRequest,
    producer_fields: ProducerFields,
    proposal: SubjectInput | None,
    waiting: WaitingInput,
) -> EscalationOutcome:
    step = transition(Action.ESCALATE)
    now = ctx.now()
    if (
        (ctx.database.dialect == "postgresql" or ctx.database.sqlite_file is not None)
        and proposal is None
        and waiting.policy_name is None
        and waiting.assigned_group is None
    ):
        # The common escalation (no subject, the default policy, no group to notify):
        # key + task + audit + outbox in one statement (PostgreSQL) or one trip to the
        # SQLite thread.
        return await _escalate_in_one_step(ctx, principal, request, waiting, producer_fields, now)
    async with ctx.database.transaction() as uow:
        try:
            policy = await waiting_service.policy_for(uow, ctx, waiting.policy_name)
        except Unprocessable:
            # A replay must not depend on the policy still existing.
            stored = await idempotency.find_idempotency_key(
                uow.connection, producer_id=principal.principal_id, key=request.idempotency_key
            )
            if stored is None or stored.expires_at <= now:
                raise
            return await _replay(uow, principal, request.idempotency_key, request.fingerprint)
        task = _new_task(request, proposal, waiting, policy, principal, now, producer_fields)
        view = task_view(task, now, metadata=True, traceparent=True)
        response = dumps({"task_id": str(task.id), **view})
        conn = uow.connection
        fresh = await idempotency.claim_idempotency_key(
            conn,
            producer_id=principal.principal_id,
            key=request.idempotency_key,
            fingerprint=request.fingerprint,
            task_id=task.id,
            response_status=201,
            response_body=response,
            now=now,
            expires_at=now + timedelta(seconds=ctx.settings.idempotency_ttl_seconds),
        )
        if not fresh:
            return await _replay(uow, principal, request.idempotency_key, request.fingerprint)
        inserted = await task_store.insert_task(conn, _task_row(task, request.idempotency_key))
        if inserted is None:
            raise await _task_conflict(uow, task)
        if proposal is not None:
            await approval_store.insert_revision(
                conn,
                task_id=task.id,
                revision=1,
                subject=proposal.subject,
                digest=str(task.digest),
                source_revisions=proposal.source_revisions,
                created_by=principal.principal_id,
                now=now,
            )
        await record_transition(
            uow, step, inserted, principal, now, {"idempotency_key": request.idempotency_key}
        )
        if inserted.assigned_group:
            # Seed 004: entering review for a group notifies its approvers with their links.
            targets = [f"group:{inserted.assigned_group}"]
            await waiting_service.notify(
                uow, ctx, inserted, kind="review_requested", targets=targets, now=now
            )
        await uow.commit()
    return EscalationOutcome(status_code=201, body=response, replayed=False, task_id=task.id)


def _new_task(
    request: EscalationRequest,
    proposal: SubjectInput | None,
    waiting: WaitingInput,
    policy: Policy,
    principal: Principal,
    now: datetime,
    producer_fields: ProducerFields,
) -> Task:
    return Task(
        id=request.escalation_id,
        status=transition(Action.ESCALATE).status_after(),
        entity_type=request.entity_type,
        entity_id=request.entity_id,
        reason_code=request.reason_code,
        precheck_hash=request.precheck_hash,
        diagnostic_bundle=request.diagnostic_bundle,
        producer_id=principal.principal_id,
        version=1,
        claimed_by=None,
        lease_token_hash=None,
        lease_expires_at=None,
        decision=None,
        notes=None,
        resolution_payload=None,
        operator_id=None,
        created_at=now,
        updated_at=now,
        resolved_at=None,
        current_revision=1 if proposal else None,
        digest=json_digest(proposal.subject) if proposal else None,
        material_paths=proposal.material_paths if proposal else None,
        approval_ttl_seconds=proposal.approval_ttl_seconds if proposal else None,
        deadline_at=policy.first_deadline(now, waiting.deadline),
        escalation_policy=policy.as_json(),
        assigned_group=waiting.assigned_group,
        summary=waiting.summary,
        producer_metadata=producer_fields.metadata,
        traceparent=producer_fields.traceparent,
    )


def _task_row(task: Task, idempotency_key: str) -> dict[str, Any]:
    return oneshot.task_values(task, idempotency_key)


async def _escalate_in_one_step(
    ctx: ServiceContext,
    principal: Principal,
    request: EscalationRequest,
    waiting: WaitingInput,
    producer_fields: ProducerFields,
    now: datetime,
) -> EscalationOutcome:
    """Take the key, insert the task, its audit and outbox events in one step: one
    statement on PostgreSQL (:data:`signoff.store.oneshot.ESCALATE`, committed in a group
    with the escalations that wait alongside: :mod:`signoff.store.grouped`), one trip to
    the SQLite thread (:func:`signoff.store.lite.escalate`). A live key inserts nothing and
    the stored response is replayed; a unique rule on the task (same id, or an active task
    for the entity) fails the whole step, key included."""
    step = transition(Action.ESCALATE)
    task = _new_task(
        request, None, waiting, ctx.settings.default_policy, principal, now, producer_fields
    )
    view = task_view(task, now, metadata=True)  # what events carry
    response = dumps({"task_id": view["id"], **view, "traceparent": task.traceparent})
    event_id = uuid.uuid4()
    values = oneshot.task_params(task, request.idempotency_key)
    values |= {
        "actor": principal.principal_id,
        "actor_role": principal.role.value,
        "key": request.idempotency_key,
        "fingerprint": request.fingerprint,
        "response": response,
        "now": now,
        "expires_at": now + timedelta(seconds=ctx.settings.idempotency_ttl_seconds),
        "details": dumps({"idempotency_key": request.idempotency_key}),
        "event_id": event_id,
        "payload": dumps(trail.envelope(event_id, step.event_type, now, view)),
    }
    try:
        if ctx.database.dialect == "postgresql":
            record = await ctx.database.escalations.escalate(values)
        else:
            record = await ctx.database.sqlite_script(lite.escalate(values))
    except grouped.TaskRefused as refusal:
        refused = refusal.refusing
        if not refusal.looked:  # written alone: ask which task refused it
            refused = await oneshot.run(
                ctx.database,
                oneshot.TASK_CONFLICT,
                {"t_id": task.id, "entity_type": task.entity_type, "entity_id": task.entity_id},
            )
        if refused is None:  # the refusing task is gone already (resolved meanwhile)
            raise _conflict(task, same_id=False) from None
        raise _conflict(
            task,
            same_id=refused["same_id"],
            existing_id=refused["id"],
            owner=refused["producer_id"],
        ) from None
    except lite.TaskRefused:
        async with ctx.database.transaction(write=False) as uow:
            raise await _task_conflict(uow, task) from None
    if record["created"]:
        note_transition(step, task, principal)
        ctx.database.after_commit([task.id], wrote_outbox=True)
        return EscalationOutcome(status_code=201, body=response, replayed=False, task_id=task.id)
    if record["request_fingerprint"] is not None and record["expires_at"] > now:
        stored = StoredIdempotencyKey(
            request_fingerprint=record["request_fingerprint"],
            task_id=record["task_id"],
            response_status=record["response_status"],
            response_body=record["response_body"],
            expires_at=record["expires_at"],
        )
        return _replay_stored(stored, request.fingerprint)
    # The key's holder committed after this statement's snapshot: read it again.
    async with ctx.database.transaction(write=False) as uow:
        return await _replay(uow, principal, request.idempotency_key, request.fingerprint)


async def _replay(
    uow: UnitOfWork, principal: Principal, key: str, fingerprint: str
) -> EscalationOutcome:
    stored = await idempotency.find_idempotency_key(
        uow.connection, producer_id=principal.principal_id, key=key
    )
    if stored is None:  # the holder's row vanished between our two statements
        raise Conflict(
            "this idempotency key is being used by a concurrent request; retry",
            error_code=ErrorCode.IDEMPOTENCY_KEY_IN_USE,
        )
    return _replay_stored(stored, fingerprint)


def _replay_stored(stored: StoredIdempotencyKey, fingerprint: str) -> EscalationOutcome:
    if stored.request_fingerprint != fingerprint:
        raise Unprocessable(
            "this idempotency key was already used with a different request body",
            error_code=ErrorCode.IDEMPOTENCY_KEY_REUSED,
            errors=[FieldError("idempotency_key", "already used with a different body")],
            extra={"task_id": str(stored.task_id)},
        )
    return EscalationOutcome(
        stored.response_status, stored.response_body, replayed=True, task_id=stored.task_id
    )


async def _task_conflict(uow: UnitOfWork, task: Task) -> Conflict:
    """Name the existing task only when the caller escalated it: another producer's task
    ids are not theirs to learn."""
    existing = await task_store.find_task(uow.connection, task.id)
    if existing is not None:
        return _conflict(task, same_id=True, existing_id=existing.id, owner=existing.producer_id)
    existing = await task_store.find_active_task_for_entity(
        uow.connection, task.entity_type, task.entity_id
    )
    if existing is None:
        return _conflict(task, same_id=False)
    return _conflict(task, same_id=False, existing_id=existing.id, owner=existing.producer_id)


def _conflict(
    task: Task, *, same_id: bool, existing_id: uuid.UUID | None = None, owner: str | None = None
) -> Conflict:
    """``ERR_TASK_CONFLICT`` for ``task``, refused by the task ``existing_id`` of producer
    ``owner`` (``same_id``: it has the escalation's id; else it is the entity's active
    task). The answer names it only when it is the caller's own."""
    if same_id:
        message = f"escalation {task.id} already exists"
    else:
        message = f"an active task for {task.entity_type}/{task.entity_id} is already in the queue"
    mine = existing_id is not None and owner == task.producer_id
    return Conflict(
        message,
        error_code=ErrorCode.TASK_CONFLICT,
        extra={"task_id": str(existing_id)} if mine else {},
    )


def _groups_of(principal: Principal) -> tuple[str, ...] | None:
    """Reviewers are limited to their groups' tasks (and unassigned ones); supervisors not."""
    return principal.groups if principal.role is Role.REVIEWER else None


async def claim(
    ctx: ServiceContext, principal: Principal, raw_task_id: str, *, operator_id: str | None = None
) -> LeaseGrant:
    """Claim one task under a new lease (seed ``000`` section 3).

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
    if ctx.database.dialect == "postgresql":
        record = await oneshot.run(
            ctx.database,
            oneshot.CLAIM,
            _lease_values(ctx, principal, now, token_hash=hash_lease_token(token))
            | {"task_id": task_id, "limit": limit, "groups": _groups_list(principal)},
        )
        if record["id"] is None:
            if record["live_leases"] >= limit:
                raise claim_limit(limit, record["live_leases"])
            async with ctx.database.transaction(write=False) as uow:
                raise await _refusal(uow, step, task_id, principal, None, now)
        return _granted(ctx, step, record, principal, token)
    async with ctx.database.transaction() as uow:
        live = await task_store.count_live_leases(
            uow.connection, principal.principal_id, now=now, exclude=task_id
        )
        if live >= limit:
            raise claim_limit(limit, live)
        task = await task_store.claim_task(
            uow.connection,
            step,
            task_id,
            operator_id=principal.principal_id,
            lease_token_hash=hash_lease_token(token),
            now=now,
            lease_expires_at=now + timedelta(seconds=ctx.settings.lease_seconds),
            groups=_groups_of(principal),
        )
        if task is None:
            raise await _refusal(uow, step, task_id, principal, None, now)
        await record_transition(uow, step, task, principal, now)
        await uow.commit()
    return LeaseGrant(task=task, lease_token=token)


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
    if ctx.database.dialect == "postgresql":
        groups = _groups_list(principal)
        record = await oneshot.run(
            ctx.database,
            oneshot.claim_next_statement(
                entity_type=entity_type, reason_code=reason_code, groups=groups
            ),
            _lease_values(ctx, principal, now, token_hash=hash_lease_token(token))
            | {
                "limit": limit,
                "groups": groups,
                "entity_type": entity_type,
                "reason_code": reason_code,
            },
        )
        if record["id"] is None:
            if record["live_leases"] >= limit:
                raise claim_limit(limit, record["live_leases"])
            return None
        return _granted(ctx, step, record, principal, token)
    async with ctx.database.transaction() as uow:
        live = await task_store.count_live_leases(uow.connection, principal.principal_id, now=now)
        if live >= limit:
            raise claim_limit(limit, live)
        task = await task_store.claim_next_claimable(
            uow.connection,
            step,
            operator_id=principal.principal_id,
            lease_token_hash=hash_lease_token(token),
            now=now,
            lease_expires_at=now + timedelta(seconds=ctx.settings.lease_seconds),
            entity_type=entity_type,
            reason_code=reason_code,
            groups=_groups_of(principal),
        )
        if task is None:
            return None
        await record_transition(uow, step, task, principal, now)
        await uow.commit()
    return LeaseGrant(task=task, lease_token=token)


def _groups_list(principal: Principal) -> list[str] | None:
    groups = _groups_of(principal)
    return None if groups is None else list(groups)


def _lease_values(
    ctx: ServiceContext, principal: Principal, now: datetime, *, token_hash: str
) -> dict[str, Any]:
    """The parameters every single-statement lease change binds (PostgreSQL)."""
    return {
        "actor": principal.principal_id,
        "actor_role": principal.role.value,
        "now": now,
        "now_text": rfc3339(now),
        "event_id": uuid.uuid4(),
        "token_hash": token_hash,
        "lease_expires_at": now + timedelta(seconds=ctx.settings.lease_seconds),
    }


def _changed(ctx: ServiceContext, step: Transition, record: Any, principal: Principal) -> Task:
    """After a single-statement change committed: the task, the metric, the log line,
    and this process's dispatcher woken when an outbox event was written."""
    task = oneshot.task_from_record(record)
    note_transition(step, task, principal)
    ctx.database.after_commit([task.id], wrote_outbox=step.publish)
    return task


def _granted(
    ctx: ServiceContext, step: Transition, record: Any, principal: Principal, token: str
) -> LeaseGrant:
    return LeaseGrant(task=_changed(ctx, step, record, principal), lease_token=token)


async def renew(
    ctx: ServiceContext, principal: Principal, raw_task_id: str, lease_token: str
) -> Task:
    """Extend the caller's lease by ``SIGNOFF_LEASE_SECONDS`` from now. A lapsed lease may
    be renewed while nobody else has claimed the task (the token is still current).

    Raises:
        Conflict: ``ERR_LEASE_LOST`` when the token is not the caller's current lease.
    """
    lease = timedelta(seconds=ctx.settings.lease_seconds)
    return await _change_held_lease(
        ctx,
        principal,
        raw_task_id,
        lease_token,
        Action.RENEW,
        lambda now: {"lease_expires_at": now + lease},
    )


async def release(
    ctx: ServiceContext, principal: Principal, raw_task_id: str, lease_token: str
) -> Task:
    """Give the task back to the queue (``PENDING_REVIEW``).

    Raises:
        Conflict: ``ERR_LEASE_LOST``.
    """
    return await _change_held_lease(
        ctx,
        principal,
        raw_task_id,
        lease_token,
        Action.RELEASE,
        lambda _now: dict(task_store.LEASE_CLEARED),
    )


async def _change_held_lease(
    ctx: ServiceContext,
    principal: Principal,
    raw_task_id: str,
    lease_token: str,
    action: Action,
    values: Callable[[datetime], dict[str, Any]],
) -> Task:
    step = transition(action)
    require_role(principal, step.roles, f"{action.value} leases")
    task_id = parse_task_id(raw_task_id)
    token_hash, now = hash_lease_token(lease_token), ctx.now()
    if ctx.database.dialect == "postgresql":
        lease = _lease_values(ctx, principal, now, token_hash=token_hash)
        changes = values(now)
        details = (
            {"lease_expires_at": rfc3339(changes["lease_expires_at"])}
            if changes.get("lease_expires_at")
            else {}
        )
        lease |= {"task_id": task_id, "details": dumps(details)}
        if "lease_expires_at" in changes:
            lease["lease_expires_at"] = changes["lease_expires_at"]
        statement = oneshot.RENEW if action is Action.RENEW else oneshot.RELEASE
        record = await oneshot.run(ctx.database, statement, lease)
        if record is None:
            async with ctx.database.transaction(write=False) as uow:
                raise await _refusal(uow, step, task_id, principal, token_hash, now)
        return _changed(ctx, step, record, principal)
    async with ctx.database.transaction() as uow:
        task = await task_store.update_held_task(
            uow.connection,
            step,
            task_id,
            holder=principal.principal_id,
            lease_token_hash=token_hash,
            now=now,
            values=values(now) | ({"status": step.target.value} if step.target else {}),
        )
        if task is None:
            raise await _refusal(uow, step, task_id, principal, token_hash, now)
        details = (
            {"lease_expires_at": rfc3339(task.lease_expires_at)} if task.lease_expires_at else {}
        )
        await record_transition(uow, step, task, principal, now, details)
        await uow.commit()
    return task


async def resolve(
    ctx: ServiceContext,
    principal: Principal,
    raw_task_id: str,
    lease_token: str,
    *,
    decision: Decision,
    notes: str | None,
    resolution_payload: Any,
    operator_id: str | None = None,
    revision: int | None = None,
    digest: str | None = None,
) -> Task:
    """Record the decision under a live lease (seed ``000`` section 5 and closing rule).

    On a task with a subject the decision names the ``revision`` and ``digest`` reviewed
    (seed ``003``); an approval is bound to them and to the approver's key, and expires
    after the task's ``approval_ttl_seconds`` (or ``SIGNOFF_APPROVAL_TTL_SECONDS``).
    Repeating the identical successful resolve with the same token returns the recorded
    task and writes nothing.

    Raises:
        Conflict: ``ERR_LEASE_LOST`` (token not current), ``ERR_LEASE_EXPIRED`` (the
            caller's lease lapsed: renew first), ``ERR_STALE_REVISION``.
        Forbidden: ``ERR_OPERATOR_MISMATCH``, ``ERR_SELF_APPROVAL``.
        Unprocessable: revision/digest missing on a task with a subject.
    """
    step = transition(Action.RESOLVE)
    require_role(principal, step.roles, "resolve tasks")
    require_operator(principal, operator_id)
    task_id = parse_task_id(raw_task_id)
    token_hash, now = hash_lease_token(lease_token), ctx.now()
    if ctx.database.dialect == "postgresql":
        record = await oneshot.run(
            ctx.database,
            oneshot.RESOLVE,
            _lease_values(ctx, principal, now, token_hash=token_hash)
            | {
                "task_id": task_id,
                "decision": decision.value,
                "notes": notes,
                "payload": oneshot.encode_json(resolution_payload),
                "key_id": principal.key_id,
                "default_ttl": ctx.settings.approval_ttl_seconds,
                "revision": revision,
                "digest": digest,
            },
        )
        if record is not None:
            return _changed(ctx, step, record, principal)
    async with ctx.database.transaction() as uow:
        task = await task_store.resolve_task(
            uow.connection,
            step,
            task_id,
            holder=principal.principal_id,
            holder_key_id=principal.key_id,
            lease_token_hash=token_hash,
            now=now,
            decision=decision,
            notes=notes,
            resolution_payload=resolution_payload,
            revision=revision,
            digest=digest,
        )
        if task is None:
            current = await task_store.find_task(uow.connection, task_id)
            if (
                current is not None
                and current.status is TaskStatus.RESOLVED
                and current.lease_token_hash == token_hash
                and current.operator_id == principal.principal_id
                and same_resolution(
                    current,
                    decision=decision.value,
                    notes=notes,
                    resolution_payload=resolution_payload,
                )
            ):
                return current
            raise refusal_for(
                step,
                current,
                task_id=task_id,
                principal=principal,
                lease_token_hash=token_hash,
                now=now,
                decision=decision,
                revision=revision,
                digest=digest,
            )
        if decision is Decision.APPROVED and task.has_subject:
            ttl = task.approval_ttl_seconds or ctx.settings.approval_ttl_seconds
            if ttl is not None:
                expires_at = now + timedelta(seconds=ttl)
                await approval_store.set_approval_expiry(uow.connection, task.id, expires_at)
                task = replace(task, approval_expires_at=expires_at)
        details: dict[str, Any] = {"decision": decision.value}
        if task.has_subject:
            details |= {"revision": task.current_revision, "digest": task.digest}
        await record_transition(uow, step, task, principal, now, details)
        await uow.commit()
    return task


async def _refusal(
    uow: UnitOfWork,
    step: Transition,
    task_id: uuid.UUID,
    principal: Principal,
    token_hash: str | None,
    now: datetime,
) -> Exception:
    current = await task_store.find_task(uow.connection, task_id)
    return refusal_for(
        step, current, task_id=task_id, principal=principal, lease_token_hash=token_hash, now=now
    )


async def task_audit_trail(
    ctx: ServiceContext, principal: Principal, raw_task_id: str
) -> Sequence[dict[str, Any]]:
    """The append-only audit trail of a task the caller may read, oldest first."""
    task = await get_task(ctx, principal, raw_task_id)
    async with ctx.database.transaction(write=False) as uow:
        return await trail.audit_events_for_task(uow.connection, task.id)


def _encode_cursor(task: Task) -> str:
    raw = dumps([task.created_at.isoformat(), str(task.id)]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, task_id = json.loads(raw)
        moment = datetime.fromisoformat(created_at)
        if moment.tzinfo is None:
            raise ValueError("naive")
        return moment.astimezone(UTC), uuid.UUID(task_id)
    except (ValueError, TypeError, AttributeError, OverflowError, binascii.Error):
        # Anything a tampered cursor can raise; JSON and Unicode errors are ValueErrors.
        raise validation_error(
            [FieldError("cursor", "is not a cursor this service issued")]
        ) from None


async def list_tasks(
    ctx: ServiceContext,
    principal: Principal,
    *,
    limit: int = 50,
    cursor: str | None = None,
    status: TaskStatus | None = None,
    entity_type: str | None = None,
    entity_id: str | None = None,
    reason_code: str | None = None,
    execution_status: ExecutionStatus | None = None,
    claimed_by: str | None = None,
    assigned_group: str | None = None,
) -> TaskPage:
    """A page of tasks in creation order. Producers see only their own. ``claimed_by``
    names a live claim's holder (``me``: the caller)."""
    if not 1 <= limit <= MAX_PAGE_SIZE:
        raise validation_error([FieldError("limit", f"must be between 1 and {MAX_PAGE_SIZE}")])
    if claimed_by == "me":
        claimed_by = principal.principal_id
    after = _decode_cursor(cursor) if cursor else None
    now = ctx.now()
    async with ctx.database.transaction(write=False) as uow:
        tasks = await task_store.list_tasks(
            uow.connection,
            now=now,
            limit=limit + 1,
            after=after,
            status=status,
            entity_type=entity_type,
            entity_id=entity_id,
            reason_code=reason_code,
            producer_id=principal.principal_id if principal.role is Role.PRODUCER else None,
            execution_status=execution_status.value if execution_status else None,
            claimed_by=claimed_by,
            assigned_group=assigned_group,
        )
    page = list(tasks[:limit])
    next_cursor = _encode_cursor(page[-1]) if len(tasks) > limit else None
    return TaskPage(tasks=page, next_cursor=next_cursor)
