"""Diffs kept per revision pair: a revision never changes, so neither does the diff
between two of them. The cache is bounded by the size of what it keeps (least recently
used out first), and a diff being worked out is shared by everyone who asks for it
meanwhile, so a burst of identical requests costs one diff."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

import orjson
from cachetools import LRUCache

Diff = dict[str, Any]


def sized(diff: Diff) -> tuple[Diff, int]:
    """``diff`` with its size as the cache counts it (its JSON form's bytes). CPU work,
    like the diff itself: call it where the diff is worked out."""
    return diff, len(orjson.dumps(diff))


def _size(entry: tuple[Diff, int]) -> int:
    return entry[1]


class DiffCache:
    def __init__(self, max_bytes: int) -> None:
        self._done: LRUCache[Hashable, tuple[Diff, int]] | None = (
            LRUCache(max_bytes, getsizeof=_size) if max_bytes else None
        )
        self._pending: dict[Hashable, asyncio.Future[tuple[Diff, int]]] = {}

    async def get(self, key: Hashable, compute: Callable[[], Awaitable[tuple[Diff, int]]]) -> Diff:
        """The diff kept under ``key``, or the one ``compute()`` returns with its size
        (:func:`sized`; kept once it succeeds, unless it alone is larger than the cache).
        The result is shared: read it, never change it."""
        if self._done is not None and (found := self._done.get(key)) is not None:
            return found[0]
        pending = self._pending.get(key)
        if pending is None:
            pending = asyncio.ensure_future(compute())
            self._pending[key] = pending
            pending.add_done_callback(lambda done: self._settle(key, done))
        # A caller that goes away does not cancel the work the others wait for.
        return (await asyncio.shield(pending))[0]

    def _settle(self, key: Hashable, done: asyncio.Future[tuple[Diff, int]]) -> None:
        self._pending.pop(key, None)
        if self._done is None or done.cancelled() or done.exception() is not None:
            return
        entry = done.result()
        if entry[1] <= self._done.maxsize:
            self._done[key] = entry
