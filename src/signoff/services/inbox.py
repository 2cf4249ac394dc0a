"""The console's inbox: which tasks each view lists for a reviewer or supervisor.

Read-only use cases. Every view lists only what the reader may read
(:func:`signoff.domain.tasks.visibility`): reviewers see unassigned tasks and their
groups' tasks; supervisors and admins see every group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from signoff.domain.inbox import Cursor
from signoff.domain.states import Action, Role, transition
from signoff.domain.tasks import Principal, Task, require_role, visibility
from signoff.errors import FieldError, validation_error
from signoff.services import vote_queue
from signoff.services.context import ServiceContext
from signoff.store import inbox as store
from signoff.store.inbox import InboxFilters, Listing

__all__ = [
    "DUE_SOON",
    "PAGE_SIZE",
    "InboxFilters",
    "Page",
    "View",
    "count_new",
    "count_views",
    "facets",
    "list_view",
    "page_of_view",
    "views_for",
]

#: "Due soon" means a first deadline within this window (overdue tasks included).
DUE_SOON = timedelta(hours=1)
#: Rows on one page of a view.
PAGE_SIZE = 50

PEOPLE = frozenset({Role.REVIEWER, Role.SUPERVISOR, Role.ADMIN})
OVERSEERS = frozenset({Role.SUPERVISOR, Role.ADMIN})


class View(StrEnum):
    MINE = "mine"
    AVAILABLE = "available"
    DUE = "due"
    DECIDED = "decided"
    ALL = "all"
    OVERDUE = "overdue"
    VOTES = "votes"
    """Tasks awaiting the reader's vote (:mod:`signoff.services.vote_queue`)."""


LABELS = {
    View.MINE: "Mine",
    View.AVAILABLE: "Available",
    View.VOTES: "Awaiting my vote",
    View.DUE: "Due soon",
    View.DECIDED: "Decided",
    View.ALL: "All tasks",
    View.OVERDUE: "Overdue",
}


def views_for(principal: Principal) -> list[View]:
    """The tabs a principal has: those who vote on tasks also see the tasks awaiting their
    vote; supervisors and admins also see every task and the overdue view."""
    views = [View.MINE, View.AVAILABLE, View.DUE, View.DECIDED]
    if principal.role in transition(Action.VOTE).roles:
        views.insert(2, View.VOTES)
    if principal.role in OVERSEERS:
        views += [View.ALL, View.OVERDUE]
    return views


def _check_filters(filters: InboxFilters) -> None:
    values = {
        "entity_type": filters.entity_type,
        "reason_code": filters.reason_code,
        "group": filters.group,
    }
    bad = [FieldError(k, "must not contain U+0000") for k, v in values.items() if v and "\x00" in v]
    if bad:
        raise validation_error(bad)


def _check_view(principal: Principal, view: View) -> None:
    require_role(principal, PEOPLE, "use the inbox")
    if view not in views_for(principal):
        require_role(principal, OVERSEERS, f"see the {view.value} view")


def _listing(view: View, principal: Principal, now: datetime) -> Listing:
    """What the view lists and in which order (the store's queries)."""
    if view is View.MINE:
        return store.held_by(principal.principal_id, now)
    if view is View.AVAILABLE:
        return store.claimable(now)
    if view is View.DUE:
        return store.due_by(now + DUE_SOON)
    if view is View.DECIDED:
        return store.decided_by(principal.principal_id)
    if view is View.VOTES:
        return vote_queue.listing()
    if view is View.ALL:
        return store.active()
    return store.overdue(now)


async def list_view(
    ctx: ServiceContext,
    principal: Principal,
    view: View,
    filters: InboxFilters,
    *,
    limit: int = PAGE_SIZE,
) -> Sequence[Task]:
    """The first tasks of one inbox view, in the view's order."""
    _check_view(principal, view)
    _check_filters(filters)
    now, scope = ctx.now(), visibility(principal)
    async with ctx.database.transaction(write=False) as uow:
        if view is View.VOTES:
            return await vote_queue.awaiting(uow.connection, principal, filters, limit=limit)
        return await store.read_page(
            uow.connection,
            _listing(view, principal, now),
            scope=scope,
            filters=filters,
            mark=None,
            before=False,
            limit=limit,
        )


@dataclass(frozen=True)
class Page:
    """One page of a view: its tasks, where they stand in the view and the marks of the
    pages before and after (``None``: there is none)."""

    tasks: Sequence[Task]
    first: int
    """The first row's number in the view (1-based; 0 when the page is empty)."""
    total: int
    previous: Cursor | None
    next: Cursor | None

    @property
    def last(self) -> int:
        return self.first + len(self.tasks) - 1 if self.tasks else 0


