"""How many long-polls and event streams each caller holds open in this process.

A parked long-poll or an open event stream costs no database connection, but each
holds a connection, a file descriptor and memory: one key must not take them all.
Beyond ``SIGNOFF_MAX_LONG_POLLS_PER_KEY`` / ``SIGNOFF_MAX_STREAMS_PER_KEY`` a caller is
answered 429 ``ERR_TOO_MANY_WAITS`` with ``Retry-After``.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from enum import StrEnum

from signoff.errors import ErrorCode, TooManyRequests

#: Seconds a refused caller is told to wait (a long-poll ends within a minute).
RETRY_AFTER_SECONDS = 5


class WaitKind(StrEnum):
    LONG_POLL = "long-polls"
    STREAM = "event streams"


class WaitSlots:
    """Open waits per (kind, key id)."""

    def __init__(self) -> None:
        self._open: Counter[tuple[WaitKind, uuid.UUID]] = Counter()

    def take(self, kind: WaitKind, key_id: uuid.UUID, limit: int) -> Callable[[], None]:
        """Hold one slot; returns the function that gives it back (call it exactly once).

        Raises:
            TooManyRequests: ``ERR_TOO_MANY_WAITS`` when ``limit`` slots are held already.
        """
        slot = (kind, key_id)
        if self._open[slot] >= limit:
            raise TooManyRequests(
                f"this key already has {limit} {kind} open; close one or retry later",
                error_code=ErrorCode.TOO_MANY_WAITS,
                extra={"retry_after": RETRY_AFTER_SECONDS},
            )
        self._open[slot] += 1
        given_back = False

        def give_back() -> None:
            nonlocal given_back
            if not given_back:
                given_back = True
                self._open[slot] -= 1
                if self._open[slot] <= 0:
                    del self._open[slot]

        return give_back
