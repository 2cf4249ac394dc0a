"""Approval rules: how many people must approve a task, from which groups, in which order.

A task escalated without a rule is decided by one person under a lease, as always. A task
with a rule is decided by **votes**: each reviewer who may decide it votes once per stage,
naming the revision and digest they saw; the task is approved the moment the rule is met
on the current revision, and rejected (or sent back for a revision) by the first vote
against when the rule has a veto. Pure functions: nothing here touches a database.

The rule as data::

    {"approvals": 2, "groups": {"legal": 1, "finance": 1}, "veto": true,
     "exclude": ["requester", "earlier_stages"]}
    {"stages": [{"name": "finance", "groups": {"finance": 1}},
                {"name": "legal", "approvals": 2, "groups": {"legal": 1}}]}
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from signoff.domain.ballot_box import Vote as Vote
from signoff.domain.ballot_box import votes_from_json as votes_from_json
from signoff.domain.decisions import rule_for
from signoff.domain.states import Decision
from signoff.errors import FieldError, validation_error

MAX_APPROVALS = 25
MAX_STAGES = 5
MAX_GROUPS = 10
RULE_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")


class Exclusion(StrEnum):
    """Who may not vote, besides the producer's principal (never)."""

    REQUESTER = "requester"
    """The person named as ``requested_by`` in the escalation."""
    EARLIER_STAGES = "earlier_stages"
    """Anyone who voted at an earlier stage (a later stage needs other eyes)."""


@dataclass(frozen=True)
class Stage:
    name: str
    approvals: int
    """Distinct people who must approve at this stage."""
    groups: tuple[tuple[str, int], ...]
    """Per-group minimums: each approver counts for one group they belong to."""

    @property
    def group_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.groups)

    def restricted(self) -> bool:
        """Whether only members of the named groups can help meet this stage."""
        return bool(self.groups) and sum(n for _, n in self.groups) >= self.approvals

    def may_veto(self, groups: Sequence[str]) -> bool:
        """Whether a person of ``groups`` could approve at this stage in the place of the
        people it names, and so may end it alone: a member of one of its groups, or
        anyone when it names none. Others' votes against are recorded and shown, but
        only as votes against."""
        return not self.groups or bool(set(groups) & set(self.group_names))

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "approvals": self.approvals, "groups": dict(self.groups)}


@dataclass(frozen=True)
class ApprovalRule:
    stages: tuple[Stage, ...]
    veto: bool
    """A rejection or revision request ends the vote (decides the task); without a veto
    it counts as one vote against and the others may still approve."""
    exclude: frozenset[Exclusion]
    name: str | None = None
    """The admin-managed rule it was copied from, if any."""

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "stages": [stage.as_json() for stage in self.stages],
            "veto": self.veto,
            "exclude": sorted(e.value for e in self.exclude),
        }

    def group_names(self) -> frozenset[str]:
        return frozenset(g for stage in self.stages for g in stage.group_names)


APPROVAL_RULE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": (
        "Approval by more than one person (see docs/approvals.md). `approvals`: distinct "
        "people who must approve (default: the sum of the group minimums, at least 1); "
        "`groups`: per-group minimums; `veto` (default true): the first rejection or "
        "revision request decides the task; `exclude`: `requester` and/or `earlier_stages`; "
        "`stages`: ordered stages, each with its own `name`, `approvals` and `groups`."
    ),
    "properties": {
        "approvals": {"type": "integer", "minimum": 1, "maximum": MAX_APPROVALS},
        "groups": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 1}},
        "veto": {"type": "boolean"},
        "exclude": {"type": "array", "items": {"enum": [e.value for e in Exclusion]}},
        "stages": {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_STAGES,
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "minLength": 1, "maxLength": 64},
                    "approvals": {"type": "integer", "minimum": 1, "maximum": MAX_APPROVALS},
                    "groups": {
                        "type": "object",
                        "additionalProperties": {"type": "integer", "minimum": 1},
                    },
                },
            },
        },
    },
}

