"""A task as a chat card: Slack's Block Kit, built by one pure function from the public
task view (:func:`signoff.domain.tasks.task_view`), the content of the revision under
review and the buttons' signed values.

What the card shows, in order: the headline and its key fields; who escalated and why
(reason, attempted actions); the revision under review, each long value folded with a
note saying how much is not shown (never cut silently); what changed since the card was
last posted; the AI recommendation labelled with the revision it was written for; the
deadline; where an approval rule stands (the progress line every door shows); a link to
the task page; and, while the task is in review, one button per decision the decision
table offers (:func:`signoff.domain.decisions.choices`): a decision that needs no notes
asks Slack's own confirm dialog, one that needs notes opens a modal, and "Edit and
approve" (on a task whose producer declared fields ``editable``) opens a modal with one
input per editable field (:func:`edit_modal`).

Every text stays within Slack's limits (:data:`LIMITS`), and a card never has more
blocks than a message may hold; ``tests/unit/test_chat_cards.py`` holds them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from signoff.domain.decisions import NOTES_MAX_LENGTH, choices, rule_for
from signoff.domain.doors import door_words
from signoff.domain.messages import headline_title, one_line, when_text
from signoff.domain.states import Decision

#: Slack's limits (Block Kit reference): blocks per message, characters per text.
LIMITS = {
    "blocks": 50,
    "section_text": 3000,
    "header_text": 150,
    "context_text": 3000,
    "context_elements": 10,
    "button_text": 75,
    "button_value": 2000,
    "message_text": 4000,
    "modal_title": 24,
    "input_max_length": 3000,
}
#: Longest value of the revision shown on a card; a longer one is folded with a note.
FOLD_AT = 500
#: Top-level fields of the revision shown; the rest are named in a note.
SUBJECT_FIELDS = 12
#: Attempted actions listed; the rest are counted.
ACTIONS_SHOWN = 5
#: A modal's notes are held to the decision table's limit and Slack's input limit.
MODAL_NOTES_MAX = min(NOTES_MAX_LENGTH, LIMITS["input_max_length"])
#: The action id of each decision's button (``signoff_decide:<DECISION>``).
ACTION_PREFIX = "signoff_decide:"
#: The callback id of the notes modal.
NOTES_MODAL = "signoff_notes"
#: The callback id of the edit modal; its inputs' block ids are the forms' field names
#: (:data:`signoff.domain.edits.PREFIX` and the JSON Pointer).
EDIT_MODAL = "signoff_edit"
#: Slack's limits on a modal: blocks, and characters of a block id and private metadata.
MODAL_LIMITS = {"blocks": 100, "block_id": 255, "private_metadata": 3000}
IN_REVIEW = frozenset({"PENDING_REVIEW", "CLAIMED"})


#: A decision as a decided card names it; one not named here says "Decided: <label>".
DECIDED_WORDS = {
    Decision.APPROVED: "Approved",
    Decision.REJECTED: "Rejected",
    Decision.REVISION_REQUESTED: "Revision requested",
}


def decided_text(decision: Decision, operator: str | None, door: str | None = None) -> str:
    """What a decided card says: "Approved by alice in Slack" (the door when known)."""
    said = DECIDED_WORDS.get(decision) or f"Decided: {rule_for(decision).label}"
    by = f" by {operator}" if operator else ""
    words = door_words(door)
    where = f" {words}" if words else ""
    return f"{said}{by}{where}"


@dataclass(frozen=True)
class CardInput:
    """What a card is drawn from. ``button_value`` is the signed value every button of
    this card carries (task, revision, digest and their MAC)."""

    view: Mapping[str, Any]
    task_url: str
    button_value: str
    now: datetime
    subject: Mapping[str, Any] | None = None
    previous_subject: Mapping[str, Any] | None = None
    previous_revision: int | None = None
    outcome: str | None = None
    """Said on a decided card: "Approved by alice in Slack"."""


def fold(text: str, limit: int = FOLD_AT) -> str:
    """``text`` up to ``limit`` characters; a longer one ends with a note of how many more
    there are (the task page shows them all)."""
    if len(text) <= limit:
        return text
    note = f" … [folded: {len(text) - limit:,} more characters on the task page]"
    return text[:limit] + note


def _clip(text: str, limit: int) -> str:
    """Held to a Slack limit: what is cut says so."""
    if len(text) <= limit:
        return text
    marker = " … [more on the task page]"
    if limit < 4 * len(marker):  # a title or a button: the ellipsis alone says it
        marker = "…"
    return text[: limit - len(marker)].rstrip() + marker


def _section(text: str) -> dict[str, Any]:
    return {
        "type": "section",
        "text": {"type": "mrkdwn", "text": _clip(text, LIMITS["section_text"])},
    }


def _context(text: str) -> dict[str, Any]:
    return {
        "type": "context",
        "elements": [{"type": "mrkdwn", "text": _clip(text, LIMITS["context_text"])}],
    }


def escape(text: object) -> str:
    """Producer text as Slack shows it literally (``&``, ``<`` and ``>`` escaped, so it
    cannot make a link or a mention), on one line."""
    return one_line(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _value_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _escape_long(text: str) -> str:
    """Like :func:`escape` but keeps the whole text (``one_line`` stops at 300 characters)."""
    flat = "".join(" " if (ord(ch) < 32 or ch in "\x7f\x85\u2028\u2029") else ch for ch in text)
    return flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _headline(card: CardInput) -> list[dict[str, Any]]:
    view = card.view
    title = _clip(headline_title(dict(view)), LIMITS["header_text"])
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": title, "emoji": False}}
    ]
    fields = (view.get("headline") or {}).get("fields") or []
    if fields:
        lines = [f"*{escape(f['label'])}:* {escape(f['text'])}" for f in fields]
        blocks.append(_section("\n".join(lines)))
    return blocks


def _why(view: Mapping[str, Any]) -> dict[str, Any]:
    bundle = view.get("diagnostic_bundle") or {}
    actions = bundle.get("attempted_actions") or []
    lines = [
        f"*Escalated by* {escape(view['producer_id'])} *because* `{escape(view['reason_code'])}`"
        f" ({escape(view['entity_type'])} {escape(view['entity_id'])})"
    ]
    for action in actions[:ACTIONS_SHOWN]:
        lines.append(f"• tried: {escape(fold(_value_text(action), 200))}")
    if len(actions) > ACTIONS_SHOWN:
        lines.append(f"• and {len(actions) - ACTIONS_SHOWN} more attempted actions")
    return _section("\n".join(lines))


def _subject(card: CardInput) -> list[dict[str, Any]]:
    subject = card.subject
    if subject is None:
        return []
    revision = card.view.get("current_revision")
    lines = [f"*Under review: revision {revision}*"]
    items = list(subject.items())
    for key, value in items[:SUBJECT_FIELDS]:
        lines.append(f"*{escape(key)}:* {_escape_long(fold(_value_text(value)))}")
    if len(items) > SUBJECT_FIELDS:
        rest = ", ".join(escape(k) for k, _ in items[SUBJECT_FIELDS:])
        lines.append(fold(f"_{len(items) - SUBJECT_FIELDS} more fields on the task page: {rest}_"))
    return _sections(lines)


def _sections(lines: Sequence[str]) -> list[dict[str, Any]]:
    """Lines packed into as few sections as Slack's text limit allows."""
    sections: list[str] = []
    for line in lines:
        if sections and len(sections[-1]) + 1 + len(line) <= LIMITS["section_text"]:
            sections[-1] += "\n" + line
        else:
            sections.append(line)
    return [_section(text) for text in sections]


