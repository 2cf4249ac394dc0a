"""RFC 3339 rendering (signoff.domain.clock.rfc3339), cached for fixed offsets only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from signoff.domain.clock import rfc3339


def test_fixed_offsets_render_the_instant_in_utc() -> None:
    moment = datetime(2026, 12, 2, 12, 0, 0, 123456, tzinfo=UTC)
    plus_five = moment.astimezone(timezone(timedelta(hours=5)))
    assert rfc3339(moment) == "2026-12-02T12:00:00.123456Z"
    assert rfc3339(plus_five) == "2026-12-02T12:00:00.123456Z"
    assert rfc3339(None) is None


def test_wall_times_that_differ_only_in_fold_are_two_instants() -> None:
    """In a zone with daylight saving time, 01:30 on the night clocks go back happens
    twice; the two datetimes compare equal but must not share a rendering."""
    new_york = ZoneInfo("America/New_York")
    first = datetime(2024, 11, 3, 1, 30, tzinfo=new_york, fold=0)
    second = first.replace(fold=1)
    for order in ((first, second), (second, first)):
        rendered = {moment.fold: rfc3339(moment) for moment in order}
        assert rendered == {0: "2024-11-03T05:30:00.000000Z", 1: "2024-11-03T06:30:00.000000Z"}
