"""Time, from one injectable source.

Every operation reads the clock once and binds that value into its SQL, so a lease or a
TTL is compared against a single instant (SQLite has no ``NOW()``; PostgreSQL's would
differ between statements of a test). Tests swap :class:`SystemClock` for
:class:`ManualClock` and move time without sleeping.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta, timezone
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
    if type(moment.tzinfo) is not timezone:
        # Naive, or a zone with daylight saving time: two wall times that differ only in
        # ``fold`` compare equal there yet are different instants, so never cached.
        return _render(moment)
    return _cached(moment)


def _render(moment: datetime) -> str:
    utc = moment.astimezone(UTC)
    if utc.year < 1000:  # strftime writes such years unpadded; keep that
        return utc.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return utc.isoformat(timespec="microseconds")[:-6] + "Z"  # half strftime's cost


#: A new task writes the same instant three or four times (created, updated, its event).
#: With a fixed offset (UTC, as the clock and the database give them) two equal
#: datetimes are one instant, which renders one text.
_cached = lru_cache(maxsize=64)(_render)
