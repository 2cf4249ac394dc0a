"""How a person wants to hear of work waiting for them: each event as it happens, one
digest e-mail every interval, or nothing (the work is still in the console).

The choices are data: every door (the console's "Your account" page, the users API) and
the notification outbox read :data:`NOTIFY_CHOICES` and :func:`parse_notify_choice`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from signoff.errors import FieldError, Unprocessable, validation_error


@dataclass(frozen=True)
class NotifyChoice:
    value: str
    label: str
    #: How long a digest gathers work before it is sent; ``None`` when there is no digest.
    every: timedelta | None = None


EACH = "each"
NONE = "none"
#: In the order the console offers them.
NOTIFY_CHOICES: tuple[NotifyChoice, ...] = (
    NotifyChoice(EACH, "Each event as it happens"),
    NotifyChoice("15m", "A digest every 15 minutes", timedelta(minutes=15)),
    NotifyChoice("1h", "A digest every hour", timedelta(hours=1)),
    NotifyChoice("4h", "A digest every 4 hours", timedelta(hours=4)),
    NotifyChoice("1d", "A digest once a day", timedelta(days=1)),
    NotifyChoice(NONE, "No e-mail (the work is still in the console)"),
)
_BY_VALUE = {choice.value: choice for choice in NOTIFY_CHOICES}
DEFAULT_NOTIFY = EACH


def notify_choice(value: str | None) -> NotifyChoice:
    """The stored choice (an unknown or missing one reads as the default)."""
    return _BY_VALUE.get(value or DEFAULT_NOTIFY, _BY_VALUE[DEFAULT_NOTIFY])


def parse_notify_choice(value: object, field: str = "notify") -> str:
    """A choice as given at a door.

    Raises:
        Unprocessable: ``ERR_VALIDATION`` naming ``field`` and the allowed values.
    """
    if isinstance(value, str) and value in _BY_VALUE:
        return value
    allowed = ", ".join(choice.value for choice in NOTIFY_CHOICES)
    raise _refused(field, f"must be one of {allowed}")


def _refused(field: str, message: str) -> Unprocessable:
    return validation_error([FieldError(field, message)])
