"""The console inbox's rules that need no database: what its search matches, how a
search is read, and the page marks (cursors) its links carry.

Pure functions: nothing here touches a database or HTTP.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from signoff.domain.params import decode_token
from signoff.errors import FieldError, validation_error

#: A search longer than this is refused (the field ``q``).
MAX_SEARCH_LENGTH = 200
#: The largest escalation level a filter names (a larger one is refused, field ``level``).
MAX_LEVEL = 99_999
#: At most this many words of a search are used (each must match).
MAX_SEARCH_TERMS = 8


def search_text(
    entity_type: str,
    entity_id: str,
    reason_code: str,
    summary: dict[str, Any] | None,
    headline: dict[str, Any] | None = None,
) -> str:
    """What the inbox search matches for a task, in lower case: its entity type, entity
    id and reason code, its headline and key fields (as shown, and their plain values),
    and its AI summary's recommendation, rationale and risks."""
    parts = [entity_type, entity_id, reason_code, *headline_words(headline)]
    if isinstance(summary, dict):
        for name in ("recommendation", "rationale"):
            if isinstance(summary.get(name), str):
                parts.append(summary[name])
        risks = summary.get("risks")
        if isinstance(risks, list):
            parts += [risk for risk in risks if isinstance(risk, str)]
    return " ".join(parts).lower()


def headline_words(headline: dict[str, Any] | None) -> list[str]:
    """A headline's title, its key fields' labels and texts, and their plain values."""
    if not isinstance(headline, dict):
        return []
    words = [str(headline.get("title", ""))]
    for field in headline.get("fields", []):
        words += [str(field.get("label", "")), str(field.get("text", ""))]
        if isinstance(field.get("value"), str | int | float):
            words.append(str(field["value"]))
    for value in headline.get("values", {}).values():
        if isinstance(value, str | int | float):
            words.append(str(value))
    return words


#: The fields the inbox search looks in, as the result line names them.
SEARCHED_FIELDS = ("headline", "key fields", "entity", "reason", "AI summary")


def search_terms(raw: str | None) -> tuple[str, ...]:
    """The words of a search, lower case (a task must contain each one). Empty: no search.

    Raises:
        Unprocessable: ``ERR_VALIDATION`` (field ``q``) when too long or holding U+0000.
    """
    if raw is None:
        return ()
    if len(raw) > MAX_SEARCH_LENGTH:
        raise validation_error([FieldError("q", f"must be at most {MAX_SEARCH_LENGTH} characters")])
    if "\x00" in raw:
        raise validation_error([FieldError("q", "must not contain U+0000")])
    return tuple(dict.fromkeys(raw.lower().split()))[:MAX_SEARCH_TERMS]


@dataclass(frozen=True)
class Cursor:
    """A mark between two rows of a view: the sort values of the row it follows (or
    precedes) and that row's id. ``backward``: the page before the mark."""

    values: tuple[str, ...]
    backward: bool = False

    def encode(self) -> str:
        raw = json.dumps(list(self.values), separators=(",", ":")).encode("utf-8")
        return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(raw: str, *, backward: bool, field: str) -> Cursor:
    """A cursor from a link's ``after`` or ``before`` parameter.

    Raises:
        Unprocessable: ``ERR_VALIDATION`` naming ``field`` when it is not a cursor.
    """
    try:
        decoded = decode_token(raw, max_length=400)
    except ValueError:
        decoded = None
    if not (
        isinstance(decoded, list)
        and 1 <= len(decoded) <= 4
        and all(isinstance(v, str) and "\x00" not in v for v in decoded)
    ):
        raise validation_error([FieldError(field, "is not a page of this view")])
    return Cursor(tuple(decoded), backward=backward)
