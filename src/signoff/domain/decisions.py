"""The decision rules: what each decision needs, who may not make it, and what follows.

This table is the only place these rules are stated. Every door reads it: the API's
validation and its OpenAPI document, the console's buttons and their hints, the resume
page, the store's conditional updates (their SQL is built from it), the execution gate's
explanations, what a new revision does, and the tables in the docs. Adding a decision is
one row here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from signoff.domain.json_input import text_problem
from signoff.domain.states import Decision
from signoff.errors import FieldError, Unprocessable, validation_error

#: The one limit on a decision's notes, in characters, on every door.
NOTES_MAX_LENGTH = 10_000


class AfterRevision(StrEnum):
    """What a new revision of the subject does to a task decided this way."""

    RECONSIDER = "reconsider"
    """The approval is invalidated by a material change (the task is reviewed again) and
    carried forward to the new revision when only non-material paths changed."""
    REOPEN = "reopen"
    """The new revision is what was asked for: the task goes back to review."""
    REFUSE = "refuse"
    """The decision is final: a new revision is refused (escalate anew)."""


class RefusalReason(StrEnum):
    """Why the execution gate refused (409 ``ERR_APPROVAL_NOT_VALID``)."""

    NOT_DECIDED = "NOT_DECIDED"
    """Nobody has decided (the task is in review, or expired or was cancelled undecided)."""
    REJECTED = "REJECTED"
    REVISION_REQUESTED = "REVISION_REQUESTED"
    APPROVAL_INVALIDATED = "APPROVAL_INVALIDATED"
    """The approval of the named revision was invalidated by a new revision."""
    STALE_DIGEST = "STALE_DIGEST"
    APPROVAL_EXPIRED = "APPROVAL_EXPIRED"
    APPROVER_NOT_AUTHORISED = "APPROVER_NOT_AUTHORISED"
    SOURCE_REVOKED = "SOURCE_REVOKED"


@dataclass(frozen=True, kw_only=True)
class DecisionRule:
    """Every question a decision raises, answered (no field has a default)."""

    decision: Decision
    label: str
    """The button a person presses."""
    verb: str
    """What the person does, after "to": "approve", "reject"."""
    shortcut: str
    """The console's keyboard shortcut for the button (one letter)."""
    tone: str
    """How the button looks on every page (a CSS class: approve, reject, revise)."""
    needs_subject: bool
    """Only a task with a subject (revisions under review) can be decided this way."""
    notes_required: bool
    notes_hint: str
    """What the notes should say; shown beside the field and when they are missing."""
    producer_may_decide: bool
    """Whether the principal that escalated the task may make this decision on it."""
    grants_approval: bool
    """Binds the revision, digest and approver's key, expires after the task's
    ``approval_ttl_seconds`` (or ``SIGNOFF_APPROVAL_TTL_SECONDS``), and lets the
    execution gate go on to check the approval itself."""
    after_revision: AfterRevision
    asks_for_changes: bool
    """The decision sends the work back to its producer: the task waits on the producer
    (out of every reviewer's queue) until its next revision returns it to review, and the
    decision may name the fields that should change, each with its reason. The notes and
    those fields are kept as the task's ``change_request``, shown beside the next
    revision's diff."""
    edits_subject: bool
    """The decision carries the reviewer's edit of the subject: only the paths the
    producer declared ``editable`` may change; it becomes a new revision authored by the
    reviewer, and the decision (an approval) is bound to that revision and digest."""
    made_by_people: bool
    """Offered on every door (API, console, resume page, SDK); ``False``: only Signoff
    makes it, and a door naming it is refused (a remembered approval)."""
    execution_refusal: RefusalReason | None
    """What an execute attempt on a task decided this way is told; ``None`` exactly when
    the decision grants an approval (the gate then checks revision, expiry and authority)."""


DECISION_RULES: Mapping[Decision, DecisionRule] = MappingProxyType(
    {
        Decision.APPROVED: DecisionRule(
            decision=Decision.APPROVED,
            label="Approve",
            verb="approve",
            shortcut="a",
            tone="approve",
            needs_subject=False,
            notes_required=False,
            notes_hint="optional; kept with the decision",
            producer_may_decide=False,
            grants_approval=True,
            after_revision=AfterRevision.RECONSIDER,
            asks_for_changes=False,
            edits_subject=False,
            made_by_people=True,
            execution_refusal=None,
        ),
        Decision.REJECTED: DecisionRule(
            decision=Decision.REJECTED,
            label="Reject",
            verb="reject",
            shortcut="r",
            tone="reject",
            needs_subject=False,
            notes_required=True,
            notes_hint="say why, so the requester can act on it",
            producer_may_decide=False,
            grants_approval=False,
            after_revision=AfterRevision.REFUSE,
            asks_for_changes=False,
            edits_subject=False,
            made_by_people=True,
            execution_refusal=RefusalReason.REJECTED,
        ),
        Decision.REVISION_REQUESTED: DecisionRule(
            decision=Decision.REVISION_REQUESTED,
            label="Request revision",
            verb="request a revision",
            shortcut="v",
            tone="revise",
            needs_subject=True,
            notes_required=True,
            notes_hint="say what should change",
            producer_may_decide=False,
            grants_approval=False,
            after_revision=AfterRevision.REOPEN,
            asks_for_changes=True,
            edits_subject=False,
            made_by_people=True,
            execution_refusal=RefusalReason.REVISION_REQUESTED,
        ),
        Decision.APPROVED_WITH_EDITS: DecisionRule(
            decision=Decision.APPROVED_WITH_EDITS,
            label="Edit and approve",
            verb="edit and approve",
            shortcut="d",
            tone="approve",
            needs_subject=True,
            notes_required=False,
            notes_hint="optional; say what you changed and why",
            producer_may_decide=False,
            grants_approval=True,
            after_revision=AfterRevision.RECONSIDER,
            asks_for_changes=False,
            edits_subject=True,
            made_by_people=True,
            execution_refusal=None,
        ),
        Decision.APPROVED_BY_GRANT: DecisionRule(
            decision=Decision.APPROVED_BY_GRANT,
            label="Approved by a remembered approval",
            verb="approve by a remembered approval",
            shortcut="g",
            tone="approve",
            needs_subject=True,
            notes_required=False,
            notes_hint="the grant is cited instead",
            producer_may_decide=False,
            grants_approval=True,
            after_revision=AfterRevision.RECONSIDER,
            asks_for_changes=False,
            edits_subject=False,
            made_by_people=False,
            execution_refusal=None,
        ),
    }
)


