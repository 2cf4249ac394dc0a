"""The tasks awaiting a person's vote: decided by an approval rule, still open, and a vote
by this person at the stage being voted on, on the current revision, would be accepted now.

Who may vote is the domain's one rule (:func:`signoff.domain.tasks.awaits_vote`, which asks
:func:`signoff.domain.tasks.ballot_refusal` as every vote does); the database narrows the
read to the open vote tasks the person may read, with the inbox's filters, and each is
asked in turn. The list is read whole for the inbox's view and its count (votes are few
beside single decisions), and a batch at a time for the API's pages and the next task of
a reviewing session.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from signoff.domain.inbox import Cursor
from signoff.domain.tasks import Principal, Task, awaits_vote, visibility
from signoff.services.context import ServiceContext
from signoff.store import inbox as store
from signoff.store.inbox import InboxFilters, Listing

#: Open vote tasks read at a time.
BATCH = 200


def listing() -> Listing:
    return store.open_to_votes()


async def awaiting(
    conn: AsyncConnection,
    principal: Principal,
    filters: InboxFilters,
    *,
    after: tuple[Any, ...] | None = None,
    limit: int | None = None,
) -> list[Task]:
    """The tasks awaiting ``principal``'s vote, oldest first: all of them, or the first
    ``limit`` after the mark ``after``."""
    order = listing()
    scope = visibility(principal)
    found: list[Task] = []
    mark = after
    while limit is None or len(found) < limit:
        batch = await store.read_page(
            conn, order, scope=scope, filters=filters, mark=mark, before=False, limit=BATCH
        )
        found += [task for task in batch if awaits_vote(task, principal)]
        if len(batch) < BATCH:
            break
        mark = order.values_of(batch[-1])
    return found if limit is None else found[:limit]


async def next_vote(
    ctx: ServiceContext, principal: Principal, filters: InboxFilters
) -> Task | None:
    """The oldest task awaiting ``principal``'s vote (a reviewing session's next vote)."""
    async with ctx.database.transaction(write=False) as uow:
        tasks = await awaiting(uow.connection, principal, filters, limit=1)
    return tasks[0] if tasks else None


async def count_awaiting(
    ctx: ServiceContext, principal: Principal, filters: InboxFilters, *, other_than: str = ""
) -> int:
    """How many tasks await ``principal``'s vote, besides the task ``other_than`` (a
    reviewing session's line: the task on the screen is not waiting)."""
    async with ctx.database.transaction(write=False) as uow:
        tasks = await awaiting(uow.connection, principal, filters)
    return sum(1 for task in tasks if str(task.id) != other_than)


@dataclass(frozen=True)
class VotePage:
    tasks: Sequence[Task]
    ahead: int
    """How many tasks of the list come before the page."""
    total: int
    previous: Cursor | None
    next: Cursor | None


def page_of(
    tasks: Sequence[Task], mark: tuple[Any, ...] | None, backward: bool, size: int
) -> VotePage:
    """One page of the whole list ``tasks`` (in the listing's order): the first, or the
    page after (``backward``: before) the mark."""
    order = listing()
    places = [order.values_of(task) for task in tasks]
    if mark is None:
        start = 0
    elif backward:
        start = max(0, sum(1 for place in places if place < mark) - size)
    else:
        start = sum(1 for place in places if place <= mark)
    shown = tasks[start : start + size]
    end = start + len(shown)
    return VotePage(
        tasks=shown,
        ahead=start,
        total=len(tasks),
        previous=Cursor(order.keys_of(shown[0]), backward=True) if shown and start else None,
        next=Cursor(order.keys_of(shown[-1])) if shown and end < len(tasks) else None,
    )


def escalated_after(tasks: Sequence[Task], since: datetime) -> int:
    return sum(1 for task in tasks if task.created_at > since)
