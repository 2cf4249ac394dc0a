"""Console passwords: the one rule a password must meet, Argon2id hashing (argon2-cffi)
and the SHA-256 of secrets handed out once (re-exported by :mod:`signoff.services.users`)."""

from __future__ import annotations

import functools
import hashlib
import secrets
from collections.abc import Sequence
from typing import Any

from signoff.errors import FieldError, validation_error

MIN_PASSWORD_LENGTH = 10
MAX_PASSWORD_LENGTH = 1024

_dummy_hash: str | None = None


@functools.cache
def _hasher() -> Any:
    """Argon2id with argon2-cffi's defaults (imported on first use)."""
    from argon2 import PasswordHasher

    return PasswordHasher()


def hash_token(token: str) -> str:
    """SHA-256 (hex) of a secret handed out once: a session id or a set-password token."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def hash_password(password: str) -> str:
    return str(_hasher().hash(password))


def verify_password(password_hash: str | None, password: str) -> bool:
    """Argon2 verification; an account without a password verifies a dummy hash so an
    unknown user takes as long as a known one."""
    global _dummy_hash
    if password_hash is None:
        if _dummy_hash is None:
            _dummy_hash = hash_password(secrets.token_urlsafe(16))
        password_hash = _dummy_hash
        password = password + "\x00never"
    from argon2.exceptions import InvalidHashError, VerificationError

    try:
        return bool(_hasher().verify(password_hash, password))
    except (VerificationError, InvalidHashError):
        return False


PASSWORD_CHECKED_LENGTH = 72
"""How much of a password the guessability estimate reads (zxcvbn's own limit: its cost
grows with length; 72 characters that are not guessable make the whole so)."""
MIN_PASSWORD_SCORE = 3
"""zxcvbn's score (0-4) a password must reach: 3 is "safely unguessable" (about 10^8
guesses or more, for an offline attack on a slow hash)."""
CONTEXT_WORDS = ("signoff", "sign-off", "console", "password")


def check_password_rules(password: str, *, context: Sequence[str] = ()) -> None:
    """The one rule a console password must meet (NIST SP 800-63B): at least
    ``MIN_PASSWORD_LENGTH`` characters, at most ``MAX_PASSWORD_LENGTH``, and not easy to
    guess: not a common or breached password, a keyboard pattern, a repetition, a date,
    or the user's own name and e-mail address or this service's name with little else
    (zxcvbn's frequency lists, offline). No composition rules.

    Raises:
        Unprocessable: 422 ``ERR_VALIDATION`` on ``password``, saying why.
    """
    if len(password) < MIN_PASSWORD_LENGTH:
        raise validation_error(
            [FieldError("password", f"must be at least {MIN_PASSWORD_LENGTH} characters")]
        )
    if len(password) > MAX_PASSWORD_LENGTH or "\x00" in password:
        raise validation_error(
            [FieldError("password", f"must be at most {MAX_PASSWORD_LENGTH} characters")]
        )
    words = _context_words(context)
    checked = password[:PASSWORD_CHECKED_LENGTH]
    weak = _weakness(checked, words)
    if weak is None:
        # The user's name or this service's name does not count as strength.
        rest = checked.lower()
        for word in sorted(words, key=len, reverse=True):
            rest = rest.replace(word, "")
        if rest != checked.lower():
            if len(rest) < MIN_PASSWORD_LENGTH:
                weak = "is mostly your user name, your e-mail address or the name of this service"
            elif _weakness(rest, words) is not None:
                weak = (
                    "is your user name, your e-mail address or the name of this service "
                    "with too little else"
                )
    if weak is not None:
        raise validation_error(
            [FieldError("password", f"{weak}. A few unrelated words make a good one")]
        )


def _context_words(context: Sequence[str]) -> list[str]:
    words = set(CONTEXT_WORDS)
    for item in context:
        for part in (item, *item.replace("@", " ").replace(".", " ").split()):
            if len(part) >= 3:
                words.add(part.lower())
    return sorted(words)


def _weakness(password: str, words: list[str]) -> str | None:
    """Why ``password`` is easy to guess, or ``None``."""
    from zxcvbn import zxcvbn

    result = zxcvbn(password, user_inputs=words)
    if result["score"] >= MIN_PASSWORD_SCORE:
        return None
    warning = str(result["feedback"].get("warning") or "").rstrip(".")
    if warning:
        return f"is too easy to guess ({warning[:1].lower() + warning[1:]})"
    return "is too easy to guess"
