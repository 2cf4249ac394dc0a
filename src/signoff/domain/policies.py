"""Escalation policies: what happens, level by level, when a task waits too long.

Level *k* fires ``after_seconds`` after level *k−1* (level 1: after the escalation, or at
the request's own ``deadline``). ``remind`` notifies; ``reassign`` moves the task to
another group (revoking the old group's resume links) and notifies; ``expire`` ends the
wait: the task becomes ``EXPIRED`` and ``task.expired`` hands over to compensation.
Every policy ends with ``expire`` — nothing waits forever.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from signoff.errors import FieldError, validation_error

NOTIFY_TARGET = re.compile(r"^(group|principal):[^\x00-\x1f]{1,255}$")
#: Policy names appear in URLs (/escalation-policies/{name}).
POLICY_NAME = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
GROUP_NAME = re.compile(r"^[^\x00-\x1f]{1,100}$")


class LevelAction(StrEnum):
    REMIND = "remind"
    REASSIGN = "reassign"
    EXPIRE = "expire"


@dataclass(frozen=True)
class Level:
    after_seconds: int
    action: LevelAction
    notify: tuple[str, ...] = ()
    assign_group: str | None = None


@dataclass(frozen=True)
class Policy:
    name: str
    levels: tuple[Level, ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "levels": [
                {
                    "after_seconds": level.after_seconds,
                    "action": level.action.value,
                    "notify": list(level.notify),
                    **({"assign_group": level.assign_group} if level.assign_group else {}),
                }
                for level in self.levels
            ],
        }

    def level(self, number: int) -> Level | None:
        """Level ``number`` (1-based), or ``None`` past the last."""
        return self.levels[number - 1] if 1 <= number <= len(self.levels) else None

    def first_deadline(self, now: datetime, requested: datetime | None) -> datetime:
        return (
            requested
            if requested is not None
            else now + timedelta(seconds=self.levels[0].after_seconds)
        )

    def final_deadline(self, level_fired: int, deadline: datetime) -> datetime:
        """When the task expires if nobody decides: ``deadline`` is when level
        ``level_fired + 1`` fires."""
        remaining = sum(level.after_seconds for level in self.levels[level_fired + 1 :])
        return deadline + timedelta(seconds=remaining)


def parse_policy(name: Any, levels: Any) -> Policy:
    """Validate a policy document.

    Raises:
        Unprocessable: ``ERR_VALIDATION`` naming each offending field.
    """
    errors: list[FieldError] = []
    if not isinstance(name, str) or not POLICY_NAME.match(name):
        errors.append(FieldError("name", "must be 1 to 100 letters, digits, '.', '_' or '-'"))
    if not isinstance(levels, list) or not levels:
        raise validation_error([*errors, FieldError("levels", "must be a non-empty list")])
    parsed: list[Level] = []
    for index, raw in enumerate(levels):
        where = f"levels[{index}]"
        if not isinstance(raw, dict):
            errors.append(FieldError(where, "must be an object"))
            continue
        unknown = set(raw) - {"after_seconds", "action", "notify", "assign_group"}
        errors += [FieldError(f"{where}.{key}", "is not allowed") for key in sorted(unknown)]
        after = raw.get("after_seconds")
        if not isinstance(after, int) or isinstance(after, bool) or not 1 <= after <= 365 * 86400:
            errors.append(
                FieldError(f"{where}.after_seconds", "must be an integer from 1 to 31536000")
            )
        try:
            action = LevelAction(str(raw.get("action")))
        except ValueError:
            errors.append(FieldError(f"{where}.action", "must be remind, reassign or expire"))
            continue
        notify = raw.get("notify", [])
        if not isinstance(notify, list) or not all(
            isinstance(t, str) and NOTIFY_TARGET.match(t) for t in notify
        ):
            errors.append(
                FieldError(f"{where}.notify", "entries look like group:<name> or principal:<id>")
            )
            notify = []
        group = raw.get("assign_group")
        if action is LevelAction.REASSIGN and not (
            isinstance(group, str) and GROUP_NAME.match(group)
        ):
            errors.append(
                FieldError(f"{where}.assign_group", "is required to reassign (1-100 characters)")
            )
        if action is LevelAction.EXPIRE and index != len(levels) - 1:
            errors.append(FieldError(f"{where}.action", "only the last level may expire"))
        if isinstance(after, int):
            parsed.append(
                Level(after, action, tuple(notify), group if isinstance(group, str) else None)
            )
    if (
        levels
        and isinstance(levels[-1], dict)
        and levels[-1].get("action") != LevelAction.EXPIRE.value
    ):
        errors.append(FieldError(f"levels[{len(levels) - 1}].action", "the last level must expire"))
    if errors:
        raise validation_error(errors)
    return Policy(name=name, levels=tuple(parsed))


def policy_from_json(document: dict[str, Any]) -> Policy:
    return parse_policy(document["name"], document["levels"])
