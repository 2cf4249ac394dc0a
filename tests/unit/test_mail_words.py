"""Words in e-mails: moments as people read them, nested input values spread over lines
instead of cut off."""

from __future__ import annotations

from datetime import UTC, datetime

from signoff.domain.messages import MAX_NESTED_LINES, snapshot_lines, when_text

NOW = datetime(2026, 12, 5, 11, 5, tzinfo=UTC)


def test_moments_read_as_a_day_a_time_and_how_far() -> None:
    assert when_text(datetime(2026, 12, 5, 14, 5, tzinfo=UTC), NOW) == (
        "5 Dec, 14:05 UTC (in 3 hours)"
    )
    assert when_text("2026-12-04T11:05:00Z", NOW) == "4 Dec, 11:05 UTC (1 day ago)"
    assert when_text("2028-01-02T00:00:00+00:00", NOW) == "2 Jan 2028, 00:00 UTC (in 1 year)"
    assert when_text(None, NOW) == "none"


def test_a_long_nested_value_is_spread_over_lines_not_cut() -> None:
    lines_of_order = [{"sku": f"A-{n}", "qty": n, "note": "x" * 30} for n in range(5)]
    task = {"diagnostic_bundle": {"input_snapshot": {"order": {"lines": lines_of_order}}}}
    shown = snapshot_lines(task)
    assert shown[0] == "  order:"
    assert all(line.startswith("    ") for line in shown[1:])
    text = "\n".join(shown)
    assert "…" not in text
    assert '"sku": "A-0"' in text
    assert '"note": "' + "x" * 30 + '"' in text


def test_a_huge_nested_value_says_how_much_more_there_is() -> None:
    big = {"items": list(range(100))}
    shown = snapshot_lines({"diagnostic_bundle": {"input_snapshot": {"big": big}}})
    assert len(shown) == 1 + MAX_NESTED_LINES + 1
    assert shown[-1].strip().endswith("more lines in the console)")


def test_a_short_nested_value_stays_on_its_line() -> None:
    task = {"diagnostic_bundle": {"input_snapshot": {"payee": {"name": "ACME", "iban": "DE89"}}}}
    assert snapshot_lines(task) == ['  payee: {"name": "ACME", "iban": "DE89"}']
