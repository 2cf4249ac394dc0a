"""The decision rule table answers every question for every decision, and the doors that
cannot import it (the SDK) or that restate it for speed (the store's SQL) agree with it."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

import signoff.console
from signoff.client import _models as sdk_models
from signoff.domain.decisions import (
    DECISION_RULES,
    NOTES_MAX_LENGTH,
    AfterRevision,
    DecisionRule,
    checked_notes,
    choices,
    notes_rule,
    parse_decision,
    rules_markdown,
)
from signoff.domain.states import Decision, TaskStatus
from signoff.errors import Unprocessable
from signoff.store import oneshot


def test_every_decision_has_exactly_one_rule_naming_it() -> None:
    assert list(DECISION_RULES) == list(Decision)
    for decision, rule in DECISION_RULES.items():
        assert rule.decision is decision


def test_no_rule_field_has_a_default_so_every_row_answers_every_question() -> None:
    for field in dataclasses.fields(DecisionRule):
        assert field.default is dataclasses.MISSING, field.name
        assert field.default_factory is dataclasses.MISSING, field.name
    with pytest.raises(TypeError):
        DecisionRule(decision=Decision.APPROVED)  # type: ignore[call-arg]


def test_rows_are_consistent_with_themselves() -> None:
    shortcuts = [rule.shortcut for rule in DECISION_RULES.values()]
    assert len(set(shortcuts)) == len(shortcuts)
    assert all(re.fullmatch(r"[a-z]", key) for key in shortcuts)
    # The console's own keys (claim, extend the lease, next…) are never a decision's.
    templates = Path(signoff.console.__file__).parent / "templates"
    own = {
        key
        for page in templates.glob("*.html")
        for key in re.findall(r'data-key="([a-z])"', page.read_text(encoding="utf-8"))
    } | {"j", "k"}
    assert own >= {"c", "e"}
    assert not own & set(shortcuts), own & set(shortcuts)
    for rule in DECISION_RULES.values():
        # The gate goes on to check an approval, and refuses everything else by name.
        assert rule.grants_approval is (rule.execution_refusal is None)
        assert (rule.after_revision is AfterRevision.RECONSIDER) is rule.grants_approval
        for text in (rule.label, rule.verb, rule.notes_hint, rule.tone):
            assert text.strip()


def test_the_producers_principal_may_make_no_decision() -> None:
    assert not any(rule.producer_may_decide for rule in DECISION_RULES.values())


def test_choices_leave_out_decisions_that_need_a_subject_on_tasks_without_one() -> None:
    with_subject = [r.decision for r in choices(has_subject=True, editable=True)]
    without = [r.decision for r in choices(has_subject=False)]
    # Every decision a person makes; an edit only where the producer declared something
    # editable; a remembered approval never (only Signoff makes it).
    assert with_subject == [d for d, r in DECISION_RULES.items() if r.made_by_people]
    assert Decision.APPROVED_BY_GRANT not in with_subject
    not_editable = [r.decision for r in choices(has_subject=True)]
    assert not_editable == [d for d in with_subject if not DECISION_RULES[d].edits_subject]
    assert Decision.REVISION_REQUESTED not in without
    assert set(without) == {d for d, r in DECISION_RULES.items() if not r.needs_subject}


@pytest.mark.parametrize("decision", list(Decision))
def test_notes_are_stripped_bounded_and_required_as_the_table_says(decision: Decision) -> None:
    rule = DECISION_RULES[decision]
    assert checked_notes(decision, "  why  ") == "why"
    assert checked_notes(decision, "z" * NOTES_MAX_LENGTH) == "z" * NOTES_MAX_LENGTH
    with pytest.raises(Unprocessable) as too_long:
        checked_notes(decision, "z" * (NOTES_MAX_LENGTH + 1))
    assert [e.field for e in too_long.value.errors] == ["notes"]
    with pytest.raises(Unprocessable):
        checked_notes(decision, 42)
    if rule.notes_required:
        for empty in (None, "", "   "):
            with pytest.raises(Unprocessable) as missing:
                checked_notes(decision, empty)
            assert rule.verb in missing.value.message
    else:
        assert checked_notes(decision, "  ") is None


def test_an_unknown_decision_is_refused_naming_the_field() -> None:
    with pytest.raises(Unprocessable) as refused:
        parse_decision("APROVED")
    assert [e.field for e in refused.value.errors] == ["decision"]
    assert parse_decision("REJECTED") is Decision.REJECTED


def test_the_notes_sentence_names_every_decision_that_requires_notes() -> None:
    sentence = notes_rule()
    for rule in DECISION_RULES.values():
        assert (rule.verb in sentence) is rule.notes_required
    assert f"{NOTES_MAX_LENGTH:,}" in sentence


def test_the_single_statement_resolve_is_built_from_the_table() -> None:
    sql = oneshot.RESOLVE.sql

    def listed(condition: str) -> set[str]:
        match = re.search(r"NOT \$\d+::varchar IN \(([^)]*)\) OR " + condition, sql)
        assert match, condition
        return set(re.findall(r"'([A-Z_]+)'", match.group(1)))

    assert listed("current_revision IS NOT NULL") == {
        d.value for d, r in DECISION_RULES.items() if r.needs_subject
    }
    assert listed("producer_id <>") == {
        d.value for d, r in DECISION_RULES.items() if not r.producer_may_decide
    }
    approvals = re.search(r"approved_revision = CASE WHEN \$\d+::varchar IN \(([^)]*)\)", sql)
    assert approvals
    assert set(re.findall(r"'([A-Z_]+)'", approvals.group(1))) == {
        d.value for d, r in DECISION_RULES.items() if r.grants_approval
    }


def test_the_sdk_knows_the_same_decisions_in_the_same_order() -> None:
    assert tuple(d.value for d in DECISION_RULES) == sdk_models.DECISIONS


def test_the_sdk_knows_the_same_task_statuses() -> None:
    assert {s.value for s in TaskStatus} == set(sdk_models.TASK_STATUSES)


def test_the_docs_table_is_the_rule_table() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "approvals.md").read_text("utf-8")
    start = doc.index("<!-- decision-rules:start")
    body = doc[doc.index("\n", start) + 1 : doc.index("<!-- decision-rules:end -->")]
    assert body == rules_markdown(), "paste signoff.domain.decisions.rules_markdown() there"
