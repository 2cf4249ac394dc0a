"""Escalation: a producer's request becomes a review task.

The common escalation (no subject, the default policy, no group to notify) is written
in one step by the engine's write path (:mod:`signoff.store.writes`); the others in a
transaction here. Both replay the first response for the same idempotency key and body,
and refuse a task that a unique rule refuses with ``ERR_TASK_CONFLICT``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from signoff import tracing
from signoff.domain.approval_rules import ApprovalFields, ApprovalRule, parse_approval_fields
from signoff.domain.digests import json_digest
from signoff.domain.escalation import EscalationRequest, parse_escalation
from signoff.domain.headline import (
    bind,
    default_headline,
    headline_document,
    parse_headline_fields,
)
from signoff.domain.policies import Policy, with_timeout
from signoff.domain.producer import ProducerFields, parse_producer_fields, refuse_unknown_fields
from signoff.domain.revisions import SubjectInput, parse_subject_fields
from signoff.domain.states import Action, transition
from signoff.domain.tasks import Principal, Task, require_role, task_view
from signoff.domain.waiting import WaitingInput, parse_waiting_fields
from signoff.errors import Conflict, ErrorCode, FieldError, Unprocessable, validation_error
from signoff.services import grants, notifications, policies, votes
from signoff.services.common import dumps, note_transition, record_transition
from signoff.services.context import ServiceContext
from signoff.store import approvals as approval_store
from signoff.store import grants as grant_store
from signoff.store import idempotency, oneshot, trail
from signoff.store import tasks as task_store
from signoff.store.idempotency import StoredIdempotencyKey
from signoff.store.runtime.database import UnitOfWork
from signoff.store.writes import Escalation, TaskRefused
from signoff.store.writes.core import refusing_task


@dataclass(frozen=True)
class EscalationOutcome:
    """The response to an escalation: ``body`` is the exact JSON text to send, replayed
    byte for byte when the same idempotency key and body come again."""

    status_code: int
    body: str
    replayed: bool
    #: The task the body describes, when known without reading the body back.
    task_id: uuid.UUID | None = None


async def escalate(
    ctx: ServiceContext, principal: Principal, body: Any, *, traceparent: str | None = None
) -> EscalationOutcome:
    """Create a review task from a producer's escalation.

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
    # Traced, the task keeps this request's span (a child of the caller's) as its context.
    producer_fields = parse_producer_fields(body, tracing.current_traceparent() or traceparent)
    proposal = parse_subject_fields(body)
    waiting = parse_waiting_fields(body)
    approval = parse_approval_fields(body)
    headline = _headline(body, request, proposal)
    producer_fields = replace(producer_fields, headline=headline)
    if ctx.shield is None:
        return await _escalate(
            ctx, principal, request, producer_fields, proposal, waiting, approval
        )
    entity = (request.entity_type, request.entity_id)
    async with ctx.shield.escalation(
        principal.principal_id, request.idempotency_key, request.fingerprint, entity
    ) as guard:
        if guard.replay is not None:
            return EscalationOutcome(guard.replay.status_code, guard.replay.body, replayed=True)
        outcome = await _escalate(
            ctx, principal, request, producer_fields, proposal, waiting, approval
        )
        await guard.committed(outcome.status_code, outcome.body)
        return outcome


