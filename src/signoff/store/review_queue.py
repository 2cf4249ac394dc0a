"""How many tasks a reviewing session has left: the claimable tasks matching its filters.

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
    """How many tasks the Available view would list without a limit."""
    statement = (
        select(func.count())
        .select_from(review_tasks)
        .where(_claimable(now), visible(scope), *_filtered(filters))
    )
    return int((await conn.execute(statement)).scalar_one())
