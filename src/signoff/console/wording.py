"""What reviewers read, in words: times, field names, the history as sentences, and
advice after a refusal (changes word by word: :mod:`signoff.console.changes`). Shared by
the console's task page and the resume-link page (the page an e-mail reviewer opens), so
both say the same thing the same way. Pure functions.

Codes (event types, error codes, JSON Pointers, RFC 3339 times) stay in the API's JSON;
nothing here shows one to a person.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any

from signoff.console.labels import When as When
from signoff.console.labels import _humane
from signoff.console.labels import field_label as field_label
from signoff.console.labels import field_labels as field_labels
from signoff.console.labels import when as when
from signoff.console.labels import when_text as when_text
from signoff.console.views import is_container, scalar_text
from signoff.domain.decisions import rule_for
from signoff.domain.states import Decision
from signoff.errors import ErrorCode, SignoffError

# The history as sentences --------------------------------------------------------------


def _who(event: Mapping[str, Any], me: str | None) -> str:
    actor = str(event.get("actor_id") or "")
    if me is not None and actor == me:
        return "You"
    if event.get("actor_role") == "system":
        return "Signoff"
    return actor or "Someone"


def _details(event: Mapping[str, Any]) -> dict[str, Any]:
    details = event.get("details")
    return details if isinstance(details, dict) else {}


#: How each decision reads in the history (the decisions themselves: signoff.domain.decisions).
DECISION_DONE: Mapping[Decision, str] = MappingProxyType(
    {
        Decision.APPROVED: "approved",
        Decision.REJECTED: "rejected",
        Decision.REVISION_REQUESTED: "asked for a revision",
        Decision.APPROVED_WITH_EDITS: "edited and approved",
        Decision.APPROVED_BY_GRANT: "approved by a remembered approval",
    }
)


def decision_done(decision: object) -> str:
    """``approved``, ``rejected``, ``asked for a revision``; an unknown value by its label."""
    try:
        return DECISION_DONE[Decision(str(decision))]
    except (ValueError, KeyError):
        return f"decided {decision}"


def decision_label(decision: object) -> str:
    """A decision's button label (``Request revision``), from the decision rules."""
    try:
        return rule_for(Decision(str(decision))).label
    except ValueError:
        return str(decision)


def _created(e: Mapping[str, Any], who: str) -> str:
    return f"{who} sent this for review"


def _claimed(e: Mapping[str, Any], who: str) -> str:
    return f"{who} started reviewing it"


def _renewed(e: Mapping[str, Any], who: str) -> str:
    return f"{who} extended the time to review"


def _released(e: Mapping[str, Any], who: str) -> str:
    d = _details(e)
    if d.get("forced"):
        return f"{who} force-released the lease held by {d.get('previous_holder') or 'its holder'}"
    return f"{who} put it back in the queue"


def _resolved(e: Mapping[str, Any], who: str) -> str:
    d = _details(e)
    if e.get("action") == "time_out":
        return f"The time limit ran out: {decision_done(d.get('decision'))} automatically"
    if e.get("action") == "decide_by_votes":
        return _decided_by_votes(e, who)
    on = f" revision {d['revision']}" if d.get("revision") else " it"
    done = decision_done(d.get("decision"))
    return f"{who} {done}{on}" if done in ("approved", "rejected") else f"{who} {done}"


def _voted(e: Mapping[str, Any], who: str) -> str:
    d = _details(e)
    vote = d.get("vote") if isinstance(d.get("vote"), dict) else {}
    progress = d.get("progress") if isinstance(d.get("progress"), dict) else {}
    decision = vote.get("decision") if isinstance(vote, dict) else None
    verb = {"approved": "voted to approve", "rejected": "voted to reject"}.get(
        decision_done(decision), f"voted: {decision_done(decision)}"
    )
    on = f" revision {vote['revision']}" if isinstance(vote, dict) and vote.get("revision") else ""
    standing = (
        f" ({progress['text']})" if isinstance(progress, dict) and progress.get("text") else ""
    )
    return f"{who} {verb}{on}{standing}"


def _votes_voided(e: Mapping[str, Any], who: str) -> str:
    d = _details(e)
    voided = d.get("voided") if isinstance(d.get("voided"), list) else []
    count = len(voided) if isinstance(voided, list) else 0
    votes = f"{count} vote{'' if count == 1 else 's'}"
    return f"Revision {d.get('revision')} changed what was voted on: {votes} no longer count"


