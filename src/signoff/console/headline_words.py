"""The words that put the headline into a decision: one sentence for every confirmation
(the console's decide form and vote buttons, the resume page)."""

from __future__ import annotations

from signoff.domain.decisions import rule_for
from signoff.domain.inbox import SEARCHED_FIELDS
from signoff.domain.states import Decision
from signoff.domain.tasks import Principal, Task


def confirm_text(label: str, title: str, revision: int | None, tail: str = "") -> str:
    """ "Approve “Release €12,500.00 to ACME Ltd” (revision 2)?" — what the button does,
    to what, and on which revision; ``tail``: what else it does (:func:`vote_tail`)."""
    on = f" (revision {revision})" if revision is not None else ""
    return f"{label} “{title}”{on}?" + (f" {tail}" if tail else "")


def vote_tail(decision: Decision, decides: bool) -> str:
    """What a vote that decides the task says in its confirmation."""
    if not decides:
        return ""
    if decision is Decision.APPROVED:
        return "This vote completes the quorum: the task is approved."
    return "This vote decides the task: the rule lets one vote against end it."


def edit_tail(voided: int, revision: int | None, decides: bool) -> str:
    """What an edit on a task decided by votes says in its confirmation: it is a new
    revision, the votes so far stop counting, and it is the first approval of the edit."""
    after = f"revision {revision + 1}" if revision is not None else "a new revision"
    text = f"Your edit becomes {after}, by you"
    if voided == 1:
        text += "; the vote so far stops counting"
    elif voided:
        text += f"; the {voided} votes so far stop counting"
    text += ", and your approval is the first vote on it."
    return text + (" " + vote_tail(Decision.APPROVED, True) if decides else "")


def searched_fields() -> str:
    """Where a search looked, for the result line: "headline, key fields, … or AI summary"."""
    return ", ".join(SEARCHED_FIELDS[:-1]) + " or " + SEARCHED_FIELDS[-1]


def my_vote(task: Task, principal: Principal) -> str | None:
    """ "you voted to approve" on a row of a task this person voted on (live votes)."""
    for vote in task.votes or []:
        if vote.get("voter") == principal.principal_id:
            return f"you voted to {rule_for(Decision(vote['decision'])).verb}"
    return None
