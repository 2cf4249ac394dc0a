"""Webhook delivery rules: which endpoint gets which event, how a response is judged, and
when the next attempt happens. Pure functions.

Callbacks are signed, and may arrive late or twice and must be harmless: delivery is
at least once, with a stable event id (``webhook-id``) that receivers deduplicate on.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from signoff.domain.params import number_or_none

#: Delay before each attempt, in seconds: immediately, 5 s, 5 min, 30 min, 2 h, 5 h,
#: 10 h, 10 h (the schedule Standard Webhooks senders use). After the last, dead letter.
DEFAULT_RETRY_SCHEDULE: tuple[int, ...] = (0, 5, 300, 1800, 7200, 18000, 36000, 36000)

#: An endpoint that has failed without a single success for this long is disabled.
FAILING_ENDPOINT_DISABLE_AFTER = timedelta(days=5)

#: Longest ``Retry-After`` honoured, in seconds.
MAX_RETRY_AFTER_SECONDS = 86400


class DeliveryStatus(StrEnum):
    PENDING = "PENDING"
    SUCCEEDED = "SUCCEEDED"
    DEAD = "DEAD"


@dataclass(frozen=True)
class EndpointFilter:
    """``None`` or an empty list means every event type / entity type. ``producer_id``
    (a producer's own endpoint) limits it to that producer's tasks."""

    event_types: Sequence[str] | None
    entity_types: Sequence[str] | None
    producer_id: str | None = None


def endpoint_wants(endpoint: EndpointFilter, event_type: str, data: dict[str, Any]) -> bool:
    if endpoint.producer_id is not None and data.get("producer_id") != endpoint.producer_id:
        return False
    if endpoint.event_types and event_type not in endpoint.event_types:
        return False
    return not endpoint.entity_types or data.get("entity_type") in endpoint.entity_types


class Verdict(StrEnum):
    SUCCESS = "success"
    RETRY = "retry"
    DISABLE_ENDPOINT = "disable_endpoint"


@dataclass(frozen=True)
class AttemptOutcome:
    """What one HTTP attempt produced. ``status_code`` is ``None`` for a timeout or a
    connection error (then ``error`` says which)."""

    status_code: int | None
    error: str | None = None
    retry_after_seconds: float | None = None


def judge(outcome: AttemptOutcome) -> Verdict:
    """2xx succeeds; ``410 Gone`` disables the endpoint; everything else (3xx included,
    redirects are never followed) is a failure to retry."""
    if outcome.status_code is not None and 200 <= outcome.status_code < 300:
        return Verdict.SUCCESS
    if outcome.status_code == 410:
        return Verdict.DISABLE_ENDPOINT
    return Verdict.RETRY


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """``Retry-After`` as seconds (delta-seconds or an HTTP date), capped at a day."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():  # delta-seconds; more than a day is a day
        seconds = number_or_none(value, most=MAX_RETRY_AFTER_SECONDS)
        return float(MAX_RETRY_AFTER_SECONDS if seconds is None else seconds)
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, min((when - now).total_seconds(), MAX_RETRY_AFTER_SECONDS))


def next_attempt_delay(
    *,
    attempts_made: int,
    schedule: Sequence[int],
    outcome: AttemptOutcome,
    jitter: float,
    rng: random.Random | None = None,
) -> float | None:
    """Seconds until the next attempt, or ``None`` when the schedule is exhausted (dead
    letter). ``attempts_made`` counts the attempt just judged. ``Retry-After`` (sent with
    429 or 503) replaces the scheduled delay. ``jitter`` spreads the delay by ±fraction."""
    if attempts_made >= len(schedule):
        return None
    if outcome.status_code in (429, 503) and outcome.retry_after_seconds is not None:
        return outcome.retry_after_seconds
    delay = float(schedule[attempts_made])
    if jitter > 0 and delay > 0:
        delay *= 1 + (rng or random.SystemRandom()).uniform(-jitter, jitter)
    return delay


def parse_retry_schedule(text: str) -> tuple[int, ...]:
    """``SIGNOFF_WEBHOOK_RETRY_SCHEDULE``: comma-separated non-negative seconds."""
    values = tuple(int(part) for part in text.split(",") if part.strip())
    if not values or any(v < 0 for v in values):
        raise ValueError("the retry schedule needs at least one non-negative number of seconds")
    return values


# What a failed attempt may tell a non-admin -------------------------------------------
#
# Transport errors name internal hosts and addresses (``ConnectError: [Errno 111] ... to
# 10.0.0.7``); only admins read them. Everyone else gets one of these categories.

ERROR_CATEGORIES = (
    "timeout",
    "refused",
    "tls",
    "dns",
    "http_status",
    "ssrf_blocked",
    "connection",
    "other",
)


def error_category(status_code: int | None, error: str | None) -> str | None:
    """The category of a failed attempt (``None`` for a success or a pending one)."""
    if error is None:
        if status_code is None or 200 <= status_code < 300:
            return None
        return "http_status"
    text = error.lower()
    if text == "timeout" or "timeout" in text or "timed out" in text:
        return "timeout"
    if text.startswith("webhook url refused"):
        return "dns" if "does not resolve" in text else "ssrf_blocked"
    if "ssl" in text or "tls" in text or "certificate" in text:
        return "tls"
    if "refused" in text:
        return "refused"
    if "name or service not known" in text or "nodename nor servname" in text:
        return "dns"
    if "error" in text:
        return "connection"
    return "other"


@dataclass(frozen=True)
class ClaimedDelivery:
    """A delivery leased for one attempt, with what sending it needs."""

    id: uuid.UUID
    attempt: int
    endpoint_id: uuid.UUID
    url: str
    secrets_newest_first: tuple[str, ...]
    event_id: uuid.UUID
    payload: dict[str, Any]
    traceparent: str | None = None
    """The W3C ``traceparent`` the task was escalated with, sent as a header."""
    record_id: int | None = None
    """The trail record the event reports, whose receipt the body carries."""
    receipt: str | None = None
    """That record's receipt (compact JWS), once signed."""
    asymmetric: bool = False
    """Also sign with the server's Ed25519 key (``v1a``)."""
