"""What changed between two revisions, as reviewers read it: field by field, text word by
word. Shared by the console's task page and the resume-link page. Pure functions, except
:func:`change_view`, which runs its bounded word diffs on the diff threads."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from signoff.console.wording import field_label
from signoff.domain.revisions import (
    LINE_DIFF_MAX_CHARS,
    LINE_DIFF_MAX_LINES,
    DiffBudget,
    bounded_opcodes,
)
from signoff.services.cpu import CpuPool

# Word diffs ----------------------------------------------------------------------------

#: Words, runs of spaces, and single other characters: each is one unit of the diff.
_TOKEN = re.compile(r"\w+|\s+|[^\w\s]", re.UNICODE)


@dataclass(frozen=True)
class Piece:
    """A run of text in a word diff: ``same``, ``added`` or ``removed``."""

    kind: str
    text: str


def word_diff(before: str, after: str, budget: DiffBudget | None = None) -> list[Piece] | None:
    """``before`` → ``after`` word by word, or ``None`` when that is too large to show:
    longer than the line diff's bounds (:data:`signoff.domain.revisions.LINE_DIFF_MAX_CHARS`,
    at most ``LINE_DIFF_MAX_LINES`` words per line on average), or more than what is left
    of ``budget`` (a diff's whole budget; a fresh one when not given). CPU work: call it
    off the event loop (:func:`change_view` does)."""
    budget = budget or DiffBudget()
    chars = max(len(before), len(after))
    if chars > LINE_DIFF_MAX_CHARS:
        return None
    a, b = _TOKEN.findall(before), _TOKEN.findall(after)
    if max(len(a), len(b)) > LINE_DIFF_MAX_LINES * 10 or not budget.take(chars, 0):
        return None
    opcodes = bounded_opcodes(a, b, budget)
    if opcodes is None:
        return None
    pieces: list[Piece] = []

    def put(kind: str, text: str) -> None:
        if not text:
            return
        if pieces and pieces[-1].kind == kind:
            pieces[-1] = Piece(kind, pieces[-1].text + text)
        else:
            pieces.append(Piece(kind, text))

    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            put("same", "".join(a[i1:i2]))
            continue
        put("removed", "".join(a[i1:i2]))
        put("added", "".join(b[j1:j2]))
    return pieces


@dataclass(frozen=True)
class Change:
    """One change between two revisions, as the pages show it."""

    label: str
    """The field's name (:func:`field_label`), or ``Source …``."""
    kind: str
    """``changed``, ``added`` or ``removed``."""
    pieces: list[Piece] | None = None
    """The text's changes word by word (text before and after)."""
    before: Any = None
    after: Any = None
    too_large: bool = False
    """Text too long to compare word by word: the new text is in the content below."""
    path: str = ""


@dataclass(frozen=True)
class ChangeView:
    """What changed between revision ``start`` and ``end``."""

    start: int
    end: int
    changes: list[Change] = field(default_factory=list)
    truncated: bool = False
    """Some changes are too large to compare: each says so, and its text is shown whole."""


def _changed(entry: Mapping[str, Any], budget: DiffBudget) -> Change:
    label, before, after = field_label(entry["path"]), entry["from"], entry["to"]
    if entry.get("line_diff_too_large"):
        return Change(label, "changed", too_large=True, path=entry["path"])
    if isinstance(before, str) and isinstance(after, str):
        pieces = word_diff(before, after, budget)
        if pieces is None:
            return Change(label, "changed", too_large=True, path=entry["path"])
        return Change(label, "changed", pieces, before, after, path=entry["path"])
    return Change(label, "changed", None, before, after, path=entry["path"])


def changes_of(diff: Mapping[str, Any]) -> ChangeView:
    """A structured diff (:func:`signoff.domain.revisions.structured_diff`, with ``from``
    and ``to``) as changes in words, in document order. All its word diffs together get
    one :class:`~signoff.domain.revisions.DiffBudget`; a text left when that is spent is
    shown as too large. CPU-bound: see :func:`change_view`."""
    budget = DiffBudget()
    rows: list[Change] = [_changed(entry, budget) for entry in diff.get("changed", [])]
    rows += [
        Change(field_label(e["path"]), "added", after=e["value"], path=e["path"])
        for e in diff.get("added", [])
    ]
    rows += [
        Change(field_label(e["path"]), "removed", before=e["value"], path=e["path"])
        for e in diff.get("removed", [])
    ]
    rows.sort(key=lambda change: change.path)
    sources = diff.get("sources") or {}
    rows += [Change(f"Source {s}", "added", after=s) for s in sources.get("added", [])]
    rows += [Change(f"Source {s}", "removed", before=s) for s in sources.get("removed", [])]
    rows += [
        Change(
            f"Source {s['source']}",
            "changed",
            word_diff(str(s["from"]), str(s["to"]), budget),
            s["from"],
            s["to"],
        )
        for s in sources.get("changed", [])
    ]
    truncated = bool(diff.get("truncated")) or any(row.too_large for row in rows)
    return ChangeView(int(diff["from"]), int(diff["to"]), rows, truncated)


async def change_view(diff: Mapping[str, Any] | None, pool: CpuPool) -> ChangeView | None:
    """:func:`changes_of` on ``pool`` (the diff threads): word diffs are bounded CPU work
    that must not hold up the event loop nor other kinds of work."""
    if diff is None:
        return None
    return await pool.run(changes_of, diff)
