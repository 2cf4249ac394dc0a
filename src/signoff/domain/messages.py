"""What a notified approver reads: enough to decide without opening anything
else — the headline and its key fields, entity, reason, the input snapshot, the
evaluator's confidence against its threshold, the AI recommendation (labelled as such)
and the decision link."""

from __future__ import annotations

import json
from typing import Any

#: How many top-level fields of the input snapshot a message shows.
SNAPSHOT_FIELDS = 8
#: Longest single value shown, in characters.
MAX_SHOWN = 300


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


def snapshot_lines(task: dict[str, Any]) -> list[str]:
    snapshot = task["diagnostic_bundle"].get("input_snapshot") or {}
    lines = []
    for key, value in list(snapshot.items())[:SNAPSHOT_FIELDS]:
        shown = value
        if not (isinstance(value, str | int | float | bool) or value is None):
            shown = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
        lines.append(f"  {one_line(key)}: {one_line(shown)}")
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


def progress_lines(task: dict[str, Any]) -> list[str]:
    """Where a task's approval rule stands, in the line every door shows
    (``approval_progress.text``); nothing for a task one person decides."""
    standing = task.get("approval_progress")
    if not standing:
        return []
    return [f"Approval by several people: {one_line(standing['text'])}"]


def render_notification(task: dict[str, Any], *, kind: str, link: str | None) -> tuple[str, str]:
    """Subject line and plain-text body of a notification e-mail."""
    title = KIND_TITLES.get(kind, "Review update")
    headline = task.get("headline") or {}
    what = headline.get("title") or f"{task['entity_type']} {task['entity_id']}"
    subject = one_line(f"[Signoff] {title}: {what} ({task['reason_code']})")
    lines = [
        f"{title}.",
        "",
        one_line(what),
        *[f"  {one_line(f['label'])}: {one_line(f['text'])}" for f in headline.get("fields", [])],
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
        f"next deadline: {task.get('deadline_at') or 'none'}",
    ]
    if link:
        lines += [
            "",
            f"Approve or reject: {link}",
            "(The link opens a page; nothing is decided until you press a button.)",
        ]
    return subject, "\n".join(lines) + "\n"
