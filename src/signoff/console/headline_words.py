"""The words that put the headline into a decision: one sentence for every confirmation
(the console's decide form and vote buttons, the resume page)."""

from __future__ import annotations

from signoff.domain.inbox import SEARCHED_FIELDS


def confirm_text(label: str, title: str, revision: int | None, *, completes: bool = False) -> str:
    """ "Approve “Release €12,500.00 to ACME Ltd” (revision 2)?" — what the button does,
    to what, and on which revision; ``completes``: this vote completes the quorum."""
    on = f" (revision {revision})" if revision is not None else ""
    tail = " This vote completes the quorum: the task is decided." if completes else ""
    return f"{label} “{title}”{on}?{tail}"


def searched_fields() -> str:
    """Where a search looked, for the result line: "headline, key fields, … or AI summary"."""
    return ", ".join(SEARCHED_FIELDS[:-1]) + " or " + SEARCHED_FIELDS[-1]
