"""OpenTelemetry traces from a running ``signoff serve``, configured by the standard
``OTEL_*`` variables alone, received over real OTLP/HTTP and decoded with the protocol's
own messages: the caller's ``traceparent`` joins their trace, the decision links to the
escalation's span, and the webhook delivery attempt is a client span linked to it."""

from __future__ import annotations

import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.conftest import TEST_ENCRYPTION_KEY
from tests.processes import Server, wait_for, worker
from tests.receiver import Receiver
from tests.support import ADMIN_KEY, Client, escalation, example_resolve

SERVICE = "signoff-under-test"


def received_spans(collector: Receiver) -> list[tuple[dict[str, Any], Span]]:
    """Every span received so far, with its resource's attributes."""
    spans = []
    for request in list(collector.received):
        assert request.path == "/v1/traces"
        headers = {name.lower(): value for name, value in request.headers.items()}
        assert headers["content-type"] == "application/x-protobuf"
        export = ExportTraceServiceRequest.FromString(request.body)
        for resource_spans in export.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                spans.extend((resource, span) for span in scope_spans.spans)
    return spans


def attributes(span: Span) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for attribute in span.attributes:
        value = attribute.value
        values[attribute.key] = getattr(value, value.WhichOneof("value"))
    return values


def test_a_decision_hours_later_is_linked_to_the_escalation_in_the_callers_trace(
    database_url: str, tmp_path: Path
) -> None:
    caller_trace, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    with Receiver() as collector, Receiver() as hook:
        env = {
            "SIGNOFF_DATABASE_URL": database_url,
            "SIGNOFF_BOOTSTRAP_ADMIN_KEY": ADMIN_KEY,
            "SIGNOFF_ENCRYPTION_KEYS": TEST_ENCRYPTION_KEY,
            "SIGNOFF_WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_SERVICE_NAME": SERVICE,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
        with Server(env, tmp_path / "serve.log") as server:
            admin = Client(server.base_url, ADMIN_KEY, "admin")
            keys = {}
            for role in ("producer", "reviewer"):
                made = admin.post("/api-keys", json={"role": role, "principal_id": f"{role}-1"})
                assert made.status_code == 201, made.text
                keys[role] = made.json()["key"]
            assert admin.post("/webhook-endpoints", json={"url": hook.url}).status_code == 201
            agent = Client(server.base_url, keys["producer"], "producer-1")
            reviewer = Client(server.base_url, keys["reviewer"], "reviewer-1")
            escalated = agent.post(
                "/tasks/escalate",
                json=escalation(),
                headers={"traceparent": f"00-{caller_trace}-{caller_span}-01"},
            )
            assert escalated.status_code == 201, escalated.text
            task_id = escalated.json()["task_id"]
            claimed = reviewer.claim(task_id)
            assert claimed.status_code == 200, claimed.text
            body = example_resolve() | {"operator_id": "reviewer-1"}
            resolved = reviewer.resolve(task_id, claimed.json()["lease_token"], body)
            assert resolved.status_code == 200, resolved.text

            def names() -> set[str]:
                return {span.name for _, span in received_spans(collector)}

            wait_for(
                lambda: {"signoff task.resolved", "signoff webhook.deliver"} <= names(),
                what="the decision's and a delivery's spans",
            )
            for client in (admin, agent, reviewer):
                client.close()

    spans = received_spans(collector)
    assert {resource["service.name"] for resource, _ in spans} == {SERVICE}
    by_id = {span.span_id: span for _, span in spans}

    # The escalation's request span is the caller's span's child, in the caller's trace.
    (created,) = [s for _, s in spans if s.name == "signoff task.created"]
    escalate = by_id[created.parent_span_id]
    assert escalate.kind == Span.SPAN_KIND_SERVER
    assert escalate.trace_id.hex() == caller_trace
    assert escalate.parent_span_id.hex() == caller_span
    assert escalate.name == "POST /tasks/escalate"
    assert attributes(escalate)["http.request.method"] == "POST"
    assert attributes(created)["signoff.task.id"] == task_id

    # The decision is in the reviewer's request, linked to the escalation's span.
    (decided,) = [s for _, s in spans if s.name == "signoff task.resolved"]
    decide = by_id[decided.parent_span_id]
    assert decide.kind == Span.SPAN_KIND_SERVER
    # Named by the route's template, not the task's path.
    assert decide.name == "POST /tasks/{task_id}/resolve"
    assert attributes(decide)["http.route"] == "/tasks/{task_id}/resolve"
    assert decided.trace_id != escalate.trace_id  # another request, another trace
    (link,) = decided.links
    assert (link.trace_id, link.span_id) == (escalate.trace_id, escalate.span_id)
    decision = attributes(decided)
    assert decision["signoff.task.id"] == task_id
    assert decision["enduser.id"] == "reviewer-1"
    assert decision["signoff.decision"] == body["decision"]
    assert decision["signoff.task.waited_seconds"] >= 0

    # The callback's attempt: a client span linked to the same escalation span.
    attempt = next(s for _, s in spans if s.name == "signoff webhook.deliver")
    assert attempt.kind == Span.SPAN_KIND_CLIENT
    assert [(x.trace_id, x.span_id) for x in attempt.links] == [
        (escalate.trace_id, escalate.span_id)
    ]
    attempt_attributes = attributes(attempt)
    assert attempt_attributes["http.response.status_code"] == 200
    assert attempt_attributes["server.address"] == "127.0.0.1"
    assert attempt_attributes["server.port"] == int(hook.url.rsplit(":", 1)[1])
    # The callback carries the trace on: its traceparent names the escalation's span.
    sent = {r.headers["traceparent"] for r in hook.received}
    assert f"00-{caller_trace}-{escalate.span_id.hex()}-01" in sent


def test_a_separate_worker_traces_its_delivery_attempts(database_url: str, tmp_path: Path) -> None:
    """``signoff worker`` (the dispatcher without HTTP) reads the same variables."""
    base = {
        "SIGNOFF_DATABASE_URL": database_url,
        "SIGNOFF_BOOTSTRAP_ADMIN_KEY": ADMIN_KEY,
        "SIGNOFF_ENCRYPTION_KEYS": TEST_ENCRYPTION_KEY,
        "SIGNOFF_WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
    }
    with Receiver() as collector, Receiver() as hook:
        traced = {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{collector.url}/v1/traces",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
        # The server neither dispatches nor traces: every span comes from the worker.
        serve_env = base | {"SIGNOFF_RUN_WORKERS": "false"}
        with Server(serve_env, tmp_path / "serve.log") as server:
            with Client(server.base_url, ADMIN_KEY, "admin") as admin:
                assert admin.post("/webhook-endpoints", json={"url": hook.url}).status_code == 201
                made = admin.post("/api-keys", json={"role": "producer", "principal_id": "agent"})
                assert made.status_code == 201, made.text
            with Client(server.base_url, made.json()["key"], "agent") as agent:
                escalated = agent.post("/tasks/escalate", json=escalation())
                assert escalated.status_code == 201, escalated.text
            with worker(base | traced, tmp_path / "worker.log"):
                wait_for(lambda: hook.received, what="the webhook")
                wait_for(
                    lambda: any(
                        span.name == "signoff webhook.deliver"
                        for _, span in received_spans(collector)
                    ),
                    what="the delivery attempt's span",
                )
    spans = received_spans(collector)
    assert {span.name for _, span in spans} == {"signoff webhook.deliver"}
    assert {resource["service.name"] for resource, _ in spans} == {"signoff"}
    (attempt,) = [span for _, span in spans]
    assert attributes(attempt)["signoff.delivery.attempt"] == 1
    assert attributes(attempt)["signoff.event.id"] == hook.received[0].headers["webhook-id"]


def test_tracing_off_imports_no_opentelemetry() -> None:
    """Off by default: building the app loads none of the SDK, the exporter or the
    instrumentation (FastAPI itself imports the API package when it is installed)."""
    code = (
        "import sys\n"
        "from signoff.api.app import create_app\n"
        "from signoff.settings import Settings\n"
        "create_app(Settings(database_url='sqlite:///unused.db'))\n"
        "parts = ('opentelemetry.sdk', 'opentelemetry.exporter', 'opentelemetry.instrumentation')\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(parts))\n"
        "assert not loaded, loaded\n"
        "import opentelemetry.sdk\n"  # installed: it is off, not missing
    )
    env = {"PATH": "/usr/bin:/bin", "OTEL_TRACES_EXPORTER": "none"}
    finished = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert finished.returncode == 0, finished.stderr
