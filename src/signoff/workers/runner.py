"""Run every background worker until told to stop: the outbox dispatcher, the sweeper and
the notifier. Used by ``signoff serve`` (unless ``SIGNOFF_RUN_WORKERS=false``) and by
``signoff worker``."""

from __future__ import annotations

import asyncio

from signoff.services.context import ServiceContext
from signoff.workers.dispatcher import Dispatcher
from signoff.workers.notifier import Notifier
from signoff.workers.sweeper import Sweeper


async def run_workers(context: ServiceContext, stop: asyncio.Event) -> None:
    """Returns once ``stop`` is set and every worker has drained its work in flight."""
    await asyncio.gather(
        Dispatcher(context).run(stop),
        Sweeper(context).run(stop),
        Notifier(context).run(stop),
    )