def _decided_by_votes(e: Mapping[str, Any], who: str) -> str:
    d = _details(e)
    done = decision_done(d.get("decision"))
    if done == "approved":
        return f"The approval rule was met: approved revision {d.get('revision') or 1}"
    return f"{who}'s vote ended the approval: {done}"


def _arrived(e: Mapping[str, Any], who: str) -> str:
    d = _details(e)
    raw = d.get("changed_paths")
    paths = [str(p) for p in raw] if isinstance(raw, list) else []
    sources = "; its sources changed" if d.get("sources_changed") else ""
    return (
        f"Revision {d.get('revision')} arrived from {who}; changed: {field_labels(paths)}{sources}"
    )


def _reopened(e: Mapping[str, Any], who: str) -> str:
    d = _details(e)
    base = _arrived(e, who)
    previous = d.get("previous_decision")
    if d.get("effect") == "invalidate_approval":
        by = (previous.get("by") if isinstance(previous, dict) else None) or "the reviewer"
        return f"{base}. The approval by {by} no longer holds: back in review"
    return f"{base}. Back in review"


def _carried(e: Mapping[str, Any], who: str) -> str:
    return f"{_arrived(e, who)}. These fields need no new approval: the approval still holds"


def _escalated(e: Mapping[str, Any], who: str) -> str:
    d = _details(e)
    level = d.get("level")
    if d.get("level_action") == "reassign":
        return f"Not decided in time: moved to group {d.get('assigned_group')} (step {level})"
    return f"Not decided in time: reminder sent (step {level})"


def _expired(e: Mapping[str, Any], who: str) -> str:
    return "Nobody decided in time: the request expired"


def _cancelled(e: Mapping[str, Any], who: str) -> str:
    if e.get("actor_role") == "producer":
        return f"{who} withdrew the request"
    return f"{who} cancelled it"


def _reassigned(e: Mapping[str, Any], who: str) -> str:
    return f"{who} reassigned it to group {_details(e).get('assigned_group')}"


def _action(verb: str) -> Callable[[Mapping[str, Any], str], str]:
    def sentence(e: Mapping[str, Any], who: str) -> str:
        name = _details(e).get("action_id")
        return f"Action {name} {verb}" if name else f"An action {verb}"

    return sentence


def _source_revoked(e: Mapping[str, Any], who: str) -> str:
    return f"{who} withdrew source {_details(e).get('source_id')}"


#: Every event type a history shows, as a sentence (``who``: "You", a name, "Signoff").
EVENT_SENTENCES: Mapping[str, Callable[[Mapping[str, Any], str], str]] = MappingProxyType(
    {
        "task.created": _created,
        "task.claimed": _claimed,
        "task.lease_renewed": _renewed,
        "task.released": _released,
        "task.resolved": _resolved,
        "task.revised": _arrived,
        "task.approval_invalidated": _reopened,
        "task.approval_carried_forward": _carried,
        "task.execution_started": lambda e, who: "Execution of the approved actions started",
        "task.execution_renewed": lambda e, who: "Execution is still running",
        "task.execution_stalled": lambda e, who: "Execution stopped reporting back",
        "task.execution_refused": lambda e, who: "Execution was refused",
        "task.action_completed": _action("completed"),
        "task.action_failed": _action("failed"),
        "task.source_revoked": _source_revoked,
        "task.escalated": _escalated,
        "task.expired": _expired,
        "task.cancelled": _cancelled,
        "task.reassigned": _reassigned,
        "task.vote_cast": _voted,
        "task.votes_voided": _votes_voided,
    }
)


def event_sentence(event: Mapping[str, Any], me: str | None = None) -> str:
    """One history entry as a sentence (``Alice asked for a revision``; never its type)."""
    sentence = EVENT_SENTENCES.get(str(event.get("type")))
    who = _who(event, me)
    if sentence is None:
        return f"{who} changed the task"
    return sentence(event, who)


@dataclass(frozen=True)
class Entry:
    """A history entry: when, and what happened in a sentence."""

    at: When | None
    text: str
    #: The revision a "revision N arrived" entry brought (the page links its changes).
    revision: int | None = None


def history(trail: list[dict[str, Any]], me: str | None, now: datetime | None) -> list[Entry]:
    """The audit trail as entries, oldest first (lease renewals left out: noise)."""
    return [
        Entry(when(event.get("created_at"), now), event_sentence(event, me), _brought(event))
        for event in trail
        if event.get("type") != "task.lease_renewed"
    ]