def _changes(card: CardInput) -> list[dict[str, Any]]:
    previous, current = card.previous_revision, card.view.get("current_revision")
    if previous is None or previous == current:
        return []
    before, after = card.previous_subject or {}, card.subject or {}
    changed = [k for k in {**before, **after} if before.get(k) != after.get(k)]
    named = ", ".join(escape(k) for k in changed[:20]) or "no top-level field"
    more = f" and {len(changed) - 20} more" if len(changed) > 20 else ""
    return [_context(f":arrows_counterclockwise: Changed since revision {previous}: {named}{more}")]


def _recommendation(view: Mapping[str, Any]) -> list[dict[str, Any]]:
    summary = view.get("summary")
    if not summary:
        return []
    # A summary comes with the escalation: it was written for the first revision.
    current = view.get("current_revision")
    label = escape(summary.get("label") or "AI recommendation: a person decides")
    which = ""
    if current is not None:
        which = " (written for revision 1" + (
            f"; this is revision {current})" if current != 1 else ")"
        )
    text = (
        f"*{label}*{which}: {escape(summary.get('recommendation'))}\n"
        f"{escape(fold(str(summary.get('rationale') or ''), 600))}"
    )
    return [_section(text)]


def _standing(card: CardInput) -> list[dict[str, Any]]:
    view = card.view
    parts = []
    if view.get("deadline_at"):
        parts.append(f":alarm_clock: Deadline {when_text(view['deadline_at'], card.now)}")
    if view.get("claimed_by"):
        parts.append(f":lock: {escape(view['claimed_by'])} is reviewing it")
    standing = view.get("approval_progress")
    if standing:
        parts.append(f":busts_in_silhouette: {escape(standing['text'])}")
        votes = [
            f"{escape(v['voter'])}: {rule_for(Decision(v['decision'])).label}"
            + (f" ({escape(door_words(str(v['door'])) or '')})" if v.get("door") else "")
            for v in (view.get("votes") or [])[:20]
        ]
        if votes:
            parts.append("Votes: " + ", ".join(votes))
    parts.append(f"<{card.task_url}|Open the task page>")
    return [_context("   ".join(parts))]


