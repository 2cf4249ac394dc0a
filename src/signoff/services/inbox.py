"""The console's inbox: which tasks each view lists for a reviewer or supervisor.

Read-only use cases. Every view lists only what the reader may read
(:func:`signoff.domain.tasks.visibility`): reviewers see unassigned tasks and their
groups' tasks; supervisors and admins see every group.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from enum import StrEnum

from signoff.domain.states import Role
from signoff.domain.tasks import Principal, Task, require_role, visibility
from signoff.errors import FieldError, validation_error
from signoff.services.context import ServiceContext
from signoff.store import inbox as store
from signoff.store.inbox import InboxFilters

__all__ = ["DUE_SOON", "InboxFilters", "View", "facets", "list_view", "views_for"]

#: "Due soon" means a deadline within this window (overdue tasks included).
DUE_SOON = timedelta(hours=1)

PEOPLE = frozenset({Role.REVIEWER, Role.SUPERVISOR, Role.ADMIN})
OVERSEERS = frozenset({Role.SUPERVISOR, Role.ADMIN})


class View(StrEnum):
    MINE = "mine"
    AVAILABLE = "available"
    DUE = "due"
    DECIDED = "decided"
    ALL = "all"
    OVERDUE = "overdue"


LABELS = {
    View.MINE: "Mine",
    View.AVAILABLE: "Available",
    View.DUE: "Due soon",
    View.DECIDED: "Decided",
    View.ALL: "All tasks",
    View.OVERDUE: "Overdue",
}


def views_for(principal: Principal) -> list[View]:
    """The tabs a principal has: supervisors and admins also see every task and the
    overdue view."""
    views = [View.MINE, View.AVAILABLE, View.DUE, View.DECIDED]
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


async def list_view(
    ctx: ServiceContext,
    principal: Principal,
    view: View,
    filters: InboxFilters,
    *,
    limit: int = 100,
) -> Sequence[Task]:
    """The tasks of one inbox view, in the view's order."""
    require_role(principal, PEOPLE, "use the inbox")
    if view not in views_for(principal):
        require_role(principal, OVERSEERS, f"see the {view.value} view")
    _check_filters(filters)
    now, scope = ctx.now(), visibility(principal)
    async with ctx.database.transaction(write=False) as uow:
        conn = uow.connection
        if view is View.MINE:
            return await store.tasks_held_by(
                conn,
                holder=principal.principal_id,
                now=now,
                scope=scope,
                filters=filters,
                limit=limit,
            )
        if view is View.AVAILABLE:
            return await store.claimable_tasks(
                conn, now=now, scope=scope, filters=filters, limit=limit
            )
        if view is View.DUE:
            return await store.tasks_due_by(
                conn, due_by=now + DUE_SOON, scope=scope, filters=filters, limit=limit
            )
        if view is View.DECIDED:
            return await store.tasks_decided_by(
                conn, operator=principal.principal_id, scope=scope, filters=filters, limit=limit
            )
        if view is View.ALL:
            return await store.active_tasks(conn, scope=scope, filters=filters, limit=limit)
        return await store.overdue_tasks(conn, now=now, scope=scope, filters=filters, limit=limit)


async def facets(ctx: ServiceContext, principal: Principal) -> dict[str, list[str]]:
    """The values the inbox filters offer."""
    require_role(principal, PEOPLE, "use the inbox")
    async with ctx.database.transaction(write=False) as uow:
        return await store.active_facets(uow.connection, scope=visibility(principal), limit=100)
