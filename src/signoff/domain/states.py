"""The review task state machine: statuses, roles, and the one transition table.

Every state change anywhere in Signoff (API, workers, tests) goes through
:data:`TRANSITIONS`. The store builds each conditional ``UPDATE``'s ``WHERE`` clause from
the transition's ``sources`` and ``lease`` rule, and the services check ``roles`` and
write the ``event_type`` to the audit trail and outbox, so the rules live here once.

A task waits (``PENDING_REVIEW``), is held under a lease (``CLAIMED``), and ends decided
(``RESOLVED``), expired or cancelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class TaskStatus(StrEnum):
    PENDING_REVIEW = "PENDING_REVIEW"
    CLAIMED = "CLAIMED"
    RESOLVED = "RESOLVED"
    EXPIRED = "EXPIRED"
    """The final escalation level fired before anyone decided."""
    CANCELLED = "CANCELLED"
    """The producer withdrew the task."""


#: Statuses that count as "active" for the one-task-per-entity rule.
ACTIVE_STATUSES: frozenset[TaskStatus] = frozenset({TaskStatus.PENDING_REVIEW, TaskStatus.CLAIMED})


class Decision(StrEnum):
    APPROVED = "APPROVED"
    REJECTED = "REJECTED"
    REVISION_REQUESTED = "REVISION_REQUESTED"
    """The reviewer asks for changes (notes say which); a new revision of the
    subject sends the task back to review."""
    APPROVED_WITH_EDITS = "APPROVED_WITH_EDITS"
    """The reviewer edits the subject (only what the producer declared ``editable``) and
    approves the edit: a new revision authored by the reviewer, the approval bound to it."""
    APPROVED_BY_GRANT = "APPROVED_BY_GRANT"
    """Approved at escalation by a remembered approval (a grant), never by a door."""


class ExecutionStatus(StrEnum):
    """Execution of an approved task (``executing`` → ``completed``), tracked per
    action; the task's status is derived from its actions'."""

    EXECUTING = "EXECUTING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


class Role(StrEnum):
    PRODUCER = "producer"
    REVIEWER = "reviewer"
    SUPERVISOR = "supervisor"
    ADMIN = "admin"
    SYSTEM = "system"
    """Signoff's own workers (the sweeper); no API key can hold it."""


class Action(StrEnum):
    ESCALATE = "escalate"
    CLAIM = "claim"
    RENEW = "renew"
    RELEASE = "release"
    RESOLVE = "resolve"
    REVISE = "revise"
    REOPEN = "reopen"
    CARRY_FORWARD = "carry_forward"
    EXECUTE = "execute"
    COMPLETE_ACTION = "complete_action"
    FAIL_ACTION = "fail_action"
    REVOKE_SOURCE = "revoke_source"
    ESCALATE_LEVEL = "escalate_level"
    REASSIGN = "reassign"
    EXPIRE = "expire"
    TIME_OUT = "time_out"
    CANCEL = "cancel"
    # Supervision: supervisors and admins step in on someone else's task.
    FORCE_RELEASE = "force_release"
    HAND_OVER = "hand_over"
    WITHDRAW = "withdraw"
    RENEW_EXECUTION = "renew_execution"
    EXECUTION_STALLED = "execution_stalled"
    # Approval rules: several people vote; the vote that meets the rule (or vetoes it)
    # decides the task; a material revision voids the votes cast on the old one.
    VOTE = "vote"
    DECIDE_BY_VOTES = "decide_by_votes"
    VOID_VOTES = "void_votes"
    # Remembered approvals: a live grant approves a matching escalation at once.
    APPLY_GRANT = "apply_grant"


