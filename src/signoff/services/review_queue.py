"""A reviewing session's queue: claim the next task matching the session's filters, and
count what is left.

A session works through what the Available view lists with the same filters (entity
type, reason code, group, escalation level), oldest first. Claims go through
:mod:`signoff.services.leases`, like every other claim.
"""

from __future__ import annotations

from signoff.domain.tasks import Principal, visibility
from signoff.errors import Conflict, ErrorCode, NotFound
from signoff.services import inbox, leases
from signoff.services.context import ServiceContext
from signoff.services.leases import LeaseGrant
from signoff.store import review_queue as store
from signoff.store.inbox import InboxFilters

#: Candidates read at a time when the filters need the list (group, level): another
#: reviewer may take some of them between the read and the claim.
CANDIDATES = 20
#: Lists read before giving up when every candidate was taken by others meanwhile.
ROUNDS = 5


async def claim_next(
    ctx: ServiceContext, principal: Principal, filters: InboxFilters
) -> LeaseGrant | None:
    """Claim the oldest claimable task matching ``filters``; ``None`` when none is left.

    Raises:
        Conflict: ``ERR_CLAIM_LIMIT`` (see :func:`signoff.services.leases.claim`).
    """
    if filters.group is None and filters.level is None:
        return await leases.claim_next(
            ctx, principal, entity_type=filters.entity_type, reason_code=filters.reason_code
        )
    for _ in range(ROUNDS):
        candidates = await inbox.list_view(
            ctx, principal, inbox.View.AVAILABLE, filters, limit=CANDIDATES
        )
        if not candidates:
            return None
        for task in candidates:
            try:
                return await leases.claim(ctx, principal, str(task.id))
            except (Conflict, NotFound) as error:
                if error.error_code is ErrorCode.CLAIM_LIMIT:
                    raise
                # Taken (or moved out of reach) since the list was read: the next one.
    return None


async def waiting(ctx: ServiceContext, principal: Principal, filters: InboxFilters) -> int:
    """How many claimable tasks match ``filters`` now."""
    async with ctx.database.transaction(write=False) as uow:
        return await store.count_claimable(
            uow.connection, now=ctx.now(), scope=visibility(principal), filters=filters
        )
