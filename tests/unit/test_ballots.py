"""Ballots and a rule's reach as data: what a vote did, which requests are retries, who may
veto, and whether the people who may vote can meet a rule."""

from __future__ import annotations

from datetime import UTC, datetime

from signoff.domain.approval_rules import Vote, parse_rule, progress
from signoff.domain.ballots import Effect, receipt, retried, vote_refusal
from signoff.domain.rule_reach import Voter, merge_voters, unmeetable
from signoff.domain.states import Decision
from signoff.errors import ErrorCode

AT = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
STAGES = {"stages": [{"name": "f", "groups": {"f": 1}}, {"name": "l", "groups": {"l": 1}}]}


def vote(voter: str, *groups: str, decision: Decision = Decision.APPROVED, stage: int = 0) -> Vote:
    return Vote(voter, "k", groups, decision, None, 1, "d" * 64, stage, AT, "api")


def effect_of(rule_raw: dict[str, object], earlier: list[Vote], cast: Vote) -> Effect:
    rule = parse_rule(rule_raw)
    return receipt(rule, progress(rule, earlier), progress(rule, [*earlier, cast]), cast).effect


def test_what_a_vote_did() -> None:
    grouped = {"groups": {"f": 1, "l": 1}}
    assert effect_of(grouped, [], vote("a", "f")) is Effect.COUNTED
    assert effect_of(grouped, [vote("a", "f")], vote("b", "f")) is Effect.NO_PLACE
    free = {"approvals": 2, "groups": {"f": 1}}
    assert effect_of(free, [vote("a")], vote("b")) is Effect.NO_PLACE
    assert effect_of(free, [vote("a")], vote("b", "f")) is Effect.COUNTED
    no = Decision.REJECTED
    assert effect_of({"approvals": 2, "veto": False}, [], vote("a", decision=no)) is Effect.AGAINST
    assert effect_of(free, [], vote("a", decision=no)) is Effect.NOT_A_VETO
    assert effect_of(free, [], vote("a", "f", decision=no)) is Effect.VETO
    assert effect_of({"approvals": 2}, [], vote("a", decision=no)) is Effect.VETO


def test_a_retry_is_found_at_any_stage_unless_the_request_names_another() -> None:
    earlier = [vote("bo", "f", "l", stage=0)]
    same = {"voter": "bo", "decision": Decision.APPROVED, "notes": None, "revision": 1}
    assert retried(earlier, **same, stage=None) == earlier[0]
    assert retried(earlier, **same, stage=1) == earlier[0]
    assert retried(earlier, **same, stage=2) is None
    rule = parse_rule(STAGES)
    refused = vote_refusal(rule, earlier, voter="bo", voter_groups=["f", "l"], requested_by=None)
    assert refused is not None
    assert refused.error_code is ErrorCode.ALREADY_VOTED
    named = vote_refusal(
        rule, earlier, voter="bo", voter_groups=["f", "l"], requested_by=None, stage=2
    )
    assert named is None
    wrong = vote_refusal(rule, earlier, voter="x", voter_groups=["l"], requested_by=None, stage=1)
    assert wrong is not None
    assert wrong.error_code is ErrorCode.STAGE_NOT_OPEN


def test_a_rules_reach_counts_each_person_once() -> None:
    both = merge_voters([("bo", "reviewer", ["f"]), ("bo", "supervisor", ["l"])])
    assert both == [Voter("bo", frozenset({"f", "l"}), True)]
    rule = parse_rule({"groups": {"f": 1, "l": 1}})
    short = unmeetable(rule, both, field="approval_rule", staged=False)
    assert short is not None
    assert short.error_code is ErrorCode.UNMEETABLE_APPROVAL_RULE
    more = [*both, Voter("fi", frozenset({"f"}), False)]
    assert unmeetable(rule, more, field="approval_rule", staged=False) is None
    # The producer's principal never votes; an assigned group hides the task from others.
    assert unmeetable(rule, more, field="approval_rule", staged=False, producer="fi")
    staged = parse_rule(STAGES)
    assert unmeetable(staged, both, field="approval_rule", staged=True) is None
    hidden = [Voter("al", frozenset(), False), Voter("fi", frozenset({"f"}), False)]
    two = parse_rule({"approvals": 2})
    assert unmeetable(two, hidden, field="r", staged=False) is None
    narrowed = unmeetable(two, hidden, field="r", staged=False, assigned_group="f")
    assert narrowed is not None
    assert [e.field for e in narrowed.errors] == ["r.approvals"]
