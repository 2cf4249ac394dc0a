"""Claiming a batch: lock up to N rows with ``SKIP LOCKED``, then update exactly those.

``UPDATE t … WHERE id IN (SELECT id … LIMIT n FOR UPDATE SKIP LOCKED)`` looks like it
updates at most ``n`` rows, but PostgreSQL may plan the ``IN`` as a nested-loop semi
join that runs the subquery again for every candidate row; each run locks the next
unlocked row, so every due row was updated (a dispatcher leased 100 deliveries when
asked for 10, in quadratic time). A ``MATERIALIZED`` CTE runs once.

:func:`picked` goes one step further for a claim that must stay cheap whatever the
backlog: ``UPDATE t … FROM batch WHERE t.id = batch.id`` with no second look at the
claim's conditions. The rows in the batch are locked, and PostgreSQL re-checks the
conditions of a locked row on its newest version, so the second look added nothing but
a scan: with it, the UPDATE could read every due row to find the few it was given.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, select


def chosen(candidates: Select[Any], name: str) -> Select[Any]:
    """The ids ``candidates`` (a ``SELECT id … LIMIT n FOR UPDATE SKIP LOCKED``) picks,
    picked once: use as ``column.in_(chosen(...))``."""
    batch = candidates.cte(name).prefix_with("MATERIALIZED", dialect="postgresql")
    return select(batch.c.id)


def picked(candidates: Select[Any], name: str) -> Any:
    """The rows ``candidates`` (a ``SELECT id … LIMIT n FOR UPDATE SKIP LOCKED``) picks,
    picked once, as a CTE to join on: ``update(t).where(t.c.id == picked(...).c.id)``."""
    return candidates.cte(name).prefix_with("MATERIALIZED", dialect="postgresql")
