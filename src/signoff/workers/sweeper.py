"""The sweeper: applies due escalation levels, and removes old delivered webhooks
(retention, :func:`signoff.services.delivery.purge_old_deliveries`).

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

from signoff.domain.tasks import Task
from signoff.services import catchup, delivery, evidence, waiting
from signoff.services.context import ServiceContext
from signoff.workers.outage import OutageLog

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
        """One sweep (:func:`signoff.services.waiting.sweep_due`, retention, then a look at
        what holds the catch-up read back); returns levels applied."""
        applied = await waiting.sweep_due(self.context, after_each=self._after_each)
        if applied:
            log.info("sweeper.applied", levels=applied)
        purged = await delivery.purge_old_deliveries(self.context)
        if purged:
            log.info(
                "sweeper.retention",
                deliveries=purged.delivered,
                dead_deliveries=purged.dead,
                outbox_events=purged.events,
            )
        await catchup.watch_held_back(self.context)
        checkpoint = await evidence.checkpoint_if_due(self.context)
        if checkpoint is not None:
            log.info("sweeper.checkpoint", seq=checkpoint["seq"], records=checkpoint["size"])
        return applied

    async def run(self, stop: asyncio.Event) -> None:
        outage = OutageLog("sweeper")
        while not stop.is_set():
            try:
                await self.sweep_once()
            except Exception as exc:  # the loop must outlive a database hiccup
                outage.failed(exc)
            else:
                outage.succeeded()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    stop.wait(), timeout=self.context.settings.sweep_interval_seconds
                )
