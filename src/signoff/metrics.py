"""Prometheus metrics (``GET /metrics``, admins and supervisors).

Counters: state transitions by event type, webhook attempts by result, notifications by
result. Names follow Prometheus conventions (``_total`` suffix). Under
``signoff serve --workers N`` every process writes its values to files in
``PROMETHEUS_MULTIPROC_DIR`` (prometheus_client's multi-process mode, set up by ``serve``)
and ``/metrics`` answers the sum of all processes, whichever process answers.
"""

from __future__ import annotations

import os
from typing import Any, TypeVar, cast

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics import MetricWrapperBase

M = TypeVar("M", bound=MetricWrapperBase)

REGISTRY = CollectorRegistry(auto_describe=True)

TRANSITIONS = Counter(
    "signoff_transitions_total", "Task state changes, by event type.", ["event"], registry=REGISTRY
)
SLACK_CALLS = Counter(
    "signoff_slack_calls_total",
    "Calls to Slack's Web API by the Slack door, by method and result (ok, rate_limited, "
    "a Slack error such as invalid_auth or token_revoked, unreachable).",
    ["method", "result"],
    registry=REGISTRY,
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
CATCHUP_HELD_BACK = Gauge(
    "signoff_catchup_held_back_seconds",
    "How long the oldest committed event has waited to be readable by GET /events "
    "(PostgreSQL: an older transaction is still open on the server); 0 when none waits.",
    registry=REGISTRY,
    multiprocess_mode="livemax",
)
CATCHUP_HELD_EVENTS = Gauge(
    "signoff_catchup_held_back_events",
    "Committed events GET /events cannot return yet (PostgreSQL: waiting for an older "
    "open transaction on the server).",
    registry=REGISTRY,
    multiprocess_mode="livemax",
)
LONG_POLL_WAITERS = Gauge(
    "signoff_long_poll_waiters",
    "Requests parked in GET /tasks/{id}?wait=… (they hold no database connection).",
    registry=REGISTRY,
    multiprocess_mode="livesum",
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
    multiprocess_mode="min",  # several processes: 0 when any of them writes alone
)
API_KEY_CACHE = Counter(
    "signoff_api_key_cache_total",
    "API key verifications, by result: hit (this process's cache) or miss (database).",
    ["result"],
    registry=REGISTRY,
)


#: Where the processes of ``serve --workers N`` keep their values (prometheus_client's
#: own variable; it must be set before prometheus_client is first imported).
MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"


def exposition() -> bytes:
    """The registry in Prometheus' text format: this process's, or in multi-process mode
    the values of every process, summed (gauges as their ``multiprocess_mode`` says)."""
    if os.environ.get(MULTIPROCESS_DIR):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return bytes(generate_latest(registry))
    return bytes(generate_latest(REGISTRY))


def process_stopped() -> None:
    """In multi-process mode, drop this process's live gauges (its counters stay)."""
    if os.environ.get(MULTIPROCESS_DIR):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]


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