async def _escalate(
    ctx: ServiceContext,
    principal: Principal,
    request: EscalationRequest,
    producer_fields: ProducerFields,
    proposal: SubjectInput | None,
    waiting: WaitingInput,
    approval: ApprovalFields,
) -> EscalationOutcome:
    now = ctx.now()
    if (
        proposal is None
        and waiting.policy_name is None
        and waiting.assigned_group is None
        and waiting.timeout is None
        and approval == ApprovalFields(None, None, None)
    ):
        # The common escalation (no subject, the default policy, no group to notify):
        # key + task + audit + outbox in one step of the engine's write path.
        producer_fields = _policy_headline(
            producer_fields, ctx.settings.default_policy, request, proposal
        )
        outcome = await _escalate_in_one_step(
            ctx, principal, request, waiting, producer_fields, now
        )
        if outcome is not None:
            return outcome
    step = transition(Action.ESCALATE)
    async with ctx.database.transaction() as uow:
        try:
            policy = await policies.policy_for(uow, ctx, waiting.policy_name)
        except Unprocessable:
            # A replay must not depend on the policy still existing.
            stored = await idempotency.find_idempotency_key(
                uow.connection, producer_id=principal.principal_id, key=request.idempotency_key
            )
            if stored is None or stored.expires_at <= now:
                raise
            return await _replay(uow, principal, request.idempotency_key, request.fingerprint)
        if waiting.timeout is not None:
            policy = with_timeout(policy, waiting.timeout)
        producer_fields = _policy_headline(producer_fields, policy, request, proposal)
        rule = approval.rule
        if approval.rule_name is not None:
            rule = await votes.rule_named(uow, approval.rule_name)
        if rule is not None:
            _check_rule_fits(rule, waiting)
        task = _new_task(request, proposal, waiting, policy, principal, now, producer_fields)
        task = replace(
            task,
            approval_rule=rule.as_json() if rule else None,
            requested_by=approval.requested_by,
            votes=[] if rule else None,
        )
        # Remembered approvals: one indexed read, for a task with a subject only.
        grant = await grants.matching(uow, ctx, task, proposal.subject) if proposal else None
        audit = grant is not None and grants.audited(ctx)
        answer = task
        if grant is not None and not audit:
            ttl = task.approval_ttl_seconds or ctx.settings.approval_ttl_seconds
            answer = grants.approved_by(task, grant, ttl)
        view = task_view(answer, now, metadata=True, traceparent=True)
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
        if rule is not None:
            await votes.check_reach(
                uow,
                rule,
                field="approval_rule",
                # A named rule's fields are named as saved: by stage when it has several.
                staged=approval.staged if approval.rule else len(rule.stages) > 1,
                assigned_group=waiting.assigned_group,
                producer=principal.principal_id,
                requested_by=approval.requested_by,
            )
        inserted = await task_store.insert_task(conn, _task_row(task, request.idempotency_key))
        if inserted is None:
            raise _refused(task, await refusing_task(conn, task))
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
        created: dict[str, Any] = {"idempotency_key": request.idempotency_key}
        if audit and grant is not None:  # a grant matched; this one is sampled for a person
            created["grant_sampled_for_audit"] = grant.cited()
        await record_transition(uow, step, inserted, principal, now, created)
        if grant is not None and not audit:
            approved = await grant_store.approve_with(
                conn, inserted.id, grants.approval_values(answer), now
            )
            assert approved is not None  # inserted pending in this transaction
            await grant_store.note_use(conn, grant.id)
            details: dict[str, Any] = {"decision": approved.decision}
            details |= {"revision": approved.current_revision}
            details |= {"digest": approved.digest, "grant": grant.cited()}
            details["grant_id"] = str(grant.id)  # stated at the top of its receipt
            await record_transition(
                uow, transition(Action.APPLY_GRANT), approved, principal, now, details
            )
            await uow.commit()
            return EscalationOutcome(201, response, replayed=False, task_id=task.id)
        targets = [f"group:{inserted.assigned_group}"] if inserted.assigned_group else []
        if rule is not None:
            targets += votes.first_stage_targets(rule)
        if targets:
            # Entering review for a group notifies its approvers with their links.
            await notifications.notify(
                uow, ctx, inserted, kind="review_requested", targets=targets, now=now
            )
        await uow.commit()
    return EscalationOutcome(status_code=201, body=response, replayed=False, task_id=task.id)


def _headline(
    body: dict[str, Any], request: EscalationRequest, proposal: SubjectInput | None
) -> dict[str, Any]:
    """The declared headline bound to the first revision (or the input), else the
    default one. Raises ``ERR_VALIDATION`` or ``ERR_HEADLINE_FIELD`` before any write."""
    spec = parse_headline_fields(body)
    if spec is None:
        return default_headline(request.entity_type, request.entity_id, request.reason_code)
    subject = proposal.subject if proposal else None
    document = headline_document(subject, request.diagnostic_bundle)
    return bind(spec, document, 1 if proposal else None)


