"""Prometheus metrics (``GET /metrics``, admins and supervisors).

Counters, per process: state transitions by event type, webhook attempts by result,
notifications by result. Names follow Prometheus conventions (``_total`` suffix).
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics import MetricWrapperBase

M = TypeVar("M", bound=MetricWrapperBase)

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

# --- speed ---
REQUEST_SECONDS = Histogram(
    "signoff_http_request_duration_seconds",
    'HTTP request latency, by method and route template (unmatched paths: route="-").',
    ["method", "route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=REGISTRY,
)
RESOLVE_TO_DELIVERED = Histogram(
    "signoff_resolve_to_delivered_seconds",
    "From a task.resolved event's creation (the decision's commit) to its delivery "
    "succeeding at a webhook endpoint.",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600),
    registry=REGISTRY,
)
STORM_SHIELD = Counter(
    "signoff_storm_shield_total",
    "Redis storm shield outcomes: replayed (a duplicate answered from Redis), waited (a "
    "poll for a lock held by a request in flight), waited_out, redis_error.",
    ["result"],
    registry=REGISTRY,
)
GROUP_COMMIT_ENABLED = Gauge(
    "signoff_group_commit_enabled",
    "1 while this process writes PostgreSQL escalations in groups; 0 when it writes each "
    "alone (SQLite, or the reason logged as group_commit.unavailable).",
    registry=REGISTRY,
)
API_KEY_CACHE = Counter(
    "signoff_api_key_cache_total",
    "API key verifications, by result: hit (this process's cache) or miss (database).",
    ["result"],
    registry=REGISTRY,
)


def exposition() -> bytes:
    """The registry in Prometheus' text format."""
    return bytes(generate_latest(REGISTRY))


_CHILDREN: dict[tuple[Any, tuple[str, ...]], Any] = {}


def child(metric: M, *labels: str) -> M:
    """``metric.labels(*labels)``, found once per set of labels: prometheus_client takes a
    lock and builds its key on every ``labels`` call, about a microsecond each on the hot
    path. (No metric here ever has its children removed.)"""
    key = (metric, labels)
    found = _CHILDREN.get(key)
    if found is None:
        found = _CHILDREN[key] = metric.labels(*labels)
    return cast(M, found)
