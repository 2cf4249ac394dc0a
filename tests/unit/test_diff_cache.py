"""Diffs kept per revision pair: bounded by the bytes they hold, least recently used out
first, and one computation for identical requests at the same time."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from signoff.services.diff_cache import DiffCache, sized


def _diff(text: str) -> dict[str, Any]:
    return {"changed": [{"path": "/a", "from": "", "to": text}]}


def test_the_cache_keeps_diffs_up_to_its_size_and_drops_the_least_recently_used() -> None:
    made: list[str] = []

    async def scenario() -> None:
        one_size = sized(_diff("x" * 1000))[1]
        cache = DiffCache(max_bytes=2 * one_size + 10)

        def compute(name: str, text: str) -> Callable[[], Awaitable[tuple[dict[str, Any], int]]]:
            async def run() -> tuple[dict[str, Any], int]:
                made.append(name)
                return sized(_diff(text))

            return run

        await cache.get("a", compute("a", "a" * 1000))
        await cache.get("b", compute("b", "b" * 1000))
        await cache.get("a", compute("a", "a" * 1000))  # kept; now the most recent
        await cache.get("c", compute("c", "c" * 1000))  # "b" goes: least recently used
        await cache.get("a", compute("a", "a" * 1000))
        await cache.get("b", compute("b", "b" * 1000))
        await cache.get("huge", compute("huge", "h" * 10_000))  # larger than the cache
        await cache.get("huge", compute("huge", "h" * 10_000))

    asyncio.run(scenario())
    assert made == ["a", "b", "c", "b", "huge", "huge"]


def test_identical_requests_at_the_same_time_share_one_computation() -> None:
    made: list[int] = []

    async def scenario() -> list[dict[str, Any]]:
        cache = DiffCache(max_bytes=1 << 20)
        gate = asyncio.Event()

        async def compute() -> tuple[dict[str, Any], int]:
            made.append(1)
            await gate.wait()
            return sized(_diff("shared"))

        waiting = [asyncio.ensure_future(cache.get("pair", compute)) for _ in range(5)]
        await asyncio.sleep(0)
        waiting[0].cancel()  # one caller going away does not cancel the others' diff
        gate.set()
        return [await w for w in waiting[1:]]

    results = asyncio.run(scenario())
    assert made == [1]
    assert all(r == _diff("shared") for r in results)
