"""What reviewers read: field names, word diffs, times, history sentences, advice."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

import pytest

from signoff.console import changes, wording
from signoff.domain.revisions import LINE_DIFF_MAX_CHARS, DiffBudget, structured_diff
from signoff.domain.states import TRANSITIONS, Decision
from signoff.errors import Conflict, ErrorCode


@pytest.mark.parametrize(
    ("pointer", "label"),
    [
        ("/actions/0/id", "Actions › 1 › Id"),
        ("/figures/revenue", "Figures › Revenue"),
        ("/due_date", "Due date"),
        ("/a~1b/c~0d", "A/b › C~d"),
        ("/items/11", "Items › 12"),
        ("", "Everything"),
    ],
)
def test_json_pointers_read_as_field_names(pointer: str, label: str) -> None:
    assert wording.field_label(pointer) == label


def test_many_fields_are_counted_not_listed() -> None:
    pointers = [f"/f{i}" for i in range(8)]
    assert wording.field_labels(pointers) == "F0, F1, F2, F3, F4 and 3 more"
    assert wording.field_labels([]) == "nothing in the content"


def test_a_word_diff_marks_only_the_words_that_changed() -> None:
    pieces = changes.word_diff("Revenue grew 12% year on year", "Revenue grew 14% year on year")
    assert pieces is not None
    assert [(p.kind, p.text) for p in pieces] == [
        ("same", "Revenue grew "),
        ("removed", "12"),
        ("added", "14"),
        ("same", "% year on year"),
    ]
    assert "".join(p.text for p in pieces if p.kind != "added") == "Revenue grew 12% year on year"
    assert "".join(p.text for p in pieces if p.kind != "removed") == "Revenue grew 14% year on year"


def test_a_word_diff_beyond_the_line_diff_bounds_is_not_attempted() -> None:
    long = "word " * (LINE_DIFF_MAX_CHARS // 5 + 1)
    started = time.monotonic()
    assert changes.word_diff(long, long + "more") is None
    assert time.monotonic() - started < 1  # refused by size, not worked out
    spent = DiffBudget(seconds=0)
    assert changes.word_diff("a b c " * 1000, "c b a " * 1000, spent) is None


def test_a_structured_diff_reads_as_labelled_changes() -> None:
    old = {"title": "Quarterly results", "actions": [{"id": "publish"}], "figures": {"a": 1}}
    new = {"title": "Quarterly results (restated)", "actions": [{"id": "publish"}, {"id": "x"}]}
    diff = {"from": 1, "to": 2} | structured_diff(old, new, ["s:1"], ["s:2"])
    view = changes.changes_of(diff)
    assert (view.start, view.end) == (1, 2)
    rows = {c.label: c for c in view.changes}
    assert rows["Title"].kind == "changed"
    assert [p.text for p in rows["Title"].pieces or [] if p.kind == "added"] == [" (restated)"]
    assert rows["Actions › 2"].kind == "added"
    assert rows["Actions › 2"].after == {"id": "x"}
    assert rows["Figures"].kind == "removed"
    assert rows["Source s"].kind == "changed"
    assert not any(label.startswith("/") for label in rows)


def test_times_read_to_the_minute_with_how_long_ago() -> None:
    now = datetime(2026, 12, 3, 14, 10, tzinfo=UTC)
    moment = wording.when("2026-12-03T14:04:07.123456Z", now)
    assert moment is not None
    assert moment.text == "3 Dec 2026, 14:04 UTC"
    assert moment.iso == "2026-12-03T14:04:07Z"
    assert moment.ago == "5 min ago"
    assert wording.when_text(datetime(2026, 12, 3, 14, 9, 30, tzinfo=UTC), now) == (
        "3 Dec 2026, 14:09 UTC (just now)"
    )
    assert wording.when(None) is None


def test_every_event_type_reads_as_a_sentence_without_its_name() -> None:
    types = {step.event_type for step in TRANSITIONS.values()}
    assert types <= set(wording.EVENT_SENTENCES)
    for event_type in types:
        event = {"type": event_type, "actor_id": "alice", "actor_role": "reviewer", "details": {}}
        text = wording.event_sentence(event)
        assert "task." not in text, text
        assert "_" not in text, text
    unknown = {"type": "task.something_new", "actor_id": "alice", "details": {}}
    assert wording.event_sentence(unknown) == "alice changed the task"


def test_a_revision_after_a_revision_request_is_not_called_an_invalidated_approval() -> None:
    event = {
        "type": "task.approval_invalidated",
        "actor_id": "bot",
        "actor_role": "producer",
        "details": {
            "revision": 3,
            "changed_paths": ["/actions/0/id", "/body"],
            "effect": "reopen_for_revision",
            "previous_decision": {"decision": "REVISION_REQUESTED", "by": "alice"},
        },
    }
    text = wording.event_sentence(event)
    assert text == "Revision 3 arrived from bot; changed: Actions › 1 › Id, Body. Back in review"
    assert "approv" not in text
    asked = {
        "type": "task.resolved",
        "action": "resolve",
        "actor_id": "alice",
        "details": {"decision": "REVISION_REQUESTED", "revision": 2},
    }
    assert wording.event_sentence(asked) == "alice asked for a revision"
    assert wording.event_sentence(asked, me="alice") == "You asked for a revision"


def test_every_decision_has_its_past_tense() -> None:
    assert set(wording.DECISION_DONE) == set(Decision)


def test_refusals_say_what_to_do_and_never_the_code() -> None:
    stale = Conflict("name the revision", error_code=ErrorCode.STALE_REVISION)
    assert "newer revision" in wording.refusal_text(stale)
    other = Conflict("task abc is RESOLVED", error_code=ErrorCode.STATE_CONFLICT)
    assert wording.refusal_text(other) == "Task abc is RESOLVED."
    for text in (wording.refusal_text(stale), wording.refusal_text(other)):
        assert not re.search(r"ERR_[A-Z]", text)
    held = wording.held_by_text("bob", None, None)
    assert held.startswith("bob is reviewing this task now")
    assert "ask bob" in held


def test_each_link_state_has_its_own_advice() -> None:
    reasons = ("withdrawn", "cancelled", "expired", "link_expired", "unknown", "refused")
    assert all(wording.link_advice(r) for r in reasons)
    assert "whole link" in wording.link_advice("unknown")
    assert "whole link" not in wording.link_advice("refused")
    assert wording.link_advice("open") == ""


def test_nested_values_read_as_fields_and_numbered_items() -> None:
    assert wording.entries({"due_date": 1, "items": [1, 2]}) == [
        ("Due date", 1),
        ("Items", [1, 2]),
    ]
    assert wording.entries(["a", "b"]) == [("1", "a"), ("2", "b")]
    assert wording.is_nested({"a": 1})
    assert not wording.is_nested({})
    assert not wording.is_nested(3)
