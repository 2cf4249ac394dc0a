"""The doors a person decides through, and how a card or a receipt says each.

Every decision names its door: a vote records it with the vote, a single person's
decision (a resolve) in the details of its audit event, and the receipt over that
event carries it as ``who.door``. A door the list does not know is recorded as ``api``
(the door of every caller holding a key).
"""

from __future__ import annotations

#: Every door, as recorded.
DOORS = ("api", "console", "link", "slack")

#: A door in words, after "Approved by alice …".
DOOR_WORDS = {
    "api": "through the API",
    "console": "in the console",
    "link": "by a link",
    "slack": "in Slack",
}


def recorded_door(door: str) -> str:
    """The door as recorded: one of :data:`DOORS`, else ``api``."""
    return door if door in DOORS else "api"


def door_words(door: str | None) -> str | None:
    """Where a decision was made, in words ("in Slack"); ``None`` when the door is not
    known (a decision recorded before doors were)."""
    if not door:
        return None
    return DOOR_WORDS.get(door, f"through {door}")
