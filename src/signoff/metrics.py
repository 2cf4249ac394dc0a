"""Prometheus metrics (``GET /metrics``, admins and supervisors).

Counters, per process: state transitions by event type, webhook attempts by result,
notifications by result. Names follow Prometheus conventions (``_total`` suffix).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

REGISTRY = CollectorRegistry(auto_describe=True)

TRANSITIONS = Counter(
    "signoff_transitions_total", "Task state changes, by event type.", ["event"], registry=REGISTRY
)
WEBHOOK_ATTEMPTS = Counter(
    "signoff_webhook_attempts_total",
    "Webhook delivery attempts, by result (SUCCEEDED, PENDING = will retry, DEAD).",
    ["result"],
    registry=REGISTRY,
)
NOTIFICATIONS = Counter(
    "signoff_notifications_total",
    "E-mail notification attempts, by result.",
    ["result"],
    registry=REGISTRY,
)
LONG_POLL_WAITERS = Gauge(
    "signoff_long_poll_waiters",
    "Requests parked in GET /tasks/{id}?wait=… (they hold no database connection).",
    registry=REGISTRY,
)


def exposition() -> bytes:
    """The registry in Prometheus' text format."""
    return bytes(generate_latest(REGISTRY))
