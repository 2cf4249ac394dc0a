"""Subjects, revisions and approvals bound to them.

The subject is the object a human reviews (title, body, sources, recipients, actions…).
Each revision is immutable and identified by its digest: SHA-256 of its RFC 8785 form.
An approval names the revision and digest the reviewer saw; a later change invalidates it
unless the task's ``material_paths`` (JSON Pointers, RFC 6901) say the change does not
matter ("policy decides which parts need re-checking").
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import cache
from typing import TYPE_CHECKING, Any

from signoff.domain.decisions import AfterRevision, RefusalReason, rule_for
from signoff.domain.json_input import join_path
from signoff.domain.states import Decision, TaskStatus
from signoff.domain.tasks import Task
from signoff.errors import Conflict, ErrorCode, FieldError, validation_error

if TYPE_CHECKING:
    from jsonschema import Draft7Validator

#: The action every subject has when it names none.
DEFAULT_ACTION_ID = "execute"
#: Strings longer than this (or with a newline) get a line diff in ``GET …/diff``.
LONG_STRING = 80

SUBJECT_FIELDS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "subject": {
            "type": "object",
            "properties": {
                "actions": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["id"],
                        "properties": {
                            "id": {
                                "type": "string",
                                "minLength": 1,
                                "maxLength": 255,
                                "pattern": "^[^\\x00]+$",
                            }
                        },
                    },
                }
            },
        },
        "source_revisions": {
            "type": "array",
            "items": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[^\\x00]+$"},
        },
        "material_paths": {
            "type": "array",
            "minItems": 1,
            "items": {"type": "string", "pattern": "^(/.*)?$"},
        },
        "approval_ttl_seconds": {"type": "integer", "minimum": 1, "maximum": 315360000},
        "editable": {
            "type": "array",
            "minItems": 1,
            "maxItems": 100,
            "uniqueItems": True,
            "items": {"type": "string", "pattern": "^/", "maxLength": 500},
        },
    },
}


@cache
def _validator() -> Draft7Validator:
    from jsonschema import Draft7Validator  # at the first check: a server starts without it

    return Draft7Validator(SUBJECT_FIELDS_SCHEMA)


@dataclass(frozen=True)
class SubjectInput:
    subject: dict[str, Any]
    source_revisions: list[str]
    material_paths: list[str] | None = None
    approval_ttl_seconds: int | None = None
    editable: list[str] | None = None
    """JSON Pointers a reviewer may edit before approving (``None``: no edits)."""


def parse_subject_fields(body: dict[str, Any], *, allow_policy: bool = True) -> SubjectInput | None:
    """Read ``subject``, ``source_revisions`` and (at escalation) ``material_paths`` and
    ``approval_ttl_seconds`` from a parsed body; ``None`` when there is no subject.

    Raises:
        Unprocessable: ``ERR_VALIDATION`` with the offending paths.
    """
    if type(body) is dict and body.keys().isdisjoint(SUBJECT_FIELDS_SCHEMA["properties"]):
        return None  # none of its fields: nothing the schema could refuse (most bodies)
    errors = []
    for error in _validator().iter_errors(body):
        path = ""
        for part in error.absolute_path:
            path = join_path(path, part)
        errors.append(FieldError(path or "(root)", error.message))
    if errors:
        raise validation_error(errors)
    if "subject" not in body:
        stray = [
            name
            for name in ("source_revisions", "material_paths", "approval_ttl_seconds", "editable")
            if name in body
        ]
        if stray:
            raise validation_error([FieldError(name, "needs a subject") for name in stray])
        return None
    ids = action_ids(body["subject"])
    if len(ids) != len(set(ids)):
        raise validation_error([FieldError("subject.actions", "action ids must be unique")])
    if not allow_policy:
        stray = [
            name for name in ("material_paths", "approval_ttl_seconds", "editable") if name in body
        ]
        if stray:
            raise validation_error(
                [FieldError(name, "is set at escalation only") for name in stray]
            )
    return SubjectInput(
        subject=body["subject"],
        source_revisions=list(body.get("source_revisions", [])),
        material_paths=body.get("material_paths"),
        approval_ttl_seconds=body.get("approval_ttl_seconds"),
        editable=body.get("editable"),
    )


def action_ids(subject: dict[str, Any]) -> list[str]:
    """The actions an approval of ``subject`` allows (one status per action)."""
    actions = subject.get("actions")
    if not actions:
        return [DEFAULT_ACTION_ID]
    return [str(action["id"]) for action in actions]


def _pointer(parent: str, key: str | int) -> str:
    token = str(key).replace("~", "~0").replace("/", "~1")
    return f"{parent}/{token}"


def _walk(old: Any, new: Any, path: str) -> Iterator[tuple[str, str, Any, Any]]:
    """Yield (kind, pointer, old, new) for every difference; kind is added/removed/changed."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in old.keys() | new.keys():
            child = _pointer(path, key)
            if key not in new:
                yield "removed", child, old[key], None
            elif key not in old:
                yield "added", child, None, new[key]
            else:
                yield from _walk(old[key], new[key], child)
    elif isinstance(old, list) and isinstance(new, list):
        for index in range(max(len(old), len(new))):
            child = _pointer(path, index)
            if index >= len(new):
                yield "removed", child, old[index], None
            elif index >= len(old):
                yield "added", child, None, new[index]
            else:
                yield from _walk(old[index], new[index], child)
    elif type(old) is not type(new) or old != new:
        yield "changed", path, old, new


