"""Chat cards stay within Slack's limits however large the task, fold long values with a
note (never cut silently), and take their buttons from the decision table."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from signoff.domain.chat_cards import (
    ACTION_PREFIX,
    LIMITS,
    MODAL_NOTES_MAX,
    CardInput,
    card_blocks,
    decided_text,
    edit_modal,
    fold,
    notes_modal,
)
from signoff.domain.decisions import DECISION_RULES, choices
from signoff.domain.edits import edit_fields
from signoff.domain.states import Decision

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def view(**extra: Any) -> dict[str, Any]:
    return {
        "id": "7f0c0f3c-0000-4000-8000-000000000001",
        "status": "PENDING_REVIEW",
        "headline": {
            "title": "Pay ACME 100 EUR",
            "fields": [{"label": "Amount", "text": "100 EUR"}],
        },
        "entity_type": "payment",
        "entity_id": "txn_1",
        "reason_code": "LOW_CONFIDENCE",
        "producer_id": "bot",
        "diagnostic_bundle": {"attempted_actions": [{"tool": "check", "result": "failed"}]},
        "current_revision": 3,
        "deadline_at": "2026-12-08T12:00:00Z",
        "summary": {
            "recommendation": "APPROVE",
            "rationale": "looks fine",
            "label": "AI recommendation: a person decides",
        },
        "approval_progress": {"text": "1 of 2 approvals; finance can give the other"},
        **extra,
    }


def texts(block: Any) -> list[str]:
    """Every text string anywhere in a block."""
    found: list[str] = []
    if isinstance(block, dict):
        if isinstance(block.get("text"), str):
            found.append(block["text"])
        for value in block.values():
            found += texts(value)
    elif isinstance(block, list):
        for value in block:
            found += texts(value)
    return found


def within_limits(message: dict[str, Any]) -> None:
    blocks = message["blocks"]
    assert len(blocks) <= LIMITS["blocks"]
    assert len(message["text"]) <= LIMITS["message_text"]
    for block in blocks:
        if block["type"] == "header":
            assert len(block["text"]["text"]) <= LIMITS["header_text"]
        for text in texts(block):
            assert len(text) <= LIMITS["section_text"]
        if block["type"] == "actions":
            for button in block["elements"]:
                assert len(button["text"]["text"]) <= LIMITS["button_text"]
                assert len(button["value"]) <= LIMITS["button_value"]


def test_a_card_shows_what_a_person_needs_first_and_the_table_s_buttons() -> None:
    card = card_blocks(
        CardInput(
            view=view(),
            task_url="https://signoff.example/console/tasks/x",
            button_value="v1.x.3.d.mac",
            now=NOW,
            subject={"title": "Pay ACME", "amount": "100 EUR"},
            previous_subject={"title": "Pay ACME", "amount": "90 EUR"},
            previous_revision=2,
        )
    )
    within_limits(card)
    blocks = card["blocks"]
    assert blocks[0] == {
        "type": "header",
        "text": {"type": "plain_text", "text": "Pay ACME 100 EUR", "emoji": False},
    }
    whole = json.dumps(blocks)
    for expected in (
        "*Amount:* 100 EUR",
        "Escalated by* bot *because* `LOW_CONFIDENCE`",
        "Changed since revision 2: amount",
        "Under review: revision 3",
        "written for revision 1; this is revision 3",
        "Deadline 8 Dec, 12:00 UTC",
        "1 of 2 approvals; finance can give the other",
        "<https://signoff.example/console/tasks/x|Open the task page>",
    ):
        assert expected in whole, expected
    buttons = blocks[-1]["elements"]
    assert [b["action_id"] for b in buttons] == [
        ACTION_PREFIX + r.decision.value for r in choices(has_subject=True)
    ]
    for button, rule in zip(buttons, choices(has_subject=True), strict=True):
        assert ("confirm" in button) is (not rule.notes_required)


def test_a_decided_card_says_so_and_has_no_buttons() -> None:
    card = card_blocks(
        CardInput(
            view=view(status="RESOLVED", current_revision=None),
            task_url="u",
            button_value="v",
            now=NOW,
            outcome="Approve: decided by alice in the console",
        )
    )
    assert not [b for b in card["blocks"] if b["type"] == "actions"]
    assert "decided by alice in the console" in json.dumps(card["blocks"])


def test_producer_text_cannot_mention_or_link() -> None:
    card = card_blocks(
        CardInput(
            view=view(reason_code="<!channel> <https://evil|click>"),
            task_url="u",
            button_value="v",
            now=NOW,
        )
    )
    whole = json.dumps(card["blocks"])
    assert "<!channel>" not in whole
    assert "&lt;!channel&gt;" in whole


def test_fold_says_how_much_is_not_shown() -> None:
    assert fold("abc", 5) == "abc"
    folded = fold("a" * 1234, 200)
    assert folded.startswith("a" * 200)
    assert "folded: 1,034 more characters" in folded


@given(
    fields=st.integers(0, 120),
    size=st.integers(0, 20_000),
    actions=st.integers(0, 60),
    title=st.text(min_size=0, max_size=400),
)
def test_any_task_fits_slack_s_limits(fields: int, size: int, actions: int, title: str) -> None:
    subject = {f"field_{i}": "w" * size for i in range(fields)}
    card = card_blocks(
        CardInput(
            view=view(
                headline={
                    "title": title or "t",
                    "fields": [{"label": "L" * 200, "text": "T" * 500}] * 10,
                },
                diagnostic_bundle={"attempted_actions": [{"x": "y" * 5000}] * actions},
            ),
            task_url="https://signoff.example/console/tasks/x",
            button_value="v1." + "f" * 200,
            now=NOW,
            subject=subject,
        )
    )
    within_limits(card)
    if size > 500 and fields:
        assert "folded:" in json.dumps(card["blocks"])


def test_the_notes_modal_holds_the_one_notes_limit_within_slack_s() -> None:
    for decision in Decision:
        modal = notes_modal(decision, "value", "C1 1.0")
        element = modal["blocks"][0]["element"]
        assert element["max_length"] == MODAL_NOTES_MAX <= LIMITS["input_max_length"]
        assert modal["blocks"][0]["optional"] is (not DECISION_RULES[decision].notes_required)
        assert len(modal["title"]["text"]) <= LIMITS["modal_title"]
        assert json.loads(modal["private_metadata"])["decision"] == decision.value


def test_edit_and_approve_is_offered_only_on_a_task_with_editable_fields() -> None:
    def actions(**extra: Any) -> list[dict[str, Any]]:
        card = card_blocks(
            CardInput(view=view(**extra), task_url="u", button_value="v1.x.3.d.mac", now=NOW)
        )
        return list(card["blocks"][-1]["elements"])

    assert "signoff_decide:APPROVED_WITH_EDITS" not in [b["action_id"] for b in actions()]
    buttons = actions(editable=["/amount"])
    edit = buttons[-1]
    assert edit["action_id"] == "signoff_decide:APPROVED_WITH_EDITS"
    assert edit["text"]["text"] == "Edit and approve"
    assert edit["value"] == "v1.x.3.d.mac" == buttons[0]["value"]
    assert "confirm" not in edit  # it opens the edit modal
    no_subject = actions(editable=["/amount"], current_revision=None)
    assert "signoff_decide:APPROVED_WITH_EDITS" not in [b["action_id"] for b in no_subject]


def test_the_edit_modal_has_a_prefilled_input_per_field_or_is_not_drawn() -> None:
    subject = {"amount": 100, "memo": "for March", "tags": ["a"], "empty": ""}
    fields = edit_fields(["/amount", "/memo", "/tags", "/empty", "/missing"], subject)
    modal = edit_modal(fields, "v1.x.3.d.mac", "C1 1.0", 3)
    assert modal is not None
    assert json.loads(modal["private_metadata"]) == {"value": "v1.x.3.d.mac", "where": "C1 1.0"}
    assert len(modal["title"]["text"]) <= LIMITS["modal_title"]
    inputs = [b for b in modal["blocks"] if b["type"] == "input"]
    assert [b["block_id"] for b in inputs] == [
        "edit:/amount",
        "edit:/memo",
        "edit:/tags",
        "edit:/empty",
        "edit:/missing",
        "notes",
    ]
    prefilled = [b["element"].get("initial_value") for b in inputs[:-1]]
    assert prefilled == ["100", "for March", '["a"]', None, "null"]
    hints = [b["hint"]["text"] for b in inputs[:-1]]
    assert hints[:3] == [
        "Kind: a number",
        "Kind: text, as written",
        "Kind: a list, written as JSON",
    ]
    assert "any value" in hints[4]
    assert all(b["element"]["max_length"] <= LIMITS["input_max_length"] for b in inputs)
    assert "revision 4" in json.dumps(modal["blocks"][0])
    # What a Slack modal cannot hold is not drawn (the task page edits it).
    long = edit_fields(["/memo"], {"memo": "x" * (LIMITS["input_max_length"] + 1)})
    assert edit_modal(long, "v", "C1 1.0", 1) is None
    deep = "/" + "k" * 300
    assert edit_modal(edit_fields([deep], {"k" * 300: 1}), "v", "C1 1.0", 1) is None
    many = [f"/f{i}" for i in range(99)]
    assert edit_modal(edit_fields(many, {f"f{i}": i for i in range(99)}), "v", "w", 1) is None


def test_a_decided_card_names_the_decision_the_person_and_the_door_when_known() -> None:
    assert decided_text(Decision.APPROVED, "carl", "console") == "Approved by carl in the console"
    assert decided_text(Decision.REJECTED, "alice", "slack") == "Rejected by alice in Slack"
    assert decided_text(Decision.APPROVED, "dan", "api") == "Approved by dan through the API"
    assert decided_text(Decision.APPROVED, "eve", "link") == "Approved by eve by a link"
    assert decided_text(Decision.REVISION_REQUESTED, "sam", None) == "Revision requested by sam"
