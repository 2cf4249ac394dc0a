"""Queries behind the console's inbox views: each view is a :class:`Listing` (which
tasks, in which order), read a page at a time from a mark between two rows (keyset
paging: never an ``OFFSET`` that reads and throws away the rows before the page), and
counted for its tab.

Read-only: the console changes tasks only through the services' transitions.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, func, or_, select, true
from sqlalchemy.ext.asyncio import AsyncConnection

from signoff.domain.states import ACTIVE_STATUSES, TaskStatus
from signoff.domain.tasks import Task, Visibility
from signoff.store.tables import UtcDateTime, review_tasks
from signoff.store.tasks import status_in, task_from_row, visible

T = review_tasks.c


@dataclass(frozen=True)
class InboxFilters:
    """Filters every view accepts (``None``: any). ``terms``: the search's words, lower
    case; a task matches when its search text contains every one."""

    entity_type: str | None = None
    reason_code: str | None = None
    group: str | None = None
    level: int | None = None
    terms: tuple[str, ...] = ()


@dataclass(frozen=True)
class Listing:
    """One view as a query: the tasks it lists (``where``) and their order (``order``:
    columns with ``True`` for descending, ending with the id so every row has its own
    place)."""

    where: tuple[ColumnElement[bool], ...]
    order: tuple[tuple[Any, bool], ...]

    def values_of(self, task: Task) -> tuple[Any, ...]:
        """The row's place in the order."""
        return tuple(getattr(task, column.name) for column, _ in self.order)

    def keys_of(self, task: Task) -> tuple[str, ...]:
        """:meth:`values_of` as text (a page mark carries it)."""
        return tuple(
            value.isoformat() if isinstance(value, datetime) else str(value)
            for value in self.values_of(task)
        )

    def parse_keys(self, values: Sequence[str]) -> tuple[Any, ...] | None:
        """:meth:`keys_of` read back; ``None`` when they are not keys of this order."""
        if len(values) != len(self.order):
            return None
        parsed: list[Any] = []
        try:
            for (column, _), value in zip(self.order, values, strict=True):
                if isinstance(column.type, UtcDateTime):
                    moment = datetime.fromisoformat(value)
                    if moment.tzinfo is None:
                        return None
                    parsed.append(moment)
                elif column.name == "id":
                    parsed.append(uuid.UUID(value))
                else:
                    return None
        except ValueError:
            return None
        return tuple(parsed)


def _escape_like(term: str) -> str:
    return term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _filtered(filters: InboxFilters) -> list[ColumnElement[bool]]:
    clauses: list[ColumnElement[bool]] = []
    if filters.entity_type is not None:
        clauses.append(T.entity_type == filters.entity_type)
    if filters.reason_code is not None:
        clauses.append(T.reason_code == filters.reason_code)
    if filters.group is not None:
        clauses.append(T.assigned_group == filters.group)
    if filters.level is not None:
        clauses.append(T.escalation_level == filters.level)
    for term in filters.terms:
        # search_text is lower case; on PostgreSQL its trigram index answers this.
        clauses.append(T.search_text.like(f"%{_escape_like(term)}%", escape="\\"))
    return clauses


def _claimable(now: datetime) -> ColumnElement[bool]:
    return and_(
        status_in(ACTIVE_STATUSES),
        or_(T.status == TaskStatus.PENDING_REVIEW.value, T.lease_expires_at <= now),
    )


def _held_by(holder: str, now: datetime) -> ColumnElement[bool]:
    return and_(
        T.status == TaskStatus.CLAIMED.value, T.claimed_by == holder, T.lease_expires_at > now
    )


# The views ------------------------------------------------------------------------------


def held_by(holder: str, now: datetime) -> Listing:
    """Tasks whose live lease ``holder`` holds, the soonest to lapse first."""
    return Listing((_held_by(holder, now),), ((T.lease_expires_at, False), (T.id, False)))


def claimable(now: datetime) -> Listing:
    """What the reader may claim, oldest first."""
    return Listing((_claimable(now),), ((T.created_at, False), (T.id, False)))


def due_by(moment: datetime) -> Listing:
    """Active tasks whose first deadline falls before ``moment`` (overdue ones included),
    the most urgent first."""
    where = (status_in(ACTIVE_STATUSES), T.due_at.is_not(None), T.due_at <= moment)
    return Listing(where, ((T.due_at, False), (T.id, False)))


def decided_by(operator: str) -> Listing:
    """Tasks ``operator`` decided (their decision still stands), the latest first."""
    where = (T.status == TaskStatus.RESOLVED.value, T.operator_id == operator)
    return Listing(where, ((T.resolved_at, True), (T.id, True)))


def active() -> Listing:
    """Every waiting or claimed task, oldest first (the supervisors' view)."""
    return Listing((status_in(ACTIVE_STATUSES),), ((T.created_at, False), (T.id, False)))


def open_to_votes() -> Listing:
    """Tasks decided by votes and still open to them, oldest first (whose vote each awaits
    is the domain's to say: :func:`signoff.domain.tasks.awaits_vote`)."""
    where = (T.status == TaskStatus.PENDING_REVIEW.value, T.approval_rule.is_not(None))
    return Listing(where, ((T.created_at, False), (T.id, False)))


def overdue(now: datetime) -> Listing:
    """Active tasks past their first deadline, the longest overdue first."""
    return due_by(now)


# Reading and counting -------------------------------------------------------------------


