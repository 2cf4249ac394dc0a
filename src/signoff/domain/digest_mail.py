"""What a person who chose a digest reads: one e-mail for the work gathered over their
interval, each task with its headline, key fields, deadline in words and its own link."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from signoff.domain.messages import KIND_TITLES, headline_lines, one_line, when_text


@dataclass(frozen=True)
class DigestEntry:
    """One task of a digest: its view, the latest event it was notified for, and its
    link (``None`` when it no longer waits for a decision, its link was withdrawn, or the
    event has none)."""

    task: dict[str, Any]
    kind: str
    link: str | None
    waiting: bool
    #: The person's link was withdrawn since (the task was handed to another group).
    withdrawn: bool = False

    @property
    def yours(self) -> bool:
        return self.waiting and not self.withdrawn


def render_digest(entries: list[DigestEntry], *, since: datetime, now: datetime) -> tuple[str, str]:
    """Subject line and plain-text body of a digest e-mail."""
    waiting = sum(1 for entry in entries if entry.yours)
    count = f"{waiting} task{'s' if waiting != 1 else ''} waiting for you"
    subject = f"[Signoff] Digest: {count}"
    lines = [f"{count[:1].upper()}{count[1:]}, gathered since {when_text(since, now)}.", ""]
    for number, entry in enumerate(entries, start=1):
        task = entry.task
        event = KIND_TITLES.get(entry.kind, "Review update")
        first, *fields = headline_lines(task)
        lines += [f"{number}. {first}", *[f"  {field}" for field in fields]]
        lines.append(f"   {event}; reason: {one_line(task['reason_code'])}")
        if not entry.waiting:
            lines.append(f"   No longer waiting: {one_line(task['status']).lower()}.")
        elif entry.withdrawn:
            lines.append("   No longer yours to decide: it was handed to another group.")
        else:
            lines.append(f"   Deadline: {when_text(task.get('deadline_at'), now)}")
        if entry.link:
            lines.append(f"   Approve or reject: {entry.link}")
        lines.append("")
    lines.append("(A link opens a page; nothing is decided until you press a button.)")
    return one_line(subject), "\n".join(lines) + "\n"
