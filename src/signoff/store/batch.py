"""Claiming a batch: lock up to N rows with ``SKIP LOCKED``, then update exactly those.

``UPDATE t … WHERE id IN (SELECT id … LIMIT n FOR UPDATE SKIP LOCKED)`` looks like it
updates at most ``n`` rows, but PostgreSQL may plan the ``IN`` as a nested-loop semi
join that runs the subquery again for every candidate row; each run locks the next
unlocked row, so every due row was updated (a dispatcher leased 100 deliveries when
asked for 10, in quadratic time). A ``MATERIALIZED`` CTE runs once.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, select


def chosen(candidates: Select[Any], name: str) -> Select[Any]:
    """The ids ``candidates`` (a ``SELECT id … LIMIT n FOR UPDATE SKIP LOCKED``) picks,
    picked once: use as ``column.in_(chosen(...))``."""
    batch = candidates.cte(name).prefix_with("MATERIALIZED", dialect="postgresql")
    return select(batch.c.id)
