"""Diffs kept per revision pair: a revision never changes, so neither does the diff
between two of them. The cache is bounded (least recently used out first), and a diff
being worked out is shared by everyone who asks for it meanwhile, so a burst of identical
requests costs one diff."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

from cachetools import LRUCache

Diff = dict[str, Any]


class DiffCache:
    def __init__(self, entries: int) -> None:
        self._done: LRUCache[Hashable, Diff] | None = LRUCache(entries) if entries else None
        self._pending: dict[Hashable, asyncio.Future[Diff]] = {}

    async def get(self, key: Hashable, compute: Callable[[], Awaitable[Diff]]) -> Diff:
        """The diff kept under ``key``, or ``compute()``'s (kept once it succeeds). The
        result is shared: read it, never change it."""
        if self._done is not None and (found := self._done.get(key)) is not None:
            return found
        pending = self._pending.get(key)
        if pending is None:
            pending = asyncio.ensure_future(compute())
            self._pending[key] = pending
            pending.add_done_callback(lambda done: self._settle(key, done))
        # A caller that goes away does not cancel the work the others wait for.
        return await asyncio.shield(pending)

    def _settle(self, key: Hashable, done: asyncio.Future[Diff]) -> None:
        self._pending.pop(key, None)
        if self._done is not None and not done.cancelled() and done.exception() is None:
            self._done[key] = done.result()
