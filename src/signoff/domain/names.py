"""People's names (principal ids) as the console and vote lists show them: one form per
name, so two accounts never look alike.

A name is stored in Unicode normalisation form NFKC (``ｏｌｇａ`` and ``olga`` are one
name; ligatures, full-width and compatibility forms become their plain letters) and
compared by its *key*, NFKC then case-folded (``Olga``, ``OLGA`` and ``olga`` collide). A
new account (single sign-on's first sign-in, an admin creating a user) whose key equals
an existing principal's, but whose name is not that principal's exactly, is refused: it
would sit beside the other in vote lists looking like the same person.

NFKC does not fold letters of different scripts that look alike (Cyrillic ``о`` and
Latin ``o``); those names stay distinct.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable


def normal_name(name: str) -> str:
    """``name`` in NFKC, the form it is stored in."""
    return unicodedata.normalize("NFKC", name)


def name_key(name: str) -> str:
    """What two names are compared by: NFKC, case-folded, NFKC again (case folding can
    leave a string that is not in NFKC)."""
    return unicodedata.normalize("NFKC", normal_name(name).casefold())


def look_alike(name: str, existing: Iterable[str]) -> str | None:
    """An existing name that ``name`` would be confused with (same key, not the same
    name), or ``None``."""
    key = name_key(name)
    return next((other for other in existing if other != name and name_key(other) == key), None)