APPROVAL_FIELDS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approval_rule": {
            "description": (
                "How many people must approve, from which groups, in which order: a rule "
                "(object) or the name of an admin-managed rule. Omitted: one person decides."
            ),
            "oneOf": [{"type": "string"}, APPROVAL_RULE_SCHEMA],
        },
        "requested_by": {
            "type": "string",
            "description": (
                "The person on whose behalf the producer asks (a principal id); shown to "
                "reviewers, and barred from voting when the rule excludes `requester`."
            ),
        },
    },
}


@dataclass(frozen=True)
class ApprovalFields:
    """An escalation's approval fields: ``rule`` given inline, or ``rule_name`` to look up."""

    rule: ApprovalRule | None
    rule_name: str | None
    requested_by: str | None
    staged: bool = False
    """The inline rule was given with ``stages`` (what its fields' names start with)."""


def parse_approval_fields(body: Mapping[str, Any]) -> ApprovalFields:
    """The ``approval_rule`` and ``requested_by`` of an escalation.

    Raises:
        Unprocessable: ``ERR_VALIDATION`` naming the offending field.
    """
    raw = body.get("approval_rule")
    requested_by = body.get("requested_by")
    if requested_by is not None and (
        not isinstance(requested_by, str) or not 1 <= len(requested_by) <= 255
    ):
        raise validation_error([FieldError("requested_by", "must be a principal id (1–255)")])
    if raw is None:
        return ApprovalFields(None, None, requested_by)
    if isinstance(raw, str):
        if not RULE_NAME.match(raw):
            raise validation_error([FieldError("approval_rule", "is not a rule name")])
        return ApprovalFields(None, raw, requested_by)
    staged = isinstance(raw, dict) and "stages" in raw
    return ApprovalFields(parse_rule(raw, "approval_rule"), None, requested_by, staged)


def parse_rule(raw: Any, field: str = "approval_rule", name: str | None = None) -> ApprovalRule:
    """A rule from its JSON form, every bound checked; errors name ``field`` and the path."""
    if not isinstance(raw, dict):
        raise validation_error([FieldError(field, "must be an object or a rule name")])
    allowed = {"approvals", "groups", "veto", "exclude", "stages", "name"}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise validation_error(
            [FieldError(f"{field}.{k}", "is not a known field") for k in unknown]
        )
    veto = raw.get("veto", True)
    if not isinstance(veto, bool):
        raise validation_error([FieldError(f"{field}.veto", "must be true or false")])
    exclude_raw = raw.get("exclude", [])
    known = {e.value for e in Exclusion}
    if not isinstance(exclude_raw, list) or any(
        not isinstance(e, str) or e not in known for e in exclude_raw
    ):
        raise validation_error(
            [FieldError(f"{field}.exclude", f"must list some of: {', '.join(sorted(known))}")]
        )
    if "stages" in raw:
        if "approvals" in raw or "groups" in raw:
            raise validation_error(
                [FieldError(f"{field}.stages", "give approvals and groups in each stage instead")]
            )
        stages_raw = raw["stages"]
        if not isinstance(stages_raw, list) or not 1 <= len(stages_raw) <= MAX_STAGES:
            raise validation_error(
                [FieldError(f"{field}.stages", f"must list 1 to {MAX_STAGES} stages")]
            )
        stages = tuple(
            _stage(s, f"{field}.stages[{i}]", f"stage {i + 1}") for i, s in enumerate(stages_raw)
        )
        names = [s.name for s in stages]
        if len(set(names)) != len(names):
            raise validation_error([FieldError(f"{field}.stages", "stage names must differ")])
    else:
        stages = (_stage({k: raw[k] for k in ("approvals", "groups") if k in raw}, field, "all"),)
    given_name = raw.get("name")
    if given_name is not None and (
        not isinstance(given_name, str) or not RULE_NAME.match(given_name)
    ):
        raise validation_error([FieldError(f"{field}.name", "is not a rule name")])
    return ApprovalRule(
        stages=stages,
        veto=veto,
        exclude=frozenset(Exclusion(e) for e in exclude_raw),
        name=name if name is not None else given_name,
    )


