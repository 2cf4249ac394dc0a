"""Times and field names as a reviewer reads them (re-exported by
:mod:`signoff.console.wording`, which uses them in its sentences)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from signoff.console.views import duration_text

# Times ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class When:
    """A moment as a person reads it, with its machine form for ``<time datetime>``."""

    iso: str
    text: str
    """``3 Dec 2026, 14:05 UTC``."""
    ago: str | None
    """``5 min ago`` (``None`` when no "now" was given, or for a moment ahead)."""


def _moment(value: datetime | str) -> datetime:
    moment = (
        datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) else value
    )
    return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)


def when(value: datetime | str | None, now: datetime | str | None = None) -> When | None:
    """``value`` (a datetime or an RFC 3339 string) in words, to the minute, in UTC."""
    if value is None:
        return None
    moment = _moment(value)
    text = f"{moment.day} {moment:%b %Y, %H:%M} UTC"
    ago = None
    if now is not None:
        seconds = (_moment(now) - moment).total_seconds()
        if seconds >= 0:
            ago = "just now" if seconds < 60 else f"{duration_text(seconds)} ago"
    return When(moment.strftime("%Y-%m-%dT%H:%M:%SZ"), text, ago)


def when_text(value: datetime | str | None, now: datetime | str | None = None) -> str:
    """:func:`when` as plain text (``3 Dec 2026, 14:05 UTC (5 min ago)``), for notices."""
    moment = when(value, now)
    if moment is None:
        return "an unknown time"
    return f"{moment.text} ({moment.ago})" if moment.ago else moment.text


# Field names ---------------------------------------------------------------------------


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _humane(key: str) -> str:
    words = key.replace("_", " ").replace("-", " ").strip()
    return words[:1].upper() + words[1:] if words else "(unnamed)"


def field_label(pointer: str) -> str:
    """A JSON Pointer as a field name: each key with spaces for underscores and a capital
    first letter, each array index counted from 1, joined by ``›``:
    ``/actions/0/id`` → ``Actions › 1 › Id``; ``""`` (the whole document) → ``Everything``."""
    if pointer in ("", "/"):
        return "Everything"
    parts = [_unescape(token) for token in pointer.lstrip("/").split("/")]
    return " › ".join(str(int(p) + 1) if p.isdigit() else _humane(p) for p in parts)


def field_labels(pointers: list[str], most: int = 5) -> str:
    """Several field names for a sentence: ``Title, Body and 3 more``."""
    if not pointers:
        return "nothing in the content"
    names = [field_label(p) for p in pointers[:most]]
    extra = len(pointers) - len(names)
    return ", ".join(names) + (f" and {extra} more" if extra else "")