def _brought(event: Mapping[str, Any]) -> int | None:
    revision = _details(event).get("revision")
    return revision if event.get("type") == "task.revised" and isinstance(revision, int) else None


# Refusals ------------------------------------------------------------------------------

#: What to tell a person when a decision or claim is refused, by the refusal's code.
REFUSAL_ADVICE: Mapping[ErrorCode, str] = MappingProxyType(
    {
        ErrorCode.STALE_REVISION: "A newer revision arrived while you were reading. "
        "Read what changed, then decide again.",
        ErrorCode.TASK_EXPIRED: "This request expired before a decision; nothing was recorded. "
        "There is nothing left to do.",
        ErrorCode.TASK_CANCELLED: "The producer withdrew this request; nothing was recorded. "
        "There is nothing left to do.",
        ErrorCode.CSRF: "This page is out of date. Reload it and decide again.",
        ErrorCode.NOT_IN_GROUP: "This task is now assigned to a group you are not in. "
        "Ask a supervisor if you should still decide it.",
        ErrorCode.ALREADY_VOTED: "You have already voted on this revision: a person's vote "
        "counts once. If the content changes materially, you will be asked to vote again.",
    }
)


def refusal_text(error: SignoffError) -> str:
    """A refusal in plain words: what happened and what to do (never its code)."""
    advice = REFUSAL_ADVICE.get(error.error_code)
    if advice is not None:
        return advice
    message = error.message.strip()
    sentence = message[:1].upper() + message[1:]
    return sentence if sentence.endswith((".", "!", "?")) else sentence + "."


def held_by_text(holder: str, since: datetime | str | None, now: datetime | None) -> str:
    """Someone else holds the task: who, since when, and what to do."""
    doing = (
        f"{holder} has been reviewing this task since {when_text(since, now)}"
        if since
        else f"{holder} is reviewing this task now"
    )
    return f"{doing}. Try again later, or ask {holder} whether they will decide it."


# Nested values -------------------------------------------------------------------------


def is_nested(value: Any) -> bool:
    """A non-empty object or list: shown as a nested list, not as one line of text."""
    return is_container(value) and bool(value)


def entries(value: Any) -> list[tuple[str, Any]]:
    """An object's fields (named as people read them) or a list's items (counted from 1)."""
    if isinstance(value, dict):
        return [(_humane(str(k)), v) for k, v in value.items()]
    if isinstance(value, list):
        return [(str(i + 1), v) for i, v in enumerate(value)]
    return []


def text_of(value: Any) -> str:
    """A leaf value as text (strings as they are; others as JSON: ``true``, ``12.5``)."""
    return scalar_text(value)


# The AI recommendation -----------------------------------------------------------------

#: The revision an escalation creates. A summary arrives only with the escalation (a new
#: revision never carries one), so it was written for this revision of the subject.
ESCALATED_REVISION = 1


def summary_revision(has_subject: bool) -> int | None:
    """The revision the AI recommendation read (``None``: the task has no subject)."""
    return ESCALATED_REVISION if has_subject else None


# The resume-link page ------------------------------------------------------------------

_INBOX = "find the task in your console inbox"

#: What a person opening a resume link can do, by why the link is where it is
#: (:class:`signoff.services.resume_links.LinkState` ``reason``).
LINK_ADVICE: Mapping[str, str] = MappingProxyType(
    {
        "open": "",
        "decided": "Nothing more to do here.",
        "voted": "Your part is done. If a new revision changes what you voted on, your vote "
        "stops counting and you get a new link by e-mail.",
        "withdrawn": "The task moved to another group, whose reviewers decide it now. "
        f"If you are in that group, {_INBOX}.",
        "cancelled": "Nothing was recorded and there is nothing left to do.",
        "expired": "Nothing was recorded and there is nothing left to do.",
        "link_expired": f"Links work for a limited time: {_INBOX}, or ask for a new link.",
        "unknown": "Check that the whole link from the e-mail was opened (some mail programs "
        "cut long links). If it still does not work, ask whoever sent it for a new link, "
        f"or {_INBOX}.",
        "refused": f"To see where the task stands, {_INBOX}.",
    }
)


def link_advice(reason: str) -> str:
    """What to do next on the resume-link page, for why it shows what it shows."""
    return LINK_ADVICE.get(reason, LINK_ADVICE["refused"])


def link_offers_console(reason: str) -> bool:
    """Whether the advice sends the person to the console (the page then links to it)."""
    return _INBOX in link_advice(reason)