def changed_paths(old: Any, new: Any) -> list[str]:
    """JSON Pointers of every difference between two subjects, sorted."""
    return sorted(pointer for _, pointer, _, _ in _walk(old, new, ""))


#: A line diff is shown only for strings of at most this many characters and lines (each
#: side), and only while the whole diff's :class:`DiffBudget` lasts; beyond, the change
#: carries ``line_diff_too_large`` instead (the whole before and after stay in it).
LINE_DIFF_MAX_CHARS = 200_000
LINE_DIFF_MAX_LINES = 5_000
#: What one diff may spend on line (or word) diffs, all its strings together: characters
#: and lines compared (the longer side of each string) and CPU seconds of the thread that
#: works it out.
DIFF_MAX_CHARS = 400_000
DIFF_MAX_LINES = 10_000
DIFF_CPU_SECONDS = 0.5


class DiffBudget:
    """What is left of one diff's budget. Time is the CPU time of the thread doing the
    work (``time.thread_time``), so a diff is charged for what it computes, not for
    waiting its turn; make the budget in the thread that spends it."""

    def __init__(
        self,
        chars: int = DIFF_MAX_CHARS,
        lines: int = DIFF_MAX_LINES,
        seconds: float = DIFF_CPU_SECONDS,
    ) -> None:
        self.chars = chars
        self.lines = lines
        self._until = time.thread_time() + seconds

    def out_of_time(self) -> bool:
        return time.thread_time() >= self._until

    def take(self, chars: int, lines: int) -> bool:
        """Reserve ``chars`` characters and ``lines`` lines for one comparison; ``False``
        (nothing reserved) when they are not left, or the time is spent."""
        if chars > self.chars or lines > self.lines or self.out_of_time():
            return False
        self.chars -= chars
        self.lines -= lines
        return True


class _OutOfTime(Exception):
    pass


class _BoundedMatcher(difflib.SequenceMatcher[str]):
    """difflib's matcher, giving up once its budget's time is spent.

    Each step it takes is bounded by the line cap (and by difflib's own junk heuristic,
    which drops lines repeated in more than 1% of a long text), so checking between steps
    bounds the whole."""

    def __init__(self, a: list[str], b: list[str], budget: DiffBudget) -> None:
        self._budget = budget
        super().__init__(None, a, b)

    def find_longest_match(
        self, alo: int = 0, ahi: int | None = None, blo: int = 0, bhi: int | None = None
    ) -> difflib.Match:
        if self._budget.out_of_time():
            raise _OutOfTime
        return super().find_longest_match(alo, ahi, blo, bhi)


def _range(start: int, stop: int) -> str:
    """A hunk's range in the unified format (as :func:`difflib.unified_diff` writes it)."""
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start + 1 if length else start},{length}"


