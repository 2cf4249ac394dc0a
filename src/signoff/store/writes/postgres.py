"""PostgreSQL's write path: each state change is one round trip.

Each change is one named statement of :mod:`signoff.store.oneshot` (the conditional
change with its audit and outbox events), run as a whole transaction on the hot path's
pool; escalations are committed in groups (:mod:`signoff.store.runtime.grouped`). A refused
change is explained from the task read afterwards; a decision the statement refused
goes through the general transaction (:func:`signoff.store.writes.core.resolve`), which
reads the task in the same transaction, so an identical repeat is recognised.
"""

from __future__ import annotations

import uuid
from typing import Any

from signoff.domain.clock import rfc3339
from signoff.domain.json_output import compact_json
from signoff.domain.states import Action, transition
from signoff.domain.tasks import Task
from signoff.store import oneshot
from signoff.store.protocols import WritingDatabase
from signoff.store.writes import (
    Escalation,
    EscalationRecord,
    Lease,
    OverLimit,
    Refusal,
    Resolution,
    TaskRefused,
    TaskWrites,
    core,
)


class PostgresWrites(TaskWrites):
    def __init__(self, database: WritingDatabase) -> None:
        self._database = database

    async def escalate(self, escalation: Escalation) -> EscalationRecord:
        try:
            record = await self._database.escalations.escalate(core.escalation_params(escalation))
        except TaskRefused as refusal:
            if refusal.looked:
                raise
            # Written alone: ask which task refused it.
            task = escalation.task
            refusing = await oneshot.run(
                self._database,
                oneshot.TASK_CONFLICT,
                {"t_id": task.id, "entity_type": task.entity_type, "entity_id": task.entity_id},
            )
            raise TaskRefused(refusing, looked=True) from None
        return core.escalation_record(self._database, escalation, record)

    async def claim(
        self, lease: Lease, task_id: uuid.UUID, *, limit: int
    ) -> Task | OverLimit | Refusal:
        record = await oneshot.run(
            self._database,
            oneshot.CLAIM,
            _lease_values(lease)
            | {"task_id": task_id, "limit": limit, "groups": _groups_list(lease)},
        )
        if record["id"] is None:
            if record["live_leases"] >= limit:
                return OverLimit(record["live_leases"])
            return await core.current_task(self._database, task_id)
        return self._changed(record, Action.CLAIM)

    async def claim_next(
        self, lease: Lease, *, limit: int, entity_type: str | None, reason_code: str | None
    ) -> Task | OverLimit | None:
        groups = _groups_list(lease)
        record = await oneshot.run(
            self._database,
            oneshot.claim_next_statement(
                entity_type=entity_type, reason_code=reason_code, groups=groups
            ),
            _lease_values(lease)
            | {
                "limit": limit,
                "groups": groups,
                "entity_type": entity_type,
                "reason_code": reason_code,
            },
        )
        if record["id"] is None:
            if record["live_leases"] >= limit:
                return OverLimit(record["live_leases"])
            return None
        return self._changed(record, Action.CLAIM)

    async def renew(
        self, lease: Lease, task_id: uuid.UUID, *, limit: int
    ) -> Task | OverLimit | Refusal:
        details = {"lease_expires_at": rfc3339(lease.expires_at)}
        values = _lease_values(lease) | {
            "task_id": task_id,
            "details": compact_json(details),
            "limit": limit,
        }
        record = await oneshot.run(self._database, oneshot.RENEW, values)
        if record is None:
            return await core.renew_refused(self._database, lease, task_id, limit=limit)
        return self._changed(record, Action.RENEW)

    async def release(self, lease: Lease, task_id: uuid.UUID) -> Task | Refusal:
        values = _lease_values(lease) | {"task_id": task_id, "details": compact_json({})}
        record = await oneshot.run(self._database, oneshot.RELEASE, values)
        if record is None:
            return await core.current_task(self._database, task_id)
        return self._changed(record, Action.RELEASE)

    async def resolve(
        self, lease: Lease, task_id: uuid.UUID, resolution: Resolution
    ) -> Task | Refusal:
        if not resolution.plain:
            # An edit writes a revision, a remembered approval a grant, named fields
            # details of their own: one transaction (the same as SQLite's).
            return await core.resolve(self._database, lease, task_id, resolution)
        record = await oneshot.run(
            self._database,
            oneshot.RESOLVE,
            _lease_values(lease)
            | {
                "task_id": task_id,
                "decision": resolution.decision.value,
                "notes": resolution.notes,
                "payload": oneshot.encode_json(resolution.resolution_payload),
                "change_request": oneshot.encode_json(resolution.change_request),
                "key_id": lease.principal.key_id,
                "default_ttl": resolution.approval_ttl_seconds,
                "revision": resolution.revision,
                "digest": resolution.digest,
                "door": resolution.door,
            },
        )
        if record is not None:
            return self._changed(record, Action.RESOLVE)
        return await core.resolve(self._database, lease, task_id, resolution)

    def _changed(self, record: Any, action: Action) -> Task:
        """After a single-statement change committed: the task, and this process's
        dispatcher woken when an outbox event was written."""
        task = oneshot.task_from_record(record)
        self._database.after_commit([task.id], wrote_outbox=transition(action).publish)
        return task


def _groups_list(lease: Lease) -> list[str] | None:
    return None if lease.groups is None else list(lease.groups)


def _lease_values(lease: Lease) -> dict[str, Any]:
    """The parameters every single-statement lease change binds."""
    return {
        "actor": lease.principal.principal_id,
        "actor_role": lease.principal.role.value,
        "now": lease.now,
        "now_text": rfc3339(lease.now),
        "event_id": uuid.uuid4(),
        "token_hash": lease.token_hash,
        "lease_expires_at": lease.expires_at,
    }