async def page_of_view(
    ctx: ServiceContext,
    principal: Principal,
    view: View,
    filters: InboxFilters,
    *,
    cursor: Cursor | None = None,
    size: int = PAGE_SIZE,
) -> Page:
    """One page of a view: its first page, or the page after (or before) ``cursor``.

    Raises:
        Unprocessable: ``ERR_VALIDATION`` (field ``after`` or ``before``) when the cursor
            is not a mark of this view.
    """
    _check_view(principal, view)
    _check_filters(filters)
    now, scope = ctx.now(), visibility(principal)
    listing = _listing(view, principal, now)
    mark = None
    if cursor is not None:
        mark = listing.parse_keys(cursor.values)
        if mark is None:
            field = "before" if cursor.backward else "after"
            raise validation_error([FieldError(field, "is not a page of this view")])
    backward = cursor is not None and cursor.backward
    async with ctx.database.transaction(write=False) as uow:
        conn = uow.connection
        if view is View.VOTES:
            everything = await vote_queue.awaiting(conn, principal, filters)
            votes = vote_queue.page_of(everything, mark, backward, size)
            return Page(
                tasks=votes.tasks,
                first=votes.ahead + 1 if votes.tasks else 0,
                total=votes.total,
                previous=votes.previous,
                next=votes.next,
            )
        tasks = await store.read_page(
            conn, listing, scope=scope, filters=filters, mark=mark, before=backward, limit=size
        )
        if backward and len(tasks) < size:
            # Back at the start (rows ahead of the mark went away): the first page.
            tasks = await store.read_page(
                conn, listing, scope=scope, filters=filters, mark=None, before=False, limit=size
            )
        total = await store.count_listing(conn, listing, scope=scope, filters=filters)
        ahead = 0
        if tasks and mark is not None:
            first_row = listing.values_of(tasks[0])
            ahead = await store.count_before(
                conn, listing, scope=scope, filters=filters, mark=first_row
            )
    first = ahead + 1 if tasks else 0
    last = ahead + len(tasks)
    return Page(
        tasks=tasks,
        first=first,
        total=max(total, last),
        previous=Cursor(listing.keys_of(tasks[0]), backward=True) if tasks and ahead else None,
        next=Cursor(listing.keys_of(tasks[-1])) if tasks and last < total else None,
    )


async def count_views(
    ctx: ServiceContext, principal: Principal, filters: InboxFilters
) -> dict[View, int]:
    """How many tasks each of the principal's views lists (filters and search applied):
    one query for the views of active tasks, one for Decided."""
    require_role(principal, PEOPLE, "use the inbox")
    _check_filters(filters)
    now, scope = ctx.now(), visibility(principal)
    views = views_for(principal)
    worked_out = (View.DECIDED, View.VOTES)
    active = {v.value: _listing(v, principal, now) for v in views if v not in worked_out}
    async with ctx.database.transaction(write=False) as uow:
        conn = uow.connection
        counts = await store.count_active_views(conn, counted=active, scope=scope, filters=filters)
        decided = await store.count_listing(
            conn, _listing(View.DECIDED, principal, now), scope=scope, filters=filters
        )
        if View.VOTES in views:
            awaiting = await vote_queue.awaiting(conn, principal, filters)
    found = {View(name): number for name, number in counts.items()}
    found[View.DECIDED] = decided
    if View.VOTES in views:
        found[View.VOTES] = len(awaiting)
    return {view: found[view] for view in views}


async def count_new(
    ctx: ServiceContext,
    principal: Principal,
    view: View,
    filters: InboxFilters,
    since: datetime,
) -> int:
    """How many tasks of the view were escalated after ``since`` (the "N new" pill of a
    page shown at ``since``, however many rows the view has)."""
    _check_view(principal, view)
    _check_filters(filters)
    now, scope = ctx.now(), visibility(principal)
    async with ctx.database.transaction(write=False) as uow:
        if view is View.VOTES:
            awaiting = await vote_queue.awaiting(uow.connection, principal, filters)
            return vote_queue.escalated_after(awaiting, since)
        return await store.count_new(
            uow.connection,
            _listing(view, principal, now),
            scope=scope,
            filters=filters,
            since=since,
        )


async def facets(ctx: ServiceContext, principal: Principal) -> dict[str, list[str]]:
    """The values the inbox filters offer."""
    require_role(principal, PEOPLE, "use the inbox")
    async with ctx.database.transaction(write=False) as uow:
        return await store.active_facets(uow.connection, scope=visibility(principal), limit=100)