def _stage(raw: Any, field: str, default_name: str) -> Stage:
    if not isinstance(raw, dict):
        raise validation_error([FieldError(field, "must be an object")])
    unknown = sorted(set(raw) - {"name", "approvals", "groups"})
    if unknown:
        raise validation_error(
            [FieldError(f"{field}.{k}", "is not a known field") for k in unknown]
        )
    name = raw.get("name", default_name)
    if not isinstance(name, str) or not 1 <= len(name) <= 64:
        raise validation_error([FieldError(f"{field}.name", "must be text of 1 to 64 characters")])
    groups_raw = raw.get("groups", {})
    if not isinstance(groups_raw, dict) or len(groups_raw) > MAX_GROUPS:
        raise validation_error(
            [FieldError(f"{field}.groups", f"must map at most {MAX_GROUPS} groups to a count")]
        )
    groups: list[tuple[str, int]] = []
    for group, count in groups_raw.items():
        if not group or len(group) > 255:
            raise validation_error([FieldError(f"{field}.groups", "a group name is 1–255 long")])
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_APPROVALS:
            raise validation_error(
                [FieldError(f"{field}.groups.{group}", f"must be a whole number 1–{MAX_APPROVALS}")]
            )
        groups.append((group, count))
    least = max(1, sum(n for _, n in groups))
    approvals = raw.get("approvals", least)
    if (
        isinstance(approvals, bool)
        or not isinstance(approvals, int)
        or not 1 <= approvals <= MAX_APPROVALS
    ):
        raise validation_error(
            [FieldError(f"{field}.approvals", f"must be a whole number 1–{MAX_APPROVALS}")]
        )
    if approvals < least:
        raise validation_error(
            [
                FieldError(
                    f"{field}.approvals",
                    f"must be at least the sum of the group minimums ({least})",
                )
            ]
        )
    return Stage(name=name, approvals=approvals, groups=tuple(sorted(groups)))


def rule_from_json(document: Mapping[str, Any]) -> ApprovalRule:
    """A rule as stored on a task (written by :meth:`ApprovalRule.as_json`)."""
    return ApprovalRule(
        stages=tuple(
            Stage(s["name"], int(s["approvals"]), tuple(sorted(s["groups"].items())))
            for s in document["stages"]
        ),
        veto=bool(document["veto"]),
        exclude=frozenset(Exclusion(e) for e in document["exclude"]),
        name=document.get("name"),
    )


@dataclass(frozen=True)
class Progress:
    """Where a rule stands on the live votes."""

    stage: int
    """The stage being voted on (0-based); the last stage's index once met."""
    stage_name: str
    stages: int
    approvals: int
    """Approvals that count at this stage."""
    required: int
    waiting_on: tuple[str, ...]
    """Groups that must still give approvals at this stage, however the stage is met
    (a group another could stand in for is not waited on)."""
    against: int
    """Votes against (rejections and revision requests) at every stage, vetoing or not."""
    outcome: Decision | None
    """``APPROVED`` when every stage is met; the vetoing decision when a veto ended it."""
    need: Need | None = None
    """Who can still give what at this stage (``None`` once decided)."""

    def text(self) -> str:
        """One line for people: "1 of 2 approvals — needs 1 more approval; legal can give
        it". Every door shows this line."""
        if self.outcome is Decision.APPROVED:
            return f"Approved: {self.required} of {self.required} approvals"
        if self.outcome is not None:
            return f"Ended by a vote to {rule_for(self.outcome).verb}"
        text = f"{self.approvals} of {self.required} approvals"
        if self.stages > 1:
            text = f"Stage {self.stage + 1} of {self.stages} ({self.stage_name}): {text}"
        said = self.need.text() if self.need is not None else ""
        if said:
            text += " — " + said
        if self.against:
            text += f"; {self.against} against"
        return text

    def as_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage + 1,
            "stage_name": self.stage_name,
            "stages": self.stages,
            "approvals": self.approvals,
            "required": self.required,
            "waiting_on": list(self.waiting_on),
            "against": self.against,
            "met": self.outcome is Decision.APPROVED,
            "outcome": self.outcome.value if self.outcome else None,
            "text": self.text(),
        }


