"""How many tasks a reviewing session has left to claim: the claimable tasks matching its
filters (the tasks awaiting a vote are counted by :mod:`signoff.services.vote_queue`).

Read-only, like the inbox's queries (whose conditions it shares).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from signoff.domain.tasks import Visibility
from signoff.store.inbox import InboxFilters, _claimable, _filtered
from signoff.store.tables import review_tasks
from signoff.store.tasks import visible


async def count_claimable(
    conn: AsyncConnection, *, now: datetime, scope: Visibility, filters: InboxFilters
) -> int:
    """How many tasks of the Available view (without a limit) a session can claim: those
    decided by votes are voted on, not claimed (the session counts them apart)."""
    statement = (
        select(func.count())
        .select_from(review_tasks)
        .where(
            _claimable(now),
            review_tasks.c.approval_rule.is_(None),
            visible(scope),
            *_filtered(filters),
        )
    )
    return int((await conn.execute(statement)).scalar_one())
