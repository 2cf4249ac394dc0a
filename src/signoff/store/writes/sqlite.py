"""SQLite's write path.

The common escalation is one script for this process's SQLite thread
(:func:`signoff.store.lite.escalate`: one trip, one writer turn); the other changes are
SQLAlchemy transactions (:mod:`signoff.store.writes.core`), which explain a refusal
from the task read in the same transaction. A database named by a ``file:`` URI has no
SQLite thread (:attr:`signoff.store.runtime.database.Database.sqlite_file`): its escalations
take the general path.
"""

from __future__ import annotations

import uuid

from signoff.domain.states import Action
from signoff.domain.tasks import Task
from signoff.store import lite
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


class SqliteWrites(TaskWrites):
    def __init__(self, database: WritingDatabase, *, thread: bool) -> None:
        """``thread``: escalate through the database's SQLite thread (it has a file path)."""
        self._database = database
        self._thread = thread

    async def escalate(self, escalation: Escalation) -> EscalationRecord | None:
        if not self._thread:
            return None
        try:
            record = await self._database.sqlite_script(
                lite.escalate(core.escalation_params(escalation))
            )
        except TaskRefused:
            async with self._database.transaction(write=False) as uow:
                refusing = await core.refusing_task(uow.connection, escalation.task)
            raise TaskRefused(refusing, looked=True) from None
        return core.escalation_record(self._database, escalation, record)

    async def claim(
        self, lease: Lease, task_id: uuid.UUID, *, limit: int
    ) -> Task | OverLimit | Refusal:
        return await core.claim(self._database, lease, task_id, limit=limit)

    async def claim_next(
        self, lease: Lease, *, limit: int, entity_type: str | None, reason_code: str | None
    ) -> Task | OverLimit | None:
        return await core.claim_next(
            self._database, lease, limit=limit, entity_type=entity_type, reason_code=reason_code
        )

    async def renew(
        self, lease: Lease, task_id: uuid.UUID, *, limit: int
    ) -> Task | OverLimit | Refusal:
        return await core.change_held_lease(
            self._database, lease, task_id, Action.RENEW, limit=limit
        )

    async def release(self, lease: Lease, task_id: uuid.UUID) -> Task | Refusal:
        outcome = await core.change_held_lease(self._database, lease, task_id, Action.RELEASE)
        assert not isinstance(outcome, OverLimit)  # a release is under no limit
        return outcome

    async def resolve(
        self, lease: Lease, task_id: uuid.UUID, resolution: Resolution
    ) -> Task | Refusal:
        return await core.resolve(self._database, lease, task_id, resolution)
