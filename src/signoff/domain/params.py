"""The one strict reader of values parsed by hand: whole numbers in query values, form
fields and headers, and the opaque tokens (cursors, the console's lease cookie) that are
base64 of JSON.

Python's own readers are too generous for input: ``"²".isdigit()`` is true while
``int("²")`` raises, ``int()`` reads ``"٣"``, ``" 7"`` and ``"+7"``, refuses more than
4,300 digits with an error, and ``json.loads`` of deep nesting raises ``RecursionError``.
Every door reads such values through these functions, so an odd value is refused the same
way everywhere (``ERR_VALIDATION`` naming the field, or ``None`` where the caller treats an
unreadable value as absent) and never reaches ``int()`` or the database.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from signoff.errors import FieldError, validation_error

#: The largest whole number any of these values may hold: a PostgreSQL ``integer``.
MAX_WHOLE_NUMBER = 2**31 - 1
#: The longest token read (the console's lease cookie is the largest, about 4 KB).
MAX_TOKEN_LENGTH = 8192

_DIGITS = re.compile(r"[0-9]{1,10}")


def number_or_none(raw: str | None, *, most: int = MAX_WHOLE_NUMBER) -> int | None:
    """``raw`` as a whole number from 0 to ``most`` written in ASCII digits, else ``None``
    (absent, empty, signs, spaces, other scripts' digits, superscripts, too large)."""
    if raw is None or _DIGITS.fullmatch(raw) is None:
        return None
    value = int(raw)
    return value if value <= most else None


def whole_number(raw: str | None, *, field: str, most: int = MAX_WHOLE_NUMBER) -> int | None:
    """``raw`` as a whole number from 0 to ``most``; ``None`` when absent or empty.

    Raises:
        Unprocessable: ``ERR_VALIDATION`` naming ``field`` for anything else.
    """
    if raw is None or raw == "":
        return None
    value = number_or_none(raw, most=most)
    if value is None:
        raise validation_error(
            [FieldError(field, f"must be a whole number from 0 to {most} in digits 0-9")]
        )
    return value


def decode_token(raw: str, *, max_length: int = MAX_TOKEN_LENGTH) -> Any:
    """The JSON value inside an unpadded URL-safe base64 token. The caller checks its
    shape (a token may hold any JSON value).

    Raises:
        ValueError: for anything that is not such a token (too long, not base64, not
            UTF-8, not JSON, nested too deep).
    """
    if len(raw) > max_length or not raw.isascii():
        raise ValueError("not a token")
    try:
        data = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
        return json.loads(data.decode("utf-8"))
    except (ValueError, binascii.Error, RecursionError) as error:  # JSON's errors are ValueErrors
        raise ValueError("not a token") from error
