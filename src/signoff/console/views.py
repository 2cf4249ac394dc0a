"""What the pages show, computed from tasks: ages, deadlines, the escalation chip, and
JSON documents as readable rows. Pure functions (no I/O, no rules of their own)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from signoff.domain.clock import rfc3339
from signoff.domain.headline import ShownHeadline, default_headline, pick_locale, render
from signoff.domain.states import TaskStatus
from signoff.domain.tasks import Task


def duration_text(seconds: float) -> str:
    """A short human duration: ``45 s``, ``12 min``, ``3 h 5 min``, ``2 d 4 h``."""
    seconds = int(abs(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


@dataclass(frozen=True)
class Deadline:
    text: str
    """Always said in words (colour is never the only signal)."""
    tone: str
    """``overdue``, ``soon``, ``ok`` or ``none``: the colour."""
    at: str | None


def deadline(task: Task, now: datetime) -> Deadline:
    """Said against the task's first deadline (the producer's, or the policy's first
    level), which the escalation levels never move: a task past it stays "overdue"."""
    due = task.due_at or task.deadline_at
    if due is None or task.status not in (
        TaskStatus.PENDING_REVIEW,
        TaskStatus.CLAIMED,
    ):
        return Deadline("no deadline", "none", None)
    left = (due - now).total_seconds()
    at = rfc3339(due)
    if left <= 0:
        return Deadline(f"overdue by {duration_text(left)}", "overdue", at)
    if left <= 3600:
        return Deadline(f"due in {duration_text(left)}", "soon", at)
    return Deadline(f"due in {duration_text(left)}", "ok", at)


@dataclass(frozen=True)
class Verdict:
    confidence: float | None
    threshold: float | None

    @property
    def known(self) -> bool:
        return self.confidence is not None and self.threshold is not None

    @property
    def below(self) -> bool:
        if self.confidence is None or self.threshold is None:
            return False
        return self.confidence < self.threshold

    def percent(self, value: float | None) -> float:
        """Position on a 0–100 % bar (scores outside 0..1 are clamped)."""
        return round(max(0.0, min(1.0, value or 0.0)) * 100, 1)


def verdict(task: Task) -> Verdict:
    raw = task.diagnostic_bundle.get("evaluator_verdict") or {}

    def number(name: str) -> float | None:
        value = raw.get(name) if isinstance(raw, dict) else None
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value)

    return Verdict(number("confidence_score"), number("threshold"))


def scalar_text(value: Any) -> str:
    """A leaf value as a person reads it: strings as they are, others as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True)
class Row:
    path: str
    """A JSON Pointer (``/figures/0/amount``)."""
    value: str
    long: bool


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def flatten(value: Any, path: str = "") -> list[Row]:
    """Every leaf of a JSON document as a row of path and value (empty containers are
    leaves too), in document order."""
    if isinstance(value, dict) and value:
        rows: list[Row] = []
        for key, item in value.items():
            rows += flatten(item, f"{path}/{_escape(str(key))}")
        return rows
    if isinstance(value, list) and value:
        rows = []
        for index, item in enumerate(value):
            rows += flatten(item, f"{path}/{index}")
        return rows
    text = scalar_text(value)
    return [Row(path or "/", text, len(text) > 80 or "\n" in text)]


def is_container(value: Any) -> bool:
    return isinstance(value, dict | list)


def items_of(value: Any) -> list[tuple[str, Any]]:
    """Keys and values of an object, or indexes and items of an array."""
    if isinstance(value, dict):
        return [(str(k), v) for k, v in value.items()]
    if isinstance(value, list):
        return [(str(i), v) for i, v in enumerate(value)]
    return []


def headline(task: Task, accept_language: str | None) -> ShownHeadline:
    """The task's headline and key fields in the reader's locale (``Accept-Language``)."""
    stored = task.headline or default_headline(task.entity_type, task.entity_id, task.reason_code)
    return render(stored, pick_locale(accept_language))
