"""The sweeper (seed 004's ``sweep_timeouts``): applies due escalation levels.

Any number may run. On PostgreSQL each batch locks its rows ``SKIP LOCKED``, so sweepers
split the due tasks; everywhere, each level is one conditional update on the task's
current level, so it is applied exactly once. A batch is one transaction: a sweeper
killed mid-batch commits nothing, and the next sweep applies those levels (once).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog
from sqlalchemy.exc import DBAPIError

from signoff.domain.tasks import Task
from signoff.services import waiting
from signoff.services.context import ServiceContext
from signoff.store import waiting as store
from signoff.store.idempotency import purge_expired_idempotency_keys

log = structlog.get_logger("signoff.sweeper")


class Sweeper:
    """``after_each`` is a test seam called after each applied level (inside the batch's
    transaction): raising there simulates a crash mid-batch."""

    def __init__(
        self, context: ServiceContext, *, after_each: Callable[[Task], None] | None = None
    ) -> None:
        self.context = context
        self._after_each = after_each

    async def sweep_once(self) -> int:
        """Apply every due level (one batch) and purge a batch of expired idempotency keys;
        returns how many levels were applied."""
        now = self.context.now()
        applied = 0
        async with self.context.database.transaction() as uow:
            due = await store.lock_due_tasks(
                uow.connection, now=now, limit=self.context.settings.sweep_batch_size
            )
            for task in due:
                try:
                    # A savepoint per task: one task that cannot be escalated (bad data)
                    # is logged and skipped instead of blocking every other deadline.
                    async with uow.connection.begin_nested():
                        updated = await waiting.apply_due_level(uow, self.context, task, now)
                except DBAPIError:
                    log.exception("sweeper.task_failed", task_id=str(task.id))
                    continue
                if updated is not None:
                    applied += 1
                    if self._after_each is not None:
                        self._after_each(updated)
            purged = await purge_expired_idempotency_keys(
                uow.connection, now=now, limit=self.context.settings.sweep_batch_size
            )
            await uow.commit()
        if purged:
            log.info("sweeper.idempotency_keys_purged", keys=purged)
        if applied:
            log.info("sweeper.applied", levels=applied)
        return applied

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.sweep_once()
            except Exception:  # the loop must outlive a database hiccup
                log.exception("sweeper.iteration_failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    stop.wait(), timeout=self.context.settings.sweep_interval_seconds
                )