def bounded_opcodes(
    a: list[str], b: list[str], budget: DiffBudget
) -> list[tuple[str, int, int, int, int]] | None:
    """:meth:`difflib.SequenceMatcher.get_opcodes` of two token lists (lines, words), or
    ``None`` when ``budget``'s time runs out first. Callers cap the lists' lengths."""
    matcher = _BoundedMatcher(a, b, budget)
    try:
        return [(tag, i1, i2, j1, j2) for tag, i1, i2, j1, j2 in matcher.get_opcodes()]
    except _OutOfTime:
        return None


def unified_line_diff(a: list[str], b: list[str], budget: DiffBudget) -> list[str] | None:
    """The lines of :func:`difflib.unified_diff` (``from``/``to``, no line terminators),
    or ``None`` when ``budget``'s time runs out first."""
    matcher = _BoundedMatcher(a, b, budget)
    try:
        groups = list(matcher.get_grouped_opcodes(3))
    except _OutOfTime:
        return None
    lines = ["--- from", "+++ to"] if groups else []
    for group in groups:
        first, last = group[0], group[-1]
        lines.append(f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines.extend(" " + line for line in a[i1:i2])
                continue
            if tag in ("replace", "delete"):
                lines.extend("-" + line for line in a[i1:i2])
            if tag in ("replace", "insert"):
                lines.extend("+" + line for line in b[j1:j2])
    return lines


TOO_LARGE = {"line_diff_too_large": True}


def _line_diff(old: Any, new: Any, budget: DiffBudget) -> dict[str, Any]:
    """The fields a change of long strings adds: its ``line_diff``, or
    ``line_diff_too_large`` when that is too large to show line by line (the string, or
    what is left of the whole diff's budget)."""
    if not (
        isinstance(old, str)
        and isinstance(new, str)
        and (len(old) > LONG_STRING or len(new) > LONG_STRING or "\n" in old + new)
    ):
        return {}
    chars = max(len(old), len(new))
    if chars > LINE_DIFF_MAX_CHARS:
        return TOO_LARGE
    a, b = old.splitlines(), new.splitlines()
    lines = max(len(a), len(b))
    if lines > LINE_DIFF_MAX_LINES or not budget.take(chars, lines):
        return TOO_LARGE
    found = unified_line_diff(a, b, budget)
    return TOO_LARGE if found is None else {"line_diff": found}


def _source_map(entries: Sequence[str]) -> dict[str, str]:
    return dict(entry.partition(":")[::2] for entry in entries)


def structured_diff(
    old: dict[str, Any], new: dict[str, Any], old_sources: Sequence[str], new_sources: Sequence[str]
) -> dict[str, Any]:
    """``{"added": [{path, value}], "removed": [{path, value}], "changed": [{path, from, to,
    line_diff? | line_diff_too_large?}], "sources": {"added", "removed", "changed": [{source,
    from, to}]}, "truncated": bool}``; ``truncated`` says that at least one change is shown
    without its line diff, as too large.

    CPU-bound for long strings, within one :class:`DiffBudget` for the whole diff: callers
    on an event loop run it in a worker thread."""
    budget = DiffBudget()
    result: dict[str, Any] = {"added": [], "removed": [], "changed": []}
    for kind, pointer, before, after in sorted(_walk(old, new, ""), key=lambda item: item[1]):
        if kind == "added":
            result["added"].append({"path": pointer, "value": after})
        elif kind == "removed":
            result["removed"].append({"path": pointer, "value": before})
        else:
            entry = {"path": pointer, "from": before, "to": after}
            result["changed"].append(entry | _line_diff(before, after, budget))
    was, now = _source_map(old_sources), _source_map(new_sources)
    result["sources"] = {
        "added": sorted(now.keys() - was.keys()),
        "removed": sorted(was.keys() - now.keys()),
        "changed": [
            {"source": s, "from": was[s], "to": now[s]}
            for s in sorted(was.keys() & now.keys())
            if was[s] != now[s]
        ],
    }
    result["truncated"] = any(c.get("line_diff_too_large") for c in result["changed"])
    return result


#: Always material, whatever the task's policy: the actions an approval allows.
ALWAYS_MATERIAL = ("/actions",)


def is_material(pointer: str, material_paths: Sequence[str] | None) -> bool:
    """A change is material unless ``material_paths`` is set and no material path is the
    changed path, inside it, or contains it. ``/actions`` is always material: the policy
    may relax what needs re-reading, never what the approval lets the executor do."""
    if material_paths is None:
        return True
    return any(
        pointer == m
        or pointer.startswith(m + "/")
        or m.startswith(pointer + "/")
        or m == ""
        or pointer == ""
        for m in (*material_paths, *ALWAYS_MATERIAL)
    )


class RevisionEffect(StrEnum):
    KEEP_REVIEWING = "keep_reviewing"
    """In review: the new revision becomes current; resolves naming the old one fail."""
    INVALIDATE_APPROVAL = "invalidate_approval"
    """Approved, material change: the approval is void and the task is reviewed again."""
    CARRY_FORWARD = "carry_forward"
    """Approved, change confined to non-material paths: the approval moves to the new revision."""
    REOPEN_FOR_REVISION = "reopen_for_revision"
    """The reviewer asked for a revision: here it is, back to review."""


def is_material_change(task: Task, paths: Sequence[str], sources_changed: bool) -> bool:
    """Whether a new revision changing ``paths`` needs people to look again: it touches a
    material path, or the sources changed (they need a person to re-check, even if the
    text did not move)."""
    return sources_changed or any(is_material(p, task.material_paths) for p in paths)


def revision_effect(
    task: Task, paths: Sequence[str], now: datetime, *, sources_changed: bool = False
) -> RevisionEffect:
    """What a new revision does to ``task``, by state and by the decision rules.

    Raises:
        Conflict: ``ERR_STATE_CONFLICT`` while executing, after completion, or after a
            rejection (a rejected task is final: escalate anew).
    """
    if task.execution_status is not None:
        raise Conflict(
            f"task {task.id} is {task.execution_status}; its subject can no longer change",
            error_code=ErrorCode.STATE_CONFLICT,
        )
    status = task.effective_status(now)
    if status in (TaskStatus.PENDING_REVIEW, TaskStatus.CLAIMED):
        return RevisionEffect.KEEP_REVIEWING
    after = rule_for(Decision(task.decision)).after_revision if task.decision else None
    if after is AfterRevision.REOPEN:
        return RevisionEffect.REOPEN_FOR_REVISION
    if after is AfterRevision.RECONSIDER:
        if is_material_change(task, paths, sources_changed):
            return RevisionEffect.INVALIDATE_APPROVAL
        return RevisionEffect.CARRY_FORWARD
    raise Conflict(
        f"task {task.id} was {task.decision}; escalate anew", error_code=ErrorCode.STATE_CONFLICT
    )


def execution_refusal(
    task: Task,
    *,
    revision: int,
    digest: str,
    now: datetime,
    approver_authorised: bool,
    source_revoked: bool,
) -> RefusalReason | None:
    """The first reason ``task`` may not execute ``revision``/``digest`` now, or ``None``.

    Mirrors the single conditional update that grants execution; used only to explain a
    refusal after that update matched no row.
    """
    invalidated = task.invalidated_revision is not None and task.invalidated_revision == revision
    if task.status is not TaskStatus.RESOLVED or task.decision is None:
        return RefusalReason.APPROVAL_INVALIDATED if invalidated else RefusalReason.NOT_DECIDED
    refusal = rule_for(Decision(task.decision)).execution_refusal
    if refusal is not None:
        return refusal
    if (revision, digest) != (task.current_revision, task.digest) or (revision, digest) != (
        task.approved_revision,
        task.approved_digest,
    ):
        return RefusalReason.APPROVAL_INVALIDATED if invalidated else RefusalReason.STALE_DIGEST
    if task.approval_expires_at is not None and task.approval_expires_at <= now:
        return RefusalReason.APPROVAL_EXPIRED
    if not approver_authorised:
        return RefusalReason.APPROVER_NOT_AUTHORISED
    if source_revoked:
        return RefusalReason.SOURCE_REVOKED
    return None


def source_matches(entry: str, source_id: str) -> bool:
    """``S01`` revokes ``S01:r7``; ``S01:r7`` revokes exactly that revision."""
    return entry == source_id or entry.partition(":")[0] == source_id