def _beyond(listing: Listing, keys: tuple[Any, ...], *, before: bool) -> ColumnElement[bool]:
    """The rows after the mark ``keys`` in the listing's order (``before``: those before
    it). The leading column's bound is repeated on its own so an index on it is used."""
    choices: list[ColumnElement[bool]] = []
    for index, ((column, descending), key) in enumerate(zip(listing.order, keys, strict=True)):
        ahead = descending == before  # the row comes later when the column grows
        step = column > key if ahead else column < key
        equal = [c == k for (c, _), k in zip(listing.order[:index], keys[:index], strict=True)]
        choices.append(and_(*equal, step))
    lead, descending = listing.order[0]
    bound = lead >= keys[0] if descending == before else lead <= keys[0]
    return and_(bound, or_(*choices))


def _where(listing: Listing, scope: Visibility, filters: InboxFilters) -> list[ColumnElement[bool]]:
    return [*listing.where, visible(scope), *_filtered(filters)]


async def read_page(
    conn: AsyncConnection,
    listing: Listing,
    *,
    scope: Visibility,
    filters: InboxFilters,
    mark: tuple[Any, ...] | None,
    before: bool,
    limit: int,
) -> list[Task]:
    """Up to ``limit`` tasks of the listing, in its order: from its start, after the mark
    or (``before``) the ones just before it."""
    where = _where(listing, scope, filters)
    if mark is not None:
        where.append(_beyond(listing, mark, before=before))
    order = [
        (column.desc() if descending != before else column.asc())
        for column, descending in listing.order
    ]
    statement = select(review_tasks).where(*where).order_by(*order).limit(limit)
    tasks = [task_from_row(row) for row in await conn.execute(statement)]
    return tasks[::-1] if before else tasks


async def count_before(
    conn: AsyncConnection,
    listing: Listing,
    *,
    scope: Visibility,
    filters: InboxFilters,
    mark: tuple[Any, ...],
) -> int:
    """How many tasks of the listing come before the mark (the page's first row number,
    less one)."""
    where = [*_where(listing, scope, filters), _beyond(listing, mark, before=True)]
    statement = select(func.count()).select_from(review_tasks).where(*where)
    return int((await conn.execute(statement)).scalar_one())


async def count_new(
    conn: AsyncConnection,
    listing: Listing,
    *,
    scope: Visibility,
    filters: InboxFilters,
    since: datetime,
) -> int:
    """How many tasks of the listing were escalated after ``since``."""
    where = [*_where(listing, scope, filters), T.created_at > since]
    statement = select(func.count()).select_from(review_tasks).where(*where)
    return int((await conn.execute(statement)).scalar_one())


async def count_active_views(
    conn: AsyncConnection,
    *,
    counted: dict[str, Listing],
    scope: Visibility,
    filters: InboxFilters,
) -> dict[str, int]:
    """The number of tasks in each of the ``counted`` views of active tasks, in one
    pass over the active tasks (one ``count(*) FILTER`` per view)."""
    if not counted:
        return {}
    columns = [
        func.count().filter(and_(true(), *listing.where)).label(name)
        for name, listing in counted.items()
    ]
    statement = (
        select(*columns)
        .select_from(review_tasks)
        .where(status_in(ACTIVE_STATUSES), visible(scope), *_filtered(filters))
    )
    row = (await conn.execute(statement)).one()
    return {name: int(row._mapping[name]) for name in counted}


async def count_listing(
    conn: AsyncConnection, listing: Listing, *, scope: Visibility, filters: InboxFilters
) -> int:
    statement = (
        select(func.count()).select_from(review_tasks).where(*_where(listing, scope, filters))
    )
    return int((await conn.execute(statement)).scalar_one())


#: Distinct (entity type, reason code, group) among the active tasks read in one pass;
#: past this many, each filter's values are read apart.
FACET_COMBINATIONS = 2000


async def active_facets(
    conn: AsyncConnection, *, scope: Visibility, limit: int
) -> dict[str, list[str]]:
    """The distinct entity types, reason codes and groups among the active tasks
    ``scope`` admits (for the filter choices), and the escalation levels up to the
    highest: one pass over the active tasks, grouped."""
    active_visible = (status_in(ACTIVE_STATUSES), visible(scope))
    grouped = (
        select(T.entity_type, T.reason_code, T.assigned_group, func.max(T.escalation_level))
        .where(*active_visible)
        .group_by(T.entity_type, T.reason_code, T.assigned_group)
        .limit(FACET_COMBINATIONS)
    )
    rows = list(await conn.execute(grouped))
    if len(rows) < FACET_COMBINATIONS:
        found: dict[str, set[str]] = {"entity_type": set(), "reason_code": set(), "group": set()}
        top = 0
        for entity_type, reason_code, group, level in rows:
            found["entity_type"].add(entity_type)
            found["reason_code"].add(reason_code)
            if group is not None:
                found["group"].add(group)
            top = max(top, int(level or 0))
        facets = {name: sorted(values)[:limit] for name, values in found.items()}
        facets["level"] = [str(level) for level in range(top + 1)]
        return facets
    return await _facets_apart(conn, active_visible, limit)


async def _facets_apart(
    conn: AsyncConnection, active_visible: tuple[ColumnElement[bool], ...], limit: int
) -> dict[str, list[str]]:
    facets: dict[str, list[str]] = {}
    for name, column in (
        ("entity_type", T.entity_type),
        ("reason_code", T.reason_code),
        ("group", T.assigned_group),
    ):
        statement = (
            select(column)
            .distinct()
            .where(*active_visible, column.is_not(None))
            .order_by(column)
            .limit(limit)
        )
        facets[name] = [str(value) for value in (await conn.execute(statement)).scalars()]
    levels = select(func.max(T.escalation_level)).where(*active_visible)
    top = (await conn.execute(levels)).scalar_one_or_none() or 0
    facets["level"] = [str(level) for level in range(int(top) + 1)]
    return facets
