"""Whether an approval rule can be met by the people who may vote: a rule whose groups have
fewer members than it asks for, or that asks for more approvals than there are people to
give them, would wait for its deadline and never be met. It is checked when a rule is
saved and when a task is escalated with one; people who leave later do not reopen the
question (the task then waits for its deadline, as any task nobody decides)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from signoff.domain.approval_rules import ApprovalRule, Exclusion, Stage, filling
from signoff.domain.states import Role
from signoff.errors import ErrorCode, FieldError, SignoffError, Unprocessable


@dataclass(frozen=True)
class Voter:
    """A person who may vote: every live key and enabled account of one principal, merged."""

    principal_id: str
    groups: frozenset[str]
    supervisor: bool


def merge_voters(rows: Iterable[tuple[str, str, Sequence[str] | None]]) -> list[Voter]:
    """One :class:`Voter` per principal from ``(principal_id, role, groups)`` rows of the
    reviewer and supervisor keys and accounts: their groups joined."""
    groups: dict[str, set[str]] = {}
    supervisors: set[str] = set()
    for principal_id, role, names in rows:
        groups.setdefault(principal_id, set()).update(g for g in names or () if isinstance(g, str))
        if role == Role.SUPERVISOR.value:
            supervisors.add(principal_id)
    return [
        Voter(principal_id, frozenset(names), principal_id in supervisors)
        for principal_id, names in sorted(groups.items())
    ]


def unmeetable(
    rule: ApprovalRule,
    voters: Sequence[Voter],
    *,
    field: str,
    staged: bool,
    assigned_group: str | None = None,
    producer: str | None = None,
    requested_by: str | None = None,
) -> SignoffError | None:
    """422 ``ERR_UNMEETABLE_APPROVAL_RULE`` naming each stage's short group (or its
    ``approvals``) when the people who could vote cannot meet it; ``None`` when they can.
    What is known is used: at an escalation, the producer's principal (who never votes),
    the excluded requester and the task's group (reviewers outside it cannot read it)."""
    excluded = {producer} if producer else set()
    if requested_by and Exclusion.REQUESTER in rule.exclude:
        excluded.add(requested_by)
    eligible = [
        v
        for v in voters
        if v.principal_id not in excluded
        and (assigned_group is None or v.supervisor or assigned_group in v.groups)
    ]
    errors: list[FieldError] = []
    for index, stage in enumerate(rule.stages):
        prefix = f"{field}.stages[{index}]" if staged else field
        errors += _stage_shortfall(stage, eligible, prefix)
    if not errors:
        return None
    return Unprocessable(
        "this approval rule cannot be met by the people who may vote: add members to its "
        "groups first, or ask for fewer",
        error_code=ErrorCode.UNMEETABLE_APPROVAL_RULE,
        errors=errors,
    )


def _stage_shortfall(stage: Stage, eligible: Sequence[Voter], prefix: str) -> list[FieldError]:
    # People with the same groups (as far as this stage asks) are interchangeable, and a
    # stage has at most its ``approvals`` places: that many of each kind decide it.
    kinds: dict[tuple[str, ...], int] = {}
    for voter in eligible:
        kind = tuple(sorted(voter.groups & set(stage.group_names)))
        kinds[kind] = kinds.get(kind, 0) + 1
    approvers = [kind for kind, n in kinds.items() for _ in range(min(n, stage.approvals))]
    counted, short = filling(stage, approvers)
    if counted >= stage.approvals:
        return []
    if not short:
        return [
            FieldError(
                f"{prefix}.approvals",
                f"asks for {stage.approvals} people; {len(eligible)} may vote",
            )
        ]
    needed = dict(stage.groups)
    return [
        FieldError(
            f"{prefix}.groups.{group}",
            f"asks for {needed[group]}; "
            f"{sum(1 for v in eligible if group in v.groups)} who may vote belong to it",
        )
        for group in short
    ]
