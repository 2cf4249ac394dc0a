"""Escalation policies: what happens, level by level, when a task waits too long.

Level *k* fires ``after_seconds`` after level *k−1* (level 1: after the escalation, or at
the request's own ``deadline``). ``remind`` notifies; ``reassign`` moves the task to
another group (revoking the old group's resume links) and notifies; ``expire`` ends the
wait: the task becomes ``EXPIRED`` and ``task.expired`` hands over to compensation;
``reject`` ends it with the decision REJECTED (``task.resolved``). Every policy ends with
``expire`` or ``reject`` — nothing waits forever.

A producer's ``timeout`` (:class:`Timeout`) makes a task's own levels from its policy
(:func:`with_timeout`); it never approves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from signoff.domain.headline import parse_headline_fields
from signoff.errors import FieldError, validation_error

NOTIFY_TARGET = re.compile(r"^(group|principal):[^\x00-\x1f]{1,255}$")
#: Policy names appear in URLs (/escalation-policies/{name}).
POLICY_NAME = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
GROUP_NAME = re.compile(r"^[^\x00-\x1f]{1,100}$")


class LevelAction(StrEnum):
    REMIND = "remind"
    REASSIGN = "reassign"
    EXPIRE = "expire"
    REJECT = "reject"


#: The levels that end the wait; only a policy's last level is one, and it must be.
FINAL_ACTIONS = frozenset({LevelAction.EXPIRE, LevelAction.REJECT})
#: The notes of a rejection made because a producer's time limit ran out.
TIMEOUT_NOTES = "No decision within the time limit the producer set: rejected when it ran out."


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
    headline: dict[str, Any] | None = None
    """The headline declaration of tasks escalated under it that declare none."""

    def as_json(self) -> dict[str, Any]:
        return ({"headline": self.headline} if self.headline else {}) | {
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


def parse_policy(name: Any, levels: Any, headline: Any = None) -> Policy:
    """Validate a policy document (``headline``: the default headline declaration of its
    tasks, checked as an escalation's).

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
            errors.append(
                FieldError(f"{where}.action", "must be remind, reassign, expire or reject")
            )
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
        if action in FINAL_ACTIONS and index != len(levels) - 1:
            errors.append(FieldError(f"{where}.action", "only the last level may expire or reject"))
        if isinstance(after, int):
            parsed.append(
                Level(after, action, tuple(notify), group if isinstance(group, str) else None)
            )
    if (
        levels
        and isinstance(levels[-1], dict)
        and not (
            isinstance(last := levels[-1].get("action"), str)
            and last in {a.value for a in FINAL_ACTIONS}
        )
    ):
        errors.append(
            FieldError(f"levels[{len(levels) - 1}].action", "the last level must expire or reject")
        )
    if errors:
        raise validation_error(errors)
    spec = parse_headline_fields({"headline": headline})
    return Policy(name=name, levels=tuple(parsed), headline=spec.declaration() if spec else None)


def policy_from_json(document: dict[str, Any]) -> Policy:
    return parse_policy(document["name"], document["levels"], document.get("headline"))


class TimeoutOutcome(StrEnum):
    """What a producer's time limit does when it runs out."""

    REJECT = "reject"
    EXPIRE = "expire"
    ESCALATE = "escalate"
    """Reassign to a group, whose reviewers are notified; the policy's final level follows."""
    APPROVE = "approve"
    """Refused: only a person approves (``ERR_TIMEOUT_APPROVAL_NOT_ALLOWED``)."""


@dataclass(frozen=True)
class Timeout:
    after_seconds: int
    outcome: TimeoutOutcome
    group: str | None = None


def with_timeout(policy: Policy, timeout: Timeout) -> Policy:
    """The task's own levels under a producer's time limit: its outcome fires
    ``after_seconds`` after the escalation, in place of the policy's levels. To escalate
    reassigns to the group (notifying it), then the policy's final level follows after its
    own ``after_seconds``: nothing waits forever."""
    final = {
        TimeoutOutcome.REJECT: LevelAction.REJECT,
        TimeoutOutcome.EXPIRE: LevelAction.EXPIRE,
    }
    if timeout.outcome in final:
        return Policy(policy.name, (Level(timeout.after_seconds, final[timeout.outcome]),))
    assert timeout.outcome is TimeoutOutcome.ESCALATE
    assert timeout.group is not None
    group = timeout.group
    reassign = Level(timeout.after_seconds, LevelAction.REASSIGN, (f"group:{group}",), group)
    return Policy(policy.name, (reassign, policy.levels[-1]))