class LeaseRule(StrEnum):
    """What a transition requires of the task's lease."""

    NONE = "none"
    """No lease involved (creation)."""
    CLAIMABLE = "claimable"
    """Pending, or claimed with a lapsed lease."""
    HELD = "held"
    """The caller presents the current lease token; a lapsed lease still counts while
    nobody else has claimed the task (renew, release)."""
    CLAIMABLE_OR_OWN = "claimable_or_own"
    """Claimable, or claimed by the caller (a claim by the holder renews the lease under a
    fresh token)."""
    HELD_LIVE = "held_live"
    """The current token *and* a live lease: after a lapse the holder must renew
    explicitly first: a lapsed lease is never silently extended."""


REVIEWERS: frozenset[Role] = frozenset({Role.REVIEWER, Role.SUPERVISOR})


@dataclass(frozen=True)
class Transition:
    action: Action
    sources: frozenset[TaskStatus]
    target: TaskStatus | None
    """``None``: the status does not change."""
    roles: frozenset[Role]
    lease: LeaseRule
    event_type: str
    publish: bool
    """Whether the change is written to the outbox for source systems, besides the audit
    trail (a renewal interests nobody outside)."""
    ends_links: bool
    """Whether the task's resume links stop working (they named the task where it was:
    its group, its wait). A decided task's links stay, to show the decision."""
    by_votes: bool | None = None
    """``False``: only on tasks one person decides (no approval rule: leases apply);
    ``True``: only on tasks decided by votes; ``None``: either."""

    def status_after(self, current: TaskStatus | None = None) -> TaskStatus:
        """The status a task has after this transition from ``current``."""
        result = self.target or current
        if result is None:
            raise ValueError(f"{self.action} needs the current status")
        return result


def _t(
    action: Action,
    sources: set[TaskStatus],
    target: TaskStatus | None,
    roles: frozenset[Role],
    lease: LeaseRule,
    event_type: str,
    *,
    publish: bool = True,
    ends_links: bool = False,
    by_votes: bool | None = None,
) -> tuple[Action, Transition]:
    return action, Transition(
        action, frozenset(sources), target, roles, lease, event_type, publish, ends_links, by_votes
    )


P, C, R = TaskStatus.PENDING_REVIEW, TaskStatus.CLAIMED, TaskStatus.RESOLVED
PRODUCERS = frozenset({Role.PRODUCER})
#: Supervisors and admins: they step in on tasks others hold or cannot decide.
OVERSEERS = frozenset({Role.SUPERVISOR, Role.ADMIN})
SYSTEM = frozenset({Role.SYSTEM})