@dataclass(frozen=True)
class Need:
    """What a stage still needs: how many approvals, whose approval would count now
    (``anyone``, or the members of ``can_give``), and the least each group must still
    give (``at_least``) however the rest is filled."""

    remaining: int
    anyone: bool
    can_give: tuple[str, ...]
    at_least: tuple[tuple[str, int], ...]

    def text(self) -> str:
        """Empty when anyone who may vote can give every approval still needed."""
        plural = "s" if self.remaining != 1 else ""
        them = "it" if self.remaining == 1 else "them"
        needs = f"needs {self.remaining} more approval{plural}"
        least = " and ".join(f"{n} from {g}" for g, n in self.at_least)
        if self.anyone:
            return f"{needs}, at least {least}" if least else ""
        if self.at_least and sum(n for _, n in self.at_least) == self.remaining:
            if len(self.at_least) == 1:
                return f"{needs}; {self.at_least[0][0]} can give {them}"
            return f"{needs}: {least}"
        text = f"{needs}; {' or '.join(self.can_give)} can give {them}"
        return text + (f", at least {least}" if least else "")


def need(stage: Stage, approvers: Sequence[Sequence[str]]) -> Need:
    """Who can still give what at ``stage`` given the approvers so far (each by their
    groups): an approval counts now when one more approver of that kind raises the
    count, and a group must give at least *n* more when the stage cannot be met with
    fewer of its members, everyone else being as able as can be."""
    counted, _ = filling(stage, approvers)
    remaining = stage.approvals - counted
    names = stage.group_names

    def counts(extra: Sequence[Sequence[str]]) -> int:
        return filling(stage, [*approvers, *extra])[0]

    anyone = counts([()]) > counted
    can_give = tuple(g for g in names if counts([(g,)]) > counted)
    at_least: list[tuple[str, int]] = []
    for group in names:
        others = tuple(g for g in names if g != group)
        least = next(
            k
            for k in range(remaining + 1)
            if counts([names] * k + [others] * (remaining - k)) >= stage.approvals
        )
        if least:
            at_least.append((group, least))
    return Need(remaining, anyone, can_give, tuple(at_least))


def filling(stage: Stage, approvers: Sequence[Sequence[str]]) -> tuple[int, tuple[str, ...]]:
    """How many approvals count at ``stage`` (at most its ``approvals``), and the groups
    whose minimum is still short, given each approver's groups. Each approver fills one
    place of one group they belong to (the best filling: a matching, found by augmenting
    paths); approvers left over fill the places no group claims."""
    places = [group for group, count in stage.groups for _ in range(count)]
    owner: dict[int, int] = {}  # place -> approver index

    def place_for(i: int, seen: set[int]) -> bool:
        for p, group in enumerate(places):
            if group in approvers[i] and p not in seen:
                seen.add(p)
                if p not in owner or place_for(owner[p], seen):
                    owner[p] = i
                    return True
        return False

    for i in range(len(approvers)):
        place_for(i, set())
    free = stage.approvals - len(places)
    counted = len(owner) + min(len(approvers) - len(owner), free)
    short = tuple(dict.fromkeys(g for p, g in enumerate(places) if p not in owner))
    return counted, short


def progress(rule: ApprovalRule, votes: Sequence[Vote]) -> Progress:
    """The rule's standing on ``votes`` (the live ones)."""
    against = [v for v in votes if v.decision is not Decision.APPROVED]
    vetoes = [v for v in against if rule.stages[v.stage].may_veto(v.groups)]
    vetoed = vetoes[0].decision if rule.veto and vetoes else None
    for index, stage in enumerate(rule.stages):
        approvers = [
            v.groups for v in votes if v.stage == index and v.decision is Decision.APPROVED
        ]
        counted, _ = filling(stage, approvers)
        met = counted >= stage.approvals
        needed = None if met or vetoed else need(stage, approvers)
        last = index == len(rule.stages) - 1
        if not met or last:
            return Progress(
                stage=index,
                stage_name=stage.name,
                stages=len(rule.stages),
                approvals=counted,
                required=stage.approvals,
                waiting_on=tuple(g for g, _ in needed.at_least) if needed else (),
                against=len(against),
                outcome=vetoed or (Decision.APPROVED if met else None),
                need=needed,
            )
    raise AssertionError("a rule has at least one stage")