def _buttons(card: CardInput) -> list[dict[str, Any]]:
    view = card.view
    if view.get("status") not in IN_REVIEW:
        return []
    elements = []
    has_subject = view.get("current_revision") is not None
    for rule in choices(has_subject=has_subject, editable=bool(view.get("editable"))):
        button: dict[str, Any] = {
            "type": "button",
            "action_id": ACTION_PREFIX + rule.decision.value,
            "text": {"type": "plain_text", "text": _clip(rule.label, LIMITS["button_text"])},
            "value": card.button_value,
        }
        if rule.edits_subject:  # opens the edit modal (:func:`edit_modal`)
            elements.append(button)
            continue
        if rule.tone == "approve":
            button["style"] = "primary"
        elif rule.tone == "reject":
            button["style"] = "danger"
        if not rule.notes_required:
            button["confirm"] = {
                "title": {"type": "plain_text", "text": _clip(rule.label + "?", 100)},
                "text": {
                    "type": "plain_text",
                    "text": _clip(
                        f"{rule.label} revision {view.get('current_revision') or '—'} of "
                        f"{headline_title(dict(view))}?",
                        300,
                    ),
                },
                "confirm": {"type": "plain_text", "text": rule.label},
                "deny": {"type": "plain_text", "text": "Cancel"},
            }
        elements.append(button)
    return [{"type": "actions", "block_id": "signoff_decisions", "elements": elements}]


def card_blocks(card: CardInput) -> dict[str, Any]:
    """The message: ``text`` (notifications and screen readers) and ``blocks``."""
    view = card.view
    tail: list[dict[str, Any]] = []
    if card.outcome:
        tail.append(_section(f":white_check_mark: {escape(card.outcome)}"))
    tail += _standing(card) + _buttons(card)
    head = [*_headline(card), _why(view), *_changes(card)]
    body = _subject(card) + _recommendation(view)
    room = LIMITS["blocks"] - len(head) - len(tail)
    if len(body) > room:
        body = [*body[: room - 1], _context("More of this revision on the task page.")]
    title = headline_title(dict(view))
    text = _clip(f"Review: {one_line(title)} ({one_line(view['reason_code'])})", 300)
    return {"text": text, "blocks": head + body + tail}