TRANSITIONS: dict[Action, Transition] = dict(
    [
        _t(Action.ESCALATE, set(), P, PRODUCERS, LeaseRule.NONE, "task.created"),
        # Claimable, or held by the caller: the holder re-claiming gets a fresh lease token
        # (the old one stops working). claim-next takes only tasks nobody holds.
        _t(
            Action.CLAIM,
            {P, C},
            C,
            REVIEWERS,
            LeaseRule.CLAIMABLE_OR_OWN,
            "task.claimed",
            by_votes=False,
        ),
        _t(Action.RENEW, {C}, C, REVIEWERS, LeaseRule.HELD, "task.lease_renewed", publish=False),
        _t(Action.RELEASE, {C}, P, REVIEWERS, LeaseRule.HELD, "task.released"),
        _t(Action.RESOLVE, {C}, R, REVIEWERS, LeaseRule.HELD_LIVE, "task.resolved", by_votes=False),
        # Votes need no lease: several people review a task with an approval rule at once,
        # each vote bound to the revision and digest its voter saw. The vote that meets
        # the rule, or vetoes it, decides the task in the same transaction.
        _t(Action.VOTE, {P}, None, REVIEWERS, LeaseRule.NONE, "task.vote_cast", by_votes=True),
        _t(
            Action.DECIDE_BY_VOTES,
            {P},
            R,
            REVIEWERS,
            LeaseRule.NONE,
            "task.resolved",
            by_votes=True,
        ),
        _t(
            Action.VOID_VOTES,
            {P, R},
            None,
            PRODUCERS,
            LeaseRule.NONE,
            "task.votes_voided",
            by_votes=True,
        ),
        _t(Action.APPLY_GRANT, {P}, R, PRODUCERS, LeaseRule.NONE, "task.resolved", by_votes=False),
        # The reviewed object changes. While in review the new revision simply
        # becomes current; after an approval it invalidates it (REOPEN) unless the change
        # is confined to non-material paths (CARRY_FORWARD); after REVISION_REQUESTED it
        # sends the task back to review (REOPEN).
        _t(Action.REVISE, {P, C}, None, PRODUCERS, LeaseRule.NONE, "task.revised"),
        _t(Action.REOPEN, {R}, P, PRODUCERS, LeaseRule.NONE, "task.approval_invalidated"),
        _t(
            Action.CARRY_FORWARD,
            {R},
            None,
            PRODUCERS,
            LeaseRule.NONE,
            "task.approval_carried_forward",
        ),
        # Execution leases: a grant fences one executor with its own token until the lease
        # lapses (then another execute may take it); the executor renews it; the sweeper
        # reports a lease that lapsed without an outcome, once per lapse.
        _t(Action.EXECUTE, {R}, None, PRODUCERS, LeaseRule.NONE, "task.execution_started"),
        _t(
            Action.RENEW_EXECUTION,
            {R},
            None,
            PRODUCERS,
            LeaseRule.NONE,
            "task.execution_renewed",
            publish=False,
        ),
        _t(
            Action.EXECUTION_STALLED,
            {R},
            None,
            SYSTEM,
            LeaseRule.NONE,
            "task.execution_stalled",
        ),
        _t(Action.COMPLETE_ACTION, {R}, None, PRODUCERS, LeaseRule.NONE, "task.action_completed"),
        _t(Action.FAIL_ACTION, {R}, None, PRODUCERS, LeaseRule.NONE, "task.action_failed"),
        _t(Action.REVOKE_SOURCE, {P, C, R}, None, PRODUCERS, LeaseRule.NONE, "task.source_revoked"),
        # Waiting with deadlines. The sweeper applies each escalation level once;
        # the last one expires the task (a compensation trigger). Producers may withdraw.
        _t(Action.ESCALATE_LEVEL, {P, C}, None, SYSTEM, LeaseRule.NONE, "task.escalated"),
        # Reassignment hands the task to another group: a lease held in the old one ends.
        _t(Action.REASSIGN, {P, C}, P, SYSTEM, LeaseRule.NONE, "task.escalated", ends_links=True),
        _t(
            Action.EXPIRE,
            {P, C},
            TaskStatus.EXPIRED,
            SYSTEM,
            LeaseRule.NONE,
            "task.expired",
            ends_links=True,
        ),
        # The producer's time limit ran out with ``reject`` as its outcome: the task is
        # decided REJECTED by the sweeper, a decision like any other for source systems.
        _t(Action.TIME_OUT, {P, C}, R, SYSTEM, LeaseRule.NONE, "task.resolved"),
        _t(
            Action.CANCEL,
            {P, C},
            TaskStatus.CANCELLED,
            PRODUCERS,
            LeaseRule.NONE,
            "task.cancelled",
            ends_links=True,
        ),
        # Supervision. A force release ends the holder's lease (their token stops working)
        # and is published like a release; a hand-over reassigns the task to a group (a
        # lease held ends); a withdrawal cancels it on the producer's behalf.
        _t(Action.FORCE_RELEASE, {C}, P, OVERSEERS, LeaseRule.NONE, "task.released"),
        _t(
            Action.HAND_OVER,
            {P, C},
            P,
            OVERSEERS,
            LeaseRule.NONE,
            "task.reassigned",
            ends_links=True,
        ),
        _t(
            Action.WITHDRAW,
            {P, C},
            TaskStatus.CANCELLED,
            OVERSEERS,
            LeaseRule.NONE,
            "task.cancelled",
            ends_links=True,
        ),
    ]
)


def transition(action: Action) -> Transition:
    return TRANSITIONS[action]
