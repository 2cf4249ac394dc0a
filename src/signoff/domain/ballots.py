"""Ballots: whether a person may vote on a task with an approval rule now, at which stage,
whether a request is a retry of a vote already cast, and what a recorded vote did.

Stages are numbered from 1 wherever a person or a client sees them (``approval_progress``,
``votes[].stage``, a vote's ``stage`` field, the answer's ``vote``). A vote names the stage
it is meant for with ``stage``; a vote without it is meant for the stage being voted on,
unless its voter already voted at an earlier one: then the same request again is a retry
of that vote (its answer was lost), never a second vote, and a second vote at a later stage
must say so. Pure functions: nothing here touches a database.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from signoff.domain.approval_rules import ApprovalRule, Exclusion, Progress, Vote, progress
from signoff.domain.decisions import rule_for
from signoff.domain.states import Decision
from signoff.errors import Conflict, ErrorCode, Forbidden, SignoffError


def vote_refusal(
    rule: ApprovalRule,
    votes: Sequence[Vote],
    *,
    voter: str,
    voter_groups: Sequence[str],
    requested_by: str | None,
    stage: int | None = None,
) -> SignoffError | None:
    """Whether ``voter`` may vote now (the decision rules and the revision are checked
    before this, as for any decision): not the requester when excluded, only at the stage
    being voted on, not twice at a stage, not again after an earlier stage when excluded
    (nor without naming the stage), and only from the stage's groups when only they can
    meet it. ``stage`` is the stage the vote names (from 1), if it names one."""
    if Exclusion.REQUESTER in rule.exclude and requested_by == voter:
        return Forbidden(
            f"{voter} requested this and may not vote on it",
            error_code=ErrorCode.SELF_APPROVAL,
        )
    now = progress(rule, votes)
    if stage is not None and stage != now.stage + 1:
        return stage_not_open(now, stage)
    if any(v.voter == voter and v.stage == now.stage for v in votes):
        return already_voted(voter)
    earlier = [v for v in votes if v.voter == voter and v.stage < now.stage]
    if Exclusion.EARLIER_STAGES in rule.exclude and earlier:
        return Forbidden(
            f"{voter} voted at an earlier stage; this stage needs someone else",
            error_code=ErrorCode.NOT_ELIGIBLE_TO_VOTE,
        )
    if earlier and stage is None:
        return Conflict(
            f"{voter} voted at stage {earlier[-1].stage + 1}; a vote at stage "
            f'{now.stage + 1} ({now.stage_name}) must name it: "stage": {now.stage + 1}',
            error_code=ErrorCode.ALREADY_VOTED,
            extra={"stage": now.stage + 1},
        )
    current = rule.stages[now.stage]
    if current.restricted() and not set(voter_groups) & set(current.group_names):
        groups = " or ".join(current.group_names)
        return Forbidden(
            f"this stage ({current.name}) is decided by {groups}; {voter} is in none of them",
            error_code=ErrorCode.NOT_ELIGIBLE_TO_VOTE,
            extra={"groups": list(current.group_names)},
        )
    return None


def already_voted(voter: str) -> SignoffError:
    return Conflict(
        f"{voter} has already voted on this revision; a person's vote counts once",
        error_code=ErrorCode.ALREADY_VOTED,
    )


def stage_not_open(now: Progress, stage: int) -> SignoffError:
    return Conflict(
        f"stage {stage} is not being voted on; stage {now.stage + 1} ({now.stage_name}) is",
        error_code=ErrorCode.STAGE_NOT_OPEN,
        extra={"stage": now.stage + 1},
    )


def retried(
    votes: Sequence[Vote],
    *,
    voter: str,
    decision: Decision,
    notes: str | None,
    revision: int | None,
    stage: int | None,
) -> Vote | None:
    """The live vote this request repeats exactly (a retry: its answer was lost), if any.
    Without ``stage`` a request repeats the voter's identical vote at any stage; with it,
    only their vote at that stage (a vote meant for a later stage says so)."""
    for cast in votes:
        mine = cast.voter == voter and cast.same_as(decision, notes, revision)
        if mine and (stage is None or cast.stage == stage - 1):
            return cast
    return None


class Effect(StrEnum):
    """What a vote did, as the answer to it says (``vote.reason``)."""

    COUNTED = "counted"
    """An approval that filled a place at its stage."""
    NO_PLACE = "no_place"
    """An approval recorded where it fills no place: the minimums of the voter's groups
    are met and no place is left that anyone may fill."""
    AGAINST = "against"
    """A vote against under a rule without a veto: one vote against, shown to everyone."""
    VETO = "veto"
    """A vote against that ended the vote (decided the task)."""
    NOT_A_VETO = "not_a_veto"
    """A vote against by someone outside the stage's groups: recorded and shown as a vote
    against, but only the people a stage names may end it alone."""
    RETRY = "retry"
    """The voter's identical vote again: nothing written, the earlier vote stands."""


_COUNTS = frozenset({Effect.COUNTED, Effect.AGAINST, Effect.VETO})


@dataclass(frozen=True)
class Receipt:
    """What the answer to a vote says of it: whether it was recorded and whether it counted."""

    effect: Effect
    stage: int
    """The stage the vote is at (from 1)."""
    decision: Decision

    @property
    def recorded(self) -> bool:
        return self.effect is not Effect.RETRY

    @property
    def counted(self) -> bool:
        return self.effect in _COUNTS

    def text(self) -> str:
        """One sentence for people."""
        verb = rule_for(self.decision).verb
        return {
            Effect.COUNTED: f"Your vote to {verb} is recorded and counts.",
            Effect.NO_PLACE: (
                f"Your vote to {verb} is recorded but does not count: the places your "
                "groups can fill at this stage are taken."
            ),
            Effect.AGAINST: f"Your vote to {verb} is recorded and counts as one vote against.",
            Effect.VETO: f"Your vote to {verb} is recorded and ends the vote.",
            Effect.NOT_A_VETO: (
                f"Your vote to {verb} is recorded as a vote against but does not end the "
                "vote: only the groups this stage names can."
            ),
            Effect.RETRY: f"Your vote to {verb} was already recorded; nothing changed.",
        }[self.effect]

    def as_json(self) -> dict[str, Any]:
        return {
            "recorded": self.recorded,
            "counted": self.counted,
            "reason": self.effect.value,
            "stage": self.stage,
            "text": self.text(),
        }


def receipt(rule: ApprovalRule, before: Progress, after: Progress, cast: Vote) -> Receipt:
    """What ``cast`` did: the standing ``before`` it and ``after`` it."""
    if cast.decision is Decision.APPROVED:
        moved = (
            after.outcome is Decision.APPROVED
            or after.stage != before.stage
            or after.approvals > before.approvals
        )
        effect = Effect.COUNTED if moved else Effect.NO_PLACE
    elif not rule.veto:
        effect = Effect.AGAINST
    elif after.outcome is not None:
        effect = Effect.VETO
    else:
        effect = Effect.NOT_A_VETO
    return Receipt(effect, cast.stage + 1, cast.decision)


def retry_receipt(earlier: Vote) -> Receipt:
    return Receipt(Effect.RETRY, earlier.stage + 1, earlier.decision)
