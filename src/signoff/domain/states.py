"""The review task state machine: statuses, roles, and the one transition table.

Every state change anywhere in Signoff (API, workers, tests) goes through
:data:`TRANSITIONS`. The store builds each conditional ``UPDATE``'s ``WHERE`` clause from
the transition's ``sources`` and ``lease`` rule, and the services check ``roles`` and
write the ``event_type`` to the audit trail and outbox, so the rules live here once.

Seed ``000`` section 3 names the statuses ``PENDING_REVIEW``, ``CLAIMED``, ``RESOLVED``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class TaskStatus(StrEnum):
    PENDING_REVIEW = "PENDING_REVIEW"
    CLAIMED = "CLAIMED"
    RESOLVED = "RESOLVED"


#: Statuses that count as "active" for the one-task-per-entity rule (seed 000, section 2).
ACTIVE_STATUSES: frozenset[TaskStatus] = frozenset({TaskStatus.PENDING_REVIEW, TaskStatus.CLAIMED})


class Decision(StrEnum):
    APPROVED = "APPROVED"
    REJECTED = "REJECTED"


class Role(StrEnum):
    PRODUCER = "producer"
    REVIEWER = "reviewer"
    SUPERVISOR = "supervisor"
    ADMIN = "admin"


class Action(StrEnum):
    ESCALATE = "escalate"
    CLAIM = "claim"
    RENEW = "renew"
    RELEASE = "release"
    RESOLVE = "resolve"


class LeaseRule(StrEnum):
    """What a transition requires of the task's lease."""

    NONE = "none"
    """No lease involved (creation)."""
    CLAIMABLE = "claimable"
    """Pending, or claimed with a lapsed lease (seed 000's claim ``WHERE``)."""
    HELD = "held"
    """The caller presents the current lease token; a lapsed lease still counts while
    nobody else has claimed the task (renew, release)."""
    HELD_LIVE = "held_live"
    """The current token *and* a live lease: after a lapse the holder must renew
    explicitly first (seed 000's closing rule)."""


REVIEWERS: frozenset[Role] = frozenset({Role.REVIEWER, Role.SUPERVISOR})


@dataclass(frozen=True)
class Transition:
    action: Action
    sources: frozenset[TaskStatus]
    target: TaskStatus
    roles: frozenset[Role]
    lease: LeaseRule
    event_type: str
    publish: bool
    """Whether the change is written to the outbox for source systems, besides the audit
    trail (a renewal interests nobody outside)."""


def _t(
    action: Action,
    sources: set[TaskStatus],
    target: TaskStatus,
    roles: frozenset[Role],
    lease: LeaseRule,
    event_type: str,
    *,
    publish: bool = True,
) -> tuple[Action, Transition]:
    return action, Transition(action, frozenset(sources), target, roles, lease, event_type, publish)


P, C, R = TaskStatus.PENDING_REVIEW, TaskStatus.CLAIMED, TaskStatus.RESOLVED

TRANSITIONS: dict[Action, Transition] = dict(
    [
        _t(Action.ESCALATE, set(), P, frozenset({Role.PRODUCER}), LeaseRule.NONE, "task.created"),
        _t(Action.CLAIM, {P, C}, C, REVIEWERS, LeaseRule.CLAIMABLE, "task.claimed"),
        _t(Action.RENEW, {C}, C, REVIEWERS, LeaseRule.HELD, "task.lease_renewed", publish=False),
        _t(Action.RELEASE, {C}, P, REVIEWERS, LeaseRule.HELD, "task.released"),
        _t(Action.RESOLVE, {C}, R, REVIEWERS, LeaseRule.HELD_LIVE, "task.resolved"),
    ]
)


def transition(action: Action) -> Transition:
    return TRANSITIONS[action]
