"""What the console shows, computed from tasks: durations, deadlines, the chip, rows."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from signoff.console.views import deadline, duration_text, flatten, verdict
from signoff.domain.clock import ManualClock
from signoff.domain.states import TaskStatus
from tests.unit.test_states import _task


def test_durations_read_as_people_say_them() -> None:
    assert [duration_text(s) for s in (45, 720, 3600, 11100, 2 * 86400 + 4 * 3600)] == [
        "45 s",
        "12 min",
        "1 h",
        "3 h 5 min",
        "2 d 4 h",
    ]


def test_a_deadline_is_said_in_words_and_coloured() -> None:
    clock = ManualClock()
    now = clock.now()
    task = _task(clock, status=TaskStatus.PENDING_REVIEW)
    assert deadline(task, now).tone == "none"
    soon = replace(task, deadline_at=now + timedelta(minutes=25))
    assert (deadline(soon, now).text, deadline(soon, now).tone) == ("due in 25 min", "soon")
    late = replace(task, deadline_at=now - timedelta(minutes=3))
    assert (deadline(late, now).text, deadline(late, now).tone) == ("overdue by 3 min", "overdue")
    decided = replace(late, status=TaskStatus.RESOLVED)
    assert deadline(decided, now).text == "no deadline"


def test_the_verdict_compares_confidence_with_threshold() -> None:
    clock = ManualClock()
    bundle = {"evaluator_verdict": {"confidence_score": 0.41, "threshold": 0.85}}
    shown = verdict(_task(clock, diagnostic_bundle=bundle))
    assert (shown.known, shown.below, shown.percent(shown.threshold)) == (True, True, 85.0)
    odd = verdict(_task(clock, diagnostic_bundle={"evaluator_verdict": {"threshold": True}}))
    assert not odd.known


def test_a_document_flattens_to_paths_and_values() -> None:
    rows = flatten({"title": "x", "figures": [1, {"a/b": None}], "empty": {}, "long": "y" * 90})
    assert [(r.path, r.value, r.long) for r in rows] == [
        ("/title", "x", False),
        ("/figures/0", "1", False),
        ("/figures/1/a~1b", "null", False),
        ("/empty", "{}", False),
        ("/long", "y" * 90, True),
    ]
