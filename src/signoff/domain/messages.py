"""What a notified approver reads: enough to decide without opening anything
else — the headline and its key fields, entity, reason, the input snapshot, the
evaluator's confidence against its threshold, the AI recommendation (labelled as such)
and the decision link."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

#: How many top-level fields of the input snapshot a message shows.
SNAPSHOT_FIELDS = 8
#: Longest single value shown, in characters.
MAX_SHOWN = 300
#: Most lines a nested value of the input snapshot is spread over.
MAX_NESTED_LINES = 20


def one_line(value: object) -> str:
    """Producer-controlled text on one line: control characters and line separators become
    spaces, so it can neither inject a mail header nor fake a line (a link) of its own."""
    text = "".join(
        " " if (ord(ch) < 32 or ch in "\x7f\x85\u2028\u2029") else ch for ch in str(value)
    )
    return text[:MAX_SHOWN]


KIND_TITLES = {
    "review_requested": "Review needed",
    "reminder": "Reminder: review still waiting",
    "reassigned": "Reassigned to you: review needed",
    "expired": "Expired without a decision",
    "approval_invalidated": "A new revision invalidated the approval: review again",
    "votes_voided": "A new revision voided your vote: review again",
}


def when_text(at: datetime | str | None, now: datetime) -> str:
    """A moment as people read it: ``5 Dec, 14:05 UTC (in 3 hours)``."""
    from babel.dates import format_datetime, format_timedelta  # at the first message

    if at is None:
        return "none"
    if isinstance(at, str):
        at = datetime.fromisoformat(at)
    at = at if at.tzinfo else at.replace(tzinfo=UTC)
    day = format_datetime(at, "d MMM, HH:mm", tzinfo=UTC, locale="en")
    if at.astimezone(UTC).year != now.astimezone(UTC).year:
        day = format_datetime(at, "d MMM yyyy, HH:mm", tzinfo=UTC, locale="en")
    relative = format_timedelta(at - now, add_direction=True, locale="en")
    return f"{day} UTC ({relative})"


def _nested_lines(key: str, value: Any) -> list[str]:
    """A nested value on one line when it fits, else spread over indented lines."""
    flat = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    if len(flat) <= MAX_SHOWN:
        return [f"  {key}: {one_line(flat)}"]
    spread = json.dumps(value, ensure_ascii=False, indent=2).splitlines()
    lines = [f"  {key}:"] + [f"    {one_line(line)}" for line in spread[:MAX_NESTED_LINES]]
    if len(spread) > MAX_NESTED_LINES:
        lines.append(f"    ({len(spread) - MAX_NESTED_LINES} more lines in the console)")
    return lines


def snapshot_lines(task: dict[str, Any]) -> list[str]:
    snapshot = task["diagnostic_bundle"].get("input_snapshot") or {}
    lines = []
    for key, value in list(snapshot.items())[:SNAPSHOT_FIELDS]:
        if isinstance(value, str | int | float | bool) or value is None:
            lines.append(f"  {one_line(key)}: {one_line(value)}")
        else:
            lines += _nested_lines(one_line(key), value)
    return lines


def verdict_line(task: dict[str, Any]) -> str:
    verdict = task["diagnostic_bundle"].get("evaluator_verdict") or {}
    confidence, threshold = verdict.get("confidence_score"), verdict.get("threshold")
    return f"Evaluator confidence {one_line(confidence)} against threshold {one_line(threshold)}"


def summary_lines(task: dict[str, Any]) -> list[str]:
    summary = task.get("summary")
    if not summary:
        return ["No AI summary was provided."]
    lines = [
        f"AI recommendation (a person decides): {one_line(summary['recommendation'])}",
        f"  Rationale: {one_line(summary['rationale'])}",
    ]
    lines += [f"  Risk: {one_line(risk)}" for risk in summary.get("risks", [])]
    lines += [f"  Evidence: {one_line(link)}" for link in summary.get("evidence_links", [])]
    if summary.get("generated_by"):
        lines.append(f"  Prepared by: {one_line(summary['generated_by'])}")
    return lines


def headline_lines(task: dict[str, Any]) -> list[str]:
    """The task's headline, then its key fields indented."""
    headline = task.get("headline") or {}
    return [
        one_line(headline_title(task)),
        *[f"  {one_line(f['label'])}: {one_line(f['text'])}" for f in headline.get("fields", [])],
    ]


def headline_title(task: dict[str, Any]) -> str:
    headline = task.get("headline") or {}
    return str(headline.get("title") or f"{task['entity_type']} {task['entity_id']}")


def progress_lines(task: dict[str, Any]) -> list[str]:
    """Where a task's approval rule stands, in the line every door shows
    (``approval_progress.text``); nothing for a task one person decides."""
    standing = task.get("approval_progress")
    if not standing:
        return []
    return [f"Approval by several people: {one_line(standing['text'])}"]


def render_notification(
    task: dict[str, Any], *, kind: str, link: str | None, now: datetime
) -> tuple[str, str]:
    """Subject line and plain-text body of a notification e-mail."""
    title = KIND_TITLES.get(kind, "Review update")
    subject = one_line(f"[Signoff] {title}: {headline_title(task)} ({task['reason_code']})")
    lines = [
        f"{title}.",
        "",
        *headline_lines(task),
        "",
        f"Entity: {one_line(task['entity_type'])} {one_line(task['entity_id'])}",
        f"Reason: {one_line(task['reason_code'])}",
        *progress_lines(task),
        verdict_line(task),
        "Input snapshot:",
        *snapshot_lines(task),
        "",
        *summary_lines(task),
        "",
        f"Escalation level: {task['escalation_level']}; "
        f"next deadline: {when_text(task.get('deadline_at'), now)}",
    ]
    if link:
        lines += [
            "",
            f"Approve or reject: {link}",
            "(The link opens a page; nothing is decided until you press a button.)",
        ]
    return subject, "\n".join(lines) + "\n"
