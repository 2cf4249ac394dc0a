"""Approval rules as data: parsing, where a rule stands on a set of votes, who may vote."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from signoff.domain.approval_rules import (
    Vote,
    parse_rule,
    progress,
    rule_from_json,
)
from signoff.domain.ballots import vote_refusal
from signoff.domain.messages import render_notification
from signoff.domain.states import Decision
from signoff.errors import ErrorCode, Unprocessable

AT = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def vote(voter: str, *groups: str, decision: Decision = Decision.APPROVED, stage: int = 0) -> Vote:
    return Vote(
        voter=voter,
        key_id="00000000-0000-0000-0000-000000000001",
        groups=groups,
        decision=decision,
        notes=None,
        revision=1,
        digest="d" * 64,
        stage=stage,
        at=AT,
        door="api",
    )


def test_defaults_and_the_stored_form_round_trip() -> None:
    rule = parse_rule({"groups": {"legal": 1, "finance": 1}})
    assert rule.stages[0].approvals == 2
    assert rule.veto is True
    assert rule_from_json(rule.as_json()) == rule
    assert parse_rule({}).stages[0].approvals == 1


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"approvals": 26}, "approval_rule.approvals"),
        ({"approvals": True}, "approval_rule.approvals"),
        ({"groups": {"a": 0}}, "approval_rule.groups.a"),
        ({"stages": [{"name": "x"}, {"name": "x"}]}, "approval_rule.stages"),
        ({"stages": [{"approvals": 2, "groups": {"a": 3}}]}, "approval_rule.stages[0].approvals"),
        ([], "approval_rule"),
        ({"exclude": [{"who": "requester"}]}, "approval_rule.exclude"),
        ({"name": 7}, "approval_rule.name"),
    ],
)
def test_bad_rules_name_the_field(raw: Any, field: str) -> None:
    with pytest.raises(Unprocessable) as refused:
        parse_rule(raw)
    assert [e.field for e in refused.value.errors] == [field]


def test_group_places_are_filled_by_the_best_matching() -> None:
    rule = parse_rule({"groups": {"legal": 1, "finance": 1}})
    # bo (in both) first takes legal's place; fiona needs finance's: bo moves over.
    state = progress(rule, [vote("lena", "legal"), vote("bo", "legal", "finance")])
    assert (state.approvals, state.outcome) == (2, Decision.APPROVED)
    short = progress(rule, [vote("lena", "legal"), vote("lars", "legal")])
    assert (short.approvals, short.waiting_on, short.outcome) == (1, ("finance",), None)
    assert short.text() == "1 of 2 approvals — needs 1 more approval; finance can give it"


def test_free_places_take_anyone_beyond_the_group_minimums() -> None:
    rule = parse_rule({"approvals": 3, "groups": {"legal": 1}})
    state = progress(rule, [vote("a"), vote("b"), vote("c")])
    assert (state.approvals, state.waiting_on) == (2, ("legal",))
    done = progress(rule, [vote("a"), vote("b"), vote("lena", "legal")])
    assert done.outcome is Decision.APPROVED


def test_a_veto_ends_it_and_without_one_a_rejection_counts_against() -> None:
    against = vote("x", decision=Decision.REJECTED)
    assert progress(parse_rule({"approvals": 2}), [against]).outcome is Decision.REJECTED
    counted = progress(parse_rule({"approvals": 2, "veto": False}), [against, vote("a")])
    assert (counted.outcome, counted.against, counted.approvals) == (None, 1, 1)
    assert counted.text() == "1 of 2 approvals; 1 against"


def test_stages_are_met_in_order() -> None:
    rule = parse_rule(
        {"stages": [{"name": "finance", "groups": {"finance": 1}}, {"name": "legal"}]}
    )
    first = progress(rule, [])
    assert (first.stage, first.stage_name) == (0, "finance")
    second = progress(rule, [vote("f", "finance")])
    assert (second.stage, second.approvals, second.outcome) == (1, 0, None)
    assert second.text().startswith("Stage 2 of 2 (legal)")
    # A legal-stage vote cast before finance met its part does not count for legal.
    assert progress(rule, [vote("l", stage=0)]).stage == 0


def test_who_may_vote() -> None:
    rule = parse_rule(
        {
            "stages": [{"name": "finance", "groups": {"finance": 1}}, {"name": "any"}],
            "exclude": ["requester", "earlier_stages"],
        }
    )

    def refused(voter: str, groups: tuple[str, ...], votes: list[Vote]) -> ErrorCode | None:
        error = vote_refusal(rule, votes, voter=voter, voter_groups=groups, requested_by="rita")
        return error.error_code if error else None

    assert refused("rita", ("finance",), []) is ErrorCode.SELF_APPROVAL
    assert refused("lena", ("legal",), []) is ErrorCode.NOT_ELIGIBLE_TO_VOTE
    assert refused("fiona", ("finance",), []) is None
    done = [vote("fiona", "finance")]
    assert refused("fiona", ("finance",), done) is ErrorCode.NOT_ELIGIBLE_TO_VOTE
    assert refused("lena", ("legal",), done) is None
    assert refused(
        "lena", ("legal",), [*done, vote("lena", stage=1, decision=Decision.REJECTED)]
    ) is (ErrorCode.ALREADY_VOTED)


@pytest.mark.parametrize(
    ("raw", "votes", "text", "waiting_on"),
    [
        # Plain N of M: anyone who may vote can give what is missing; nothing to add.
        ({"approvals": 2}, [], "0 of 2 approvals", ()),
        ({"approvals": 3}, [vote("a")], "1 of 3 approvals", ()),
        # One from each group: both are named, with how many each must give.
        (
            {"groups": {"finance": 1, "legal": 1}},
            [],
            "0 of 2 approvals — needs 2 more approvals: 1 from finance and 1 from legal",
            ("finance", "legal"),
        ),
        # Finance's place is taken: only legal can give the last approval.
        (
            {"groups": {"finance": 1, "legal": 1}},
            [vote("fiona", "finance")],
            "1 of 2 approvals — needs 1 more approval; legal can give it",
            ("legal",),
        ),
        # A member of both groups approved: either group's vote completes it, so neither
        # is waited on.
        (
            {"groups": {"finance": 1, "legal": 1}},
            [vote("bo", "finance", "legal")],
            "1 of 2 approvals — needs 1 more approval; finance or legal can give it",
            (),
        ),
        # Group minimums below the total: free places take anyone.
        (
            {"approvals": 2, "groups": {"finance": 1}},
            [vote("a")],
            "1 of 2 approvals — needs 1 more approval; finance can give it",
            ("finance",),
        ),
        (
            {"approvals": 2, "groups": {"finance": 1}},
            [vote("fiona", "finance")],
            "1 of 2 approvals",
            (),
        ),
        (
            {"approvals": 3, "groups": {"legal": 2}},
            [],
            "0 of 3 approvals — needs 3 more approvals, at least 2 from legal",
            ("legal",),
        ),
        # Two of three groups, any two: any of them can give it, none is required.
        (
            {"approvals": 3, "groups": {"finance": 1, "legal": 1, "ops": 1}},
            [vote("fiona", "finance"), vote("bo", "legal", "ops")],
            "2 of 3 approvals — needs 1 more approval; legal or ops can give it",
            (),
        ),
    ],
)
def test_progress_words_say_who_can_still_give_what(
    raw: dict[str, Any], votes: list[Vote], text: str, waiting_on: tuple[str, ...]
) -> None:
    standing = progress(parse_rule(raw), votes)
    assert standing.text() == text
    assert standing.waiting_on == waiting_on
    assert standing.as_json()["text"] == text


def test_progress_words_name_the_stage_being_voted_on() -> None:
    rule = parse_rule(
        {
            "stages": [
                {"name": "finance", "groups": {"finance": 1}},
                {"name": "legal", "approvals": 2, "groups": {"legal": 1}},
            ]
        }
    )
    assert progress(rule, []).text() == (
        "Stage 1 of 2 (finance): 0 of 1 approvals — needs 1 more approval; finance can give it"
    )
    # A finance vote at the legal stage fills a free place; legal's place is still open.
    second = progress(rule, [vote("f", "finance"), vote("g", "finance", stage=1)])
    assert second.text() == (
        "Stage 2 of 2 (legal): 1 of 2 approvals — needs 1 more approval; legal can give it"
    )


def test_a_notification_says_the_same_progress_line() -> None:
    standing = progress(
        parse_rule({"groups": {"finance": 1, "legal": 1}}), [vote("bo", "finance", "legal")]
    )
    task: dict[str, Any] = {
        "entity_type": "payment",
        "entity_id": "pay_1",
        "reason_code": "DUAL_CONTROL",
        "escalation_level": 0,
        "diagnostic_bundle": {"input_snapshot": {}, "evaluator_verdict": {}},
        "approval_progress": standing.as_json(),
    }
    _, body = render_notification(task, kind="review_requested", link=None, now=AT)
    assert (
        "Approval by several people: 1 of 2 approvals — needs 1 more approval; "
        "finance or legal can give it\n" in body
    )
    del task["approval_progress"]
    assert (
        "Approval by several people"
        not in render_notification(task, kind="reminder", link=None, now=AT)[1]
    )