def _policy_headline(
    fields: ProducerFields,
    policy: Policy,
    request: EscalationRequest,
    proposal: SubjectInput | None,
) -> ProducerFields:
    """An escalation that declares no headline takes its policy's, when it has one.
    Raises ``ERR_HEADLINE_FIELD`` (before any write) when this task lacks its values."""
    declared = fields.headline is not None and fields.headline.get("template") is not None
    spec = parse_headline_fields({"headline": policy.headline})
    if declared or spec is None:
        return fields
    subject = proposal.subject if proposal else None
    document = headline_document(subject, request.diagnostic_bundle)
    return replace(fields, headline=bind(spec, document, 1 if proposal else None))


def _check_rule_fits(rule: ApprovalRule, waiting: WaitingInput) -> None:
    """A task several groups vote on is not assigned to one group (reviewers see
    unassigned tasks and their own groups' tasks: the others could not vote)."""
    outside = sorted(rule.group_names() - {waiting.assigned_group})
    if waiting.assigned_group is not None and outside:
        raise validation_error(
            [
                FieldError(
                    "assigned_group",
                    f"the approval rule asks {', '.join(outside)} too, who could not see a "
                    "task assigned to one group: leave assigned_group out",
                )
            ]
        )


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
        editable=proposal.editable if proposal else None,
        deadline_at=policy.first_deadline(now, waiting.deadline),
        due_at=policy.first_deadline(now, waiting.deadline),
        escalation_policy=policy.as_json(),
        assigned_group=waiting.assigned_group,
        summary=waiting.summary,
        producer_metadata=producer_fields.metadata,
        traceparent=producer_fields.traceparent,
        headline=producer_fields.headline,
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
) -> EscalationOutcome | None:
    """Take the key, insert the task, its audit and outbox events in one step of the
    engine's write path (:meth:`signoff.store.writes.TaskWrites.escalate`); ``None`` when
    it has none. A live key inserts nothing and the stored response is replayed; a unique
    rule on the task (same id, or an active task for the entity) fails the whole step,
    key included."""
    step = transition(Action.ESCALATE)
    task = _new_task(
        request, None, waiting, ctx.settings.default_policy, principal, now, producer_fields
    )
    view = task_view(task, now, metadata=True)  # what events carry
    response = dumps({"task_id": view["id"], **view, "traceparent": task.traceparent})
    event_id = uuid.uuid4()
    escalation = Escalation(
        task=task,
        principal=principal,
        idempotency_key=request.idempotency_key,
        fingerprint=request.fingerprint,
        response=response,
        now=now,
        expires_at=now + timedelta(seconds=ctx.settings.idempotency_ttl_seconds),
        details=dumps({"idempotency_key": request.idempotency_key}),
        event_id=event_id,
        payload=dumps(trail.envelope(event_id, step.event_type, now, view)),
    )
    try:
        record = await ctx.database.writes.escalate(escalation)
    except TaskRefused as refusal:
        raise _refused(task, refusal.refusing) from None
    if record is None:
        return None
    if record.created:
        note_transition(step, task, principal)
        return EscalationOutcome(status_code=201, body=response, replayed=False, task_id=task.id)
    if record.stored is not None and record.stored.expires_at > now:
        return _replay_stored(record.stored, request.fingerprint)
    # The key's holder committed after this step's snapshot: read it again.
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


def _refused(task: Task, refusing: Mapping[str, Any] | None) -> Conflict:
    """The conflict for ``task``, refused by ``refusing`` (as
    :class:`~signoff.store.writes.TaskRefused` carries it; ``None``: the refusing task is
    gone already, resolved meanwhile). Another producer's task ids are not theirs to
    learn."""
    if refusing is None:
        return _conflict(task, same_id=False)
    return _conflict(
        task,
        same_id=refusing["same_id"],
        existing_id=refusing["id"],
        owner=refusing["producer_id"],
    )


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
