"""Time, from one injectable source.

Every operation reads the clock once and binds that value into its SQL, so a lease or a
TTL is compared against a single instant (SQLite has no ``NOW()``; PostgreSQL's would
differ between statements of a test). Tests swap :class:`SystemClock` for
:class:`ManualClock` and move time without sleeping.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current instant, timezone-aware, in UTC."""
        ...


class SystemClock:
    """Wall-clock time in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class ManualClock:
    """A clock that only moves when told to. Thread-safe: tests move it while a server
    thread reads it."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
        if self._now.tzinfo is None:
            raise ValueError("ManualClock needs a timezone-aware start")
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> datetime:
        """Move forward by ``seconds`` and return the new instant."""
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now


def rfc3339(moment: datetime | None) -> str | None:
    """Render an aware datetime as RFC 3339 in UTC with a ``Z`` suffix and microseconds."""
    if moment is None:
        return None
    if moment.tzinfo is None:  # local wall time: not cached (a fold may render apart)
        return _rfc3339.__wrapped__(moment)
    return _rfc3339(moment)


@lru_cache(maxsize=64)
def _rfc3339(moment: datetime) -> str:
    # Cached: a new task writes the same instant three or four times (created, updated,
    # its event), and two aware datetimes are equal only when they are the same
    # instant, which renders the same text.
    utc = moment.astimezone(UTC)
    if utc.year < 1000:  # strftime writes such years unpadded; keep that
        return utc.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return utc.isoformat(timespec="microseconds")[:-6] + "Z"  # half strftime's cost
