"""OpenTelemetry traces: off unless ``OTEL_TRACES_EXPORTER`` names an exporter.

Everything is configured by the specification's own variables, read by the SDK itself:
``OTEL_TRACES_EXPORTER`` (``otlp``, or ``console`` to print spans), the OTLP/HTTP
exporter's ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` /
``..._HEADERS`` / ``..._TIMEOUT``, ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``,
the batch processor's ``OTEL_BSP_*``, the sampler's ``OTEL_TRACES_SAMPLER``. The SDK
(the ``otel`` extra) is imported only when tracing is on: off, this module costs one
``is None`` test per state transition and nothing else.

What is traced:

- every HTTP request (a server span; the caller's ``traceparent`` is its parent);
- every state transition (a span ``signoff <event type>``, a child of the request that
  made it). The escalation keeps the trace context of its request span as the task's
  ``traceparent``: every later transition of the task (the decision hours later) links
  to that span, so the agent's trace shows the wait and who decided;
- every webhook delivery attempt (a client span linked to the escalation's span).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from opentelemetry.trace import Link, Tracer

    from signoff.domain.tasks import Task

log = logging.getLogger("signoff.tracing")

#: Request spans are not split into the ASGI receive/send events (one span per request).
_EXCLUDED_SPANS = ["receive", "send"]
#: The OTLP protocol the shipped exporter speaks.
_PROTOCOL = "http/protobuf"

_tracer: Tracer | None = None


def enabled() -> bool:
    """Whether the environment turns tracing on (``OTEL_SDK_DISABLED`` wins)."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    names = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    return names not in ("", "none")


def start() -> bool:
    """When tracing is on: set up the SDK from the environment, once per process (``signoff
    worker`` calls this; :func:`install` does for the server). Returns whether it is on."""
    global _tracer
    if not enabled():
        return False
    if _tracer is None:
        _tracer = _start_sdk()
    return True


def install(app: Any) -> None:
    """When tracing is on: :func:`start`, and add the request spans to ``app`` as its
    outermost middleware. Off: nothing."""
    if not start():
        return
    # The stable HTTP semantic conventions (http.request.method, url.path, ...) unless the
    # operator chose otherwise; read by the instrumentation when it is first imported.
    os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "http")
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

    app.add_middleware(
        OpenTelemetryMiddleware,
        exclude_spans=_EXCLUDED_SPANS,
        default_span_details=_route_of(app),
    )


def _route_of(app: Any) -> Callable[[dict[str, Any]], tuple[str, dict[str, Any]]]:
    """Request spans named ``{method} {route}`` with ``http.route`` (the template, e.g.
    ``/tasks/{task_id}/resolve``), never the path itself: a task id in every span name
    would make as many names as tasks."""
    from starlette.routing import compile_path

    routes: list[tuple[Any, str]] = []

    def details(scope: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if not routes:  # the API's templates, as its OpenAPI document lists them
            routes.extend((compile_path(path)[0], path) for path in app.openapi()["paths"])
        method = str(scope.get("method") or "HTTP")
        path = str(scope.get("path") or "")
        for pattern, template in routes:
            if pattern.match(path):
                return f"{method} {template}", {"http.route": template}
        return method, {}

    return details


def _start_sdk() -> Tracer:
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SpanExporter,
    )

    from signoff import __version__

    exporters: list[SpanExporter] = []
    for name in os.environ["OTEL_TRACES_EXPORTER"].split(","):
        name = name.strip().lower()
        if name == "otlp":
            protocol = os.environ.get(
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", _PROTOCOL),
            )
            if protocol != _PROTOCOL:
                log.warning("OTLP protocol %r is not shipped; sending %s", protocol, _PROTOCOL)
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter,
            )

            exporters.append(OTLPSpanExporter())  # endpoint, headers, timeout: OTEL_* vars
        elif name == "console":
            exporters.append(ConsoleSpanExporter())
        elif name != "none":
            log.warning("OTEL_TRACES_EXPORTER %r is not shipped; ignored", name)
    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES are read by Resource.create (and win
    # over the attributes given here); the service is "signoff" unless they name it.
    named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    attributes = {"service.version": __version__} | ({} if named else {"service.name": "signoff"})
    resource = Resource.create(attributes)
    provider = TracerProvider(resource=resource)  # OTEL_TRACES_SAMPLER, span limits
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))  # OTEL_BSP_*
    trace.set_tracer_provider(provider)
    return trace.get_tracer("signoff", __version__)


def current_traceparent() -> str | None:
    """The W3C ``traceparent`` of the span in progress (the escalation's request), or
    ``None`` when tracing is off or no span is in progress."""
    if _tracer is None:
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def _links(traceparent: str | None) -> list[Link]:
    """A link to the span a task's ``traceparent`` names (its escalation's)."""
    if not traceparent:
        return []
    from opentelemetry.trace import Link, SpanContext, TraceFlags

    _version, trace_id, span_id, flags = traceparent.split("-")
    context = SpanContext(
        int(trace_id, 16), int(span_id, 16), is_remote=True, trace_flags=TraceFlags(int(flags, 16))
    )
    return [Link(context, {"signoff.link": "escalation"})]


def transition(event_type: str, action: str, task: Task, actor: str) -> None:
    """A span for one state transition (the current request's child)."""
    if _tracer is None:
        return
    attributes: dict[str, Any] = {
        "signoff.task.id": str(task.id),
        "signoff.task.status": task.status.value,
        "signoff.task.version": task.version,
        "signoff.transition.action": action,
        "enduser.id": actor,
    }
    if task.decision is not None:
        attributes["signoff.decision"] = task.decision
    if task.resolved_at is not None:
        waited = task.resolved_at - task.created_at
        attributes["signoff.task.waited_seconds"] = waited.total_seconds()
    links = [] if action == "escalate" else _links(task.traceparent)
    with _tracer.start_as_current_span(f"signoff {event_type}", links=links, attributes=attributes):
        pass


@contextmanager
def delivery_attempt(
    url: str, event_id: str, delivery_id: str, attempt: int, traceparent: str | None
) -> Iterator[Callable[[int | None, str | None], None]]:
    """A client span around one webhook delivery attempt, linked to the escalation's span;
    the caller reports the answer (status, error) through the function it is given. The
    endpoint is named by host and port only (its path or query may hold a secret)."""
    if _tracer is None:
        yield _no_outcome
        return
    from opentelemetry.trace import SpanKind, Status, StatusCode

    endpoint = urlsplit(url)
    attributes: dict[str, Any] = {
        "http.request.method": "POST",
        "server.address": endpoint.hostname or "",
        "server.port": endpoint.port or (443 if endpoint.scheme == "https" else 80),
        "signoff.event.id": event_id,
        "signoff.delivery.id": delivery_id,
        "signoff.delivery.attempt": attempt,
    }
    with _tracer.start_as_current_span(
        "signoff webhook.deliver",
        kind=SpanKind.CLIENT,
        links=_links(traceparent),
        attributes=attributes,
    ) as span:

        def outcome(status: int | None, error: str | None) -> None:
            if status is not None:
                span.set_attribute("http.response.status_code", status)
            if error is not None or status is None or status >= 400:
                span.set_attribute("error.type", error or str(status))
                span.set_status(Status(StatusCode.ERROR))

        yield outcome


def _no_outcome(_status: int | None, _error: str | None) -> None:
    return None