def rule_for(decision: Decision) -> DecisionRule:
    return DECISION_RULES[decision]


def decisions_where(predicate: str) -> tuple[Decision, ...]:
    """The decisions whose rule has the boolean field ``predicate`` set, in table order
    (for the SQL the store builds from this table)."""
    return tuple(d for d, r in DECISION_RULES.items() if getattr(r, predicate) is True)


def choices(*, has_subject: bool, editable: bool = False) -> tuple[DecisionRule, ...]:
    """The decisions a person may choose on a task with or without a subject (and with or
    without fields its producer declared ``editable``), in order."""
    return tuple(
        r
        for r in DECISION_RULES.values()
        if r.made_by_people
        and (has_subject or not r.needs_subject)
        and (editable or not r.edits_subject)
    )


def require_made_by_people(decision: Decision) -> None:
    """Raises ``ERR_VALIDATION`` naming ``decision`` for a decision only Signoff makes."""
    if not rule_for(decision).made_by_people:
        problem = f"{decision.value} is made only by Signoff (a remembered approval)"
        raise validation_error([FieldError("decision", problem)], f"The decision {problem}.")


def notes_rule() -> str:
    """The notes rule in one sentence, for pages, the OpenAPI document and the SDK."""
    required = [r.verb for r in DECISION_RULES.values() if r.notes_required]
    needed = " and to ".join(required)
    return f"Required to {needed}; at most {NOTES_MAX_LENGTH:,} characters."


def parse_decision(raw: object) -> Decision:
    """A decision named by a door's input.

    Raises:
        Unprocessable: ``ERR_VALIDATION`` naming the field ``decision``.
    """
    try:
        return Decision(str(raw))
    except ValueError:
        names = ", ".join(d.value for d in DECISION_RULES)
        problem = f"must be one of {names}"
        raise validation_error(
            [FieldError("decision", problem)], f"The decision {problem}."
        ) from None


def checked_notes(decision: Decision, notes: object) -> str | None:
    """The notes as recorded: surrounding white space removed, empty meaning none.

    Raises:
        Unprocessable: ``ERR_VALIDATION`` naming the field ``notes`` when they are not a
            string, longer than :data:`NOTES_MAX_LENGTH`, or missing where the decision
            requires them. Never cut short silently.
    """
    if notes is not None and not isinstance(notes, str):
        raise _notes_error("must be a string")
    # The text guard every JSON body meets, for the form doors too: measured as sent.
    problem = text_problem(notes, limit=NOTES_MAX_LENGTH) if notes else None
    if problem is not None:
        raise _notes_error(problem)
    text = (notes or "").strip() or None
    rule = rule_for(decision)
    if text is None and rule.notes_required:
        raise _notes_error(f"are required to {rule.verb}: {rule.notes_hint}")
    return text


def _notes_error(problem: str) -> Unprocessable:
    return validation_error([FieldError("notes", problem)], f"Notes {problem}.")


def rules_markdown() -> str:
    """The decision rules as the Markdown table in ``docs/approvals.md`` (a test holds the
    doc equal to this)."""
    yes = {True: "yes", False: "no"}
    lines = [
        "| decision | button (key) | needs a subject | notes | the producer's principal may make it"
        " | grants an approval (expires, opens the gate) | waits on the producer (fields with"
        " reasons) | carries the reviewer's edit (a new revision) | made by people"
        " | a new revision then | execute is told |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    after = {
        AfterRevision.RECONSIDER: "invalidates it (material change) or carries it forward",
        AfterRevision.REOPEN: "sends the task back to review",
        AfterRevision.REFUSE: "is refused: escalate anew",
    }
    for rule in DECISION_RULES.values():
        notes = f"required: {rule.notes_hint}" if rule.notes_required else rule.notes_hint
        refusal = f"`{rule.execution_refusal.value}`" if rule.execution_refusal else "—"
        lines.append(
            f"| `{rule.decision.value}` | {rule.label} (`{rule.shortcut}`)"
            f" | {yes[rule.needs_subject]} | {notes} | {yes[rule.producer_may_decide]}"
            f" | {yes[rule.grants_approval]} | {yes[rule.asks_for_changes]}"
            f" | {yes[rule.edits_subject]} | {yes[rule.made_by_people]}"
            f" | {after[rule.after_revision]} | {refusal} |"
        )
    return "\n".join(lines) + "\n"
