"""The fast lane (signoff.api.fastlane) answers the hot task routes itself, with the same
answers FastAPI would give: the rest of the suite checks what those routes do; these
tests check that the lane really serves them, that what it does not serve still reaches
FastAPI, and that its errors and metrics are the app's."""

from __future__ import annotations

from typing import Any

import fastapi.routing
import pytest
from fastapi.telemetry._asgi import ExceptionTelemetryMiddleware

from signoff.api.routes import tasks as tasks_routes
from signoff.bootstrap import prepare_database
from tests.support import LiveServer, escalation, run


def test_hot_routes_are_served_by_the_lane(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    producer = server.new_client("producer", "bot-lane")
    reviewer = server.new_client("reviewer", "rev-lane")

    async def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("FastAPI resolved a dependency")

    monkeypatch.setattr(fastapi.routing, "solve_dependencies", broken)
    body = escalation()
    created = producer.escalate(body)
    assert created.status_code == 201, created.text
    task_id = created.json()["id"]
    assert created.headers["location"] == f"/tasks/{task_id}"
    assert producer.escalate(body).headers["idempotent-replayed"] == "true"
    lease = reviewer.post(f"/tasks/{task_id}/claim")
    assert lease.status_code == 200, lease.text
    token = lease.json()["lease_token"]
    headers = {"X-Lease-Token": token}
    assert reviewer.post(f"/tasks/{task_id}/lease/renew", headers=headers).status_code == 200
    assert reviewer.post(f"/tasks/{task_id}/release", headers=headers).status_code == 200
    nxt = reviewer.post("/tasks/claim-next")
    assert nxt.status_code == 200, nxt.text
    resolved = reviewer.post(
        f"/tasks/{task_id}/resolve",
        headers={"X-Lease-Token": nxt.json()["lease_token"]},
        json={"decision": "APPROVED", "notes": "fine"},
    )
    assert resolved.status_code == 200, resolved.text
    assert resolved.json()["status"] == "RESOLVED"
    # Anything else is FastAPI's (and fails here, which proves the lane served the above).
    assert reviewer.get(f"/tasks/{task_id}").status_code == 500
    producer.close()
    reviewer.close()


def test_the_lanes_errors_are_the_apps_problems(server: LiveServer) -> None:
    with server.client(None) as anonymous:
        missing = anonymous.post("/tasks/escalate", json=escalation())
    assert missing.status_code == 401
    assert missing.headers["content-type"] == "application/problem+json"
    assert missing.headers["www-authenticate"] == 'Bearer realm="signoff"'
    assert missing.json()["error_code"] == "ERR_UNAUTHENTICATED"
    with server.new_client("reviewer", "rev-errors") as reviewer:
        unknown = reviewer.post("/tasks/00000000-0000-4000-8000-000000000000/claim")
        assert (unknown.status_code, unknown.json()["error_code"]) == (404, "ERR_TASK_NOT_FOUND")
        bad_id = reviewer.post(
            "/tasks/not-a-uuid/resolve",
            headers={"X-Lease-Token": "t"},
            json={"decision": "APPROVED"},
        )
        assert bad_id.status_code in (404, 422), bad_id.text
        no_token = reviewer.post(
            "/tasks/00000000-0000-4000-8000-000000000000/resolve", json={"decision": "APPROVED"}
        )
        assert no_token.json()["error_code"] == "ERR_LEASE_TOKEN_REQUIRED"
        broken = reviewer.post(
            "/tasks/claim-next", content=b"{", headers={"Content-Type": "application/json"}
        )
        assert broken.status_code == 400, broken.text
        # Another method on a lane path is FastAPI's: 405 with the documented methods.
        wrong = reviewer.put("/tasks/claim-next")
        assert wrong.status_code == 405
        assert wrong.headers["allow"] == "POST"


def test_the_latency_metric_labels_lane_routes_by_template(server: LiveServer) -> None:
    with server.new_client("producer", "bot-metrics") as producer:
        assert producer.escalate(escalation()).status_code == 201
    with server.new_client("reviewer", "rev-metrics") as reviewer:
        reviewer.post("/tasks/00000000-0000-4000-8000-000000000000/claim")
    with server.admin() as admin:
        metrics = admin.get("/metrics").text
    assert 'route="/tasks/escalate"' in metrics
    assert 'route="/tasks/{task_id}/claim"' in metrics
    assert "00000000-0000-4000-8000-000000000000" not in metrics


def _count_calls(monkeypatch: pytest.MonkeyPatch, cls: type) -> list[str]:
    """Record the path of every request that passes through ``cls`` (an ASGI middleware)."""
    seen: list[str] = []
    original = cls.__call__

    async def counting(self: Any, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            seen.append(scope["path"])
        await original(self, scope, receive, send)

    monkeypatch.setattr(cls, "__call__", counting)
    return seen


def test_hot_requests_skip_fastapis_stack_unless_its_telemetry_is_on(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _count_calls(monkeypatch, ExceptionTelemetryMiddleware)
    with server.new_client("producer", "bot-stack") as producer:
        seen.clear()
        assert producer.escalate(escalation()).status_code == 201
        assert seen == []  # the hot request took the short way
        assert producer.get("/healthz").status_code == 200
        assert seen == ["/healthz"]  # everything else takes FastAPI's whole stack
        # With FastAPI's native telemetry on, hot requests take the whole stack too (and
        # meet the lane inside it).
        monkeypatch.setattr(server.app, "_telemetry_seen", True)
        seen.clear()
        assert producer.escalate(escalation()).status_code == 201
        assert seen == ["/tasks/escalate"]


def _escalations_measured(server: LiveServer) -> float:
    with server.admin() as admin:
        metrics = admin.get("/metrics").text
    name = 'signoff_http_request_duration_seconds_count{method="POST",route="/tasks/escalate"}'
    lines = [line for line in metrics.splitlines() if line.startswith(name + " ")]
    return float(lines[0].split()[-1]) if lines else 0.0


def test_an_unexpected_error_in_a_hot_route_is_a_500_and_the_server_goes_on(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    measured = _escalations_measured(server)  # the registry is the process's, shared
    with server.new_client("producer", "bot-bug") as producer:
        monkeypatch.setattr(tasks_routes, "escalate", broken)
        failed = producer.escalate(escalation())
        assert failed.status_code == 500
        assert "a bug" not in failed.text  # no internals in the answer
        monkeypatch.undo()
    # The server closed that connection (as for any unhandled error); a new one is served.
    with server.new_client("producer", "bot-bug") as producer:
        assert producer.escalate(escalation()).status_code == 201
    # The failed request was measured like any other, under its route.
    assert _escalations_measured(server) == measured + 2


def test_a_middleware_the_short_way_does_not_know_sees_hot_requests_too(
    make_settings,
    clock,  # type: ignore[no-untyped-def]
) -> None:
    seen: list[str] = []

    class Watching:
        def __init__(self, app: Any) -> None:
            self.app = app

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                seen.append(scope["path"])
            await self.app(scope, receive, send)

    settings = make_settings()
    run(prepare_database(settings, clock=clock))
    server = LiveServer(settings, clock)
    server.app.add_middleware(Watching)
    server.start()
    try:
        with server.new_client("producer", "bot-watched") as producer:
            seen.clear()
            assert producer.escalate(escalation()).status_code == 201
        assert seen == ["/tasks/escalate"]
    finally:
        server.stop()