def notes_modal(decision: Decision, button_value: str, where: str) -> dict[str, Any]:
    """The modal that asks for a decision's notes; ``where`` (the card's channel and
    message) comes back in ``private_metadata`` with the signed value."""
    rule = rule_for(decision)
    return {
        "type": "modal",
        "callback_id": NOTES_MODAL,
        "private_metadata": json.dumps(
            {"decision": decision.value, "value": button_value, "where": where}
        ),
        "title": {"type": "plain_text", "text": _clip(rule.label, LIMITS["modal_title"])},
        "submit": {"type": "plain_text", "text": _clip(rule.label, LIMITS["modal_title"])},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            {
                "type": "input",
                "block_id": "notes",
                "optional": not rule.notes_required,
                "label": {"type": "plain_text", "text": "Notes"},
                "hint": {"type": "plain_text", "text": _clip(rule.notes_hint, 2000)},
                "element": {
                    "type": "plain_text_input",
                    "action_id": "notes",
                    "multiline": True,
                    "max_length": MODAL_NOTES_MAX,
                },
            }
        ],
    }


#: What a field's kind is called in the modal's hint, and how its value is written.
KIND_HINTS = {
    "text": "text, as written",
    "a number": "a number",
    "a boolean": "true or false",
    "a list": "a list, written as JSON",
    "an object": "an object, written as JSON",
    "null": "null, or any value written as JSON",
    None: "not set yet: any value, written as JSON (else kept as text)",
}


def edit_modal(
    fields: Sequence[Mapping[str, Any]], button_value: str, where: str, revision: int
) -> dict[str, Any] | None:
    """The "Edit and approve" modal: one input per editable field (``fields``, as
    :func:`signoff.domain.edits.edit_fields` gives them) labelled with its pointer,
    prefilled with its value and hinted with its kind, and optional notes. ``where`` (the
    card's channel and message) comes back in ``private_metadata`` with the signed value.
    ``None``: the fields do not fit in a Slack modal (a value longer than an input holds,
    a pointer longer than a block id, too many fields)."""
    rule = rule_for(Decision.APPROVED_WITH_EDITS)
    metadata = json.dumps({"value": button_value, "where": where})
    too_long = [
        f
        for f in fields
        if len(str(f["value"])) > LIMITS["input_max_length"]
        or len(str(f["name"])) > MODAL_LIMITS["block_id"]
    ]
    if too_long or len(fields) + 2 > MODAL_LIMITS["blocks"]:
        return None
    if len(metadata) > MODAL_LIMITS["private_metadata"]:
        return None
    intro = (
        f"Revision {revision}: change what needs changing, then approve. The edit becomes "
        "revision " + f"{revision + 1}, yours, and your approval is bound to it."
    )
    blocks: list[dict[str, Any]] = [_section(intro)]
    for field in fields:
        element: dict[str, Any] = {
            "type": "plain_text_input",
            "action_id": "value",
            "multiline": bool(field.get("multiline")),
            "max_length": LIMITS["input_max_length"],
        }
        if field["value"] != "":
            element["initial_value"] = str(field["value"])
        blocks.append(
            {
                "type": "input",
                "block_id": str(field["name"]),
                # An empty input is empty text (Slack sends no value for it).
                "optional": True,
                "label": {"type": "plain_text", "text": _clip(str(field["pointer"]), 2000)},
                "hint": {
                    "type": "plain_text",
                    "text": _clip(f"Kind: {KIND_HINTS.get(field.get('kind'), 'JSON')}", 2000),
                },
                "element": element,
            }
        )
    blocks.append(
        {
            "type": "input",
            "block_id": "notes",
            "optional": True,
            "label": {"type": "plain_text", "text": "Notes"},
            "hint": {"type": "plain_text", "text": _clip(rule.notes_hint, 2000)},
            "element": {
                "type": "plain_text_input",
                "action_id": "notes",
                "multiline": True,
                "max_length": MODAL_NOTES_MAX,
            },
        }
    )
    return {
        "type": "modal",
        "callback_id": EDIT_MODAL,
        "private_metadata": metadata,
        "title": {"type": "plain_text", "text": _clip(rule.label, LIMITS["modal_title"])},
        "submit": {"type": "plain_text", "text": "Approve the edit"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": blocks,
    }
