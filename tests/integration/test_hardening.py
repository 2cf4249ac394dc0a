"""Regression tests for findings of the fault and attack campaigns (each failed before
its fix), on both engines."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest

from tests.integration.test_approvals import SUBJECT, decide, new_subject_task, revise
from tests.support import LiveServer, escalation, live_server

TEST_ENCRYPTION_KEY = "I-CYXlLA4nYXSgfTkkDkZ5bGeV5WZsbGvUWTF9Yc0r8="


@pytest.fixture
def hooks(make_settings, clock) -> Iterator[LiveServer]:  # type: ignore[no-untyped-def]
    settings = make_settings(
        run_workers=False, webhook_allow_private_networks=True, webhook_retry_jitter=0
    )
    with live_server(settings, clock) as live:
        yield live


def test_a_resume_link_form_larger_than_the_limit_is_refused_while_streaming(
    make_settings, clock
) -> None:  # type: ignore[no-untyped-def]
    with live_server(make_settings(max_body_bytes=64 * 1024), clock) as server:
        client = server.client(None)

        def trickle() -> Iterator[bytes]:  # no Content-Length: only streaming can stop it
            yield b"decision=APPROVED&csrf="
            for _ in range(32):
                yield b"x" * 65536

        response = client.post(
            "/r/some-token",
            content=trickle(),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert response.status_code == 413
        declared = client.post(
            "/r/some-token",
            content=b"decision=APPROVED&csrf=" + b"x" * (128 * 1024),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert declared.status_code == 413


@pytest.mark.parametrize(
    "deadline", ["2026-12-01T00:00:00z", "2026-12-01t00:00:00Z", "2026-12-01t00:00:00+01:00"]
)
@pytest.mark.parametrize("name", ["deadline", "review_deadline"])
def test_lower_case_rfc3339_deadlines_are_accepted(server: LiveServer, name, deadline) -> None:
    with server.new_client("producer") as producer:
        response = producer.escalate(escalation(**{name: deadline}))
    assert response.status_code == 201, response.text


@pytest.mark.parametrize(
    "url", ["http://[::1", "http://[1.2.3.4]/", "http://[::1]x/", "http://[zz]/"]
)
def test_malformed_webhook_urls_are_a_422_naming_the_field(server: LiveServer, url) -> None:
    with server.admin() as admin:
        response = admin.post("/webhook-endpoints", json={"url": url})
        assert response.status_code == 422, response.text
        assert response.json()["errors"][0]["field"] == "url"
        # The connection survives: the next request on it is answered.
        assert admin.get("/webhook-endpoints").status_code == 200


def test_a_reopening_conflict_never_names_another_producers_task(server: LiveServer) -> None:
    with (
        server.new_client("producer", "agent-a") as mine,
        server.new_client("producer", "agent-b") as theirs,
        server.new_client("reviewer", "editor-9") as editor,
    ):
        task = new_subject_task(mine, entity_id="doc-shared")
        decide(editor, task["id"])
        other = theirs.escalate(escalation("doc-shared"))
        assert other.status_code == 201, other.text
        response = revise(mine, task["id"], 1, copy.deepcopy(SUBJECT) | {"body": "changed"})
        assert (response.status_code, response.json()["error_code"]) == (409, "ERR_TASK_CONFLICT")
        assert other.json()["id"] not in response.text
        assert response.json().get("task_id") is None


def test_json_nested_5000_deep_is_a_validation_error(server: LiveServer) -> None:
    deep = "[" * 5000 + "]" * 5000
    with server.new_client("producer") as producer:
        response = producer.post(
            "/tasks/escalate", content=deep, headers={"Content-Type": "application/json"}
        )
    assert response.status_code == 422, response.text
    assert response.json()["error_code"] == "ERR_VALIDATION"


@pytest.mark.parametrize("body", [b"\x0b", b"\x0c", b" \x0b\n", b"\t", b" \t\r\n"])
def test_an_optional_body_of_whitespace_is_refused(server: LiveServer, body) -> None:  # type: ignore[no-untyped-def]
    """Found by schemathesis: a claim whose body was a vertical tab (and later a tab) was
    taken as an empty body and granted. Whitespace alone is not a JSON text: only a body
    with no bytes at all is an absent one."""
    created = server.new_client("producer").escalate(escalation())
    task_id = created.json()["id"]
    with server.new_client("reviewer") as reviewer:
        response = reviewer.post(
            f"/tasks/{task_id}/claim", content=body, headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 400, response.text
        assert response.json()["error_code"] == "ERR_MALFORMED_JSON"
        absent = reviewer.post(
            f"/tasks/{task_id}/claim", content=b"", headers={"Content-Type": "application/json"}
        )
        assert absent.status_code == 200, absent.text  # no bytes at all: no body


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_delivery_errors_show_non_admins_only_a_category(hooks: LiveServer) -> None:
    from tests.integration.test_webhooks import dispatch, register

    register(hooks, f"http://127.0.0.1:{_closed_port()}/hook")
    with hooks.new_client("producer", "bot-13") as producer, hooks.admin() as admin:
        task_id = producer.escalate(escalation()).json()["id"]
        assert dispatch(hooks) == 1
        (seen,) = producer.get(f"/tasks/{task_id}/deliveries").json()["items"]
        (full,) = admin.get(f"/tasks/{task_id}/deliveries").json()["items"]
    assert seen["last_error"] is None
    assert seen["last_error_category"] in {"refused", "connection"}
    assert seen["attempts"][0]["error"] is None
    assert seen["attempts"][0]["error_category"] == seen["last_error_category"]
    assert "127.0.0.1" not in str(seen)
    assert full["last_error"]  # admins keep the transport detail
    assert full["last_error_category"] == seen["last_error_category"]


def test_error_categories() -> None:
    from signoff.domain.webhooks import error_category

    assert error_category(200, None) is None
    assert error_category(500, None) == "http_status"
    assert error_category(None, "timeout") == "timeout"
    assert error_category(None, "webhook URL refused: host 'x' does not resolve") == "dns"
    assert error_category(None, "webhook URL refused: x resolves to 10.0.0.1") == "ssrf_blocked"
    assert error_category(None, "ConnectError: [SSL: CERTIFICATE_VERIFY_FAILED]") == "tls"
    assert error_category(None, "ConnectError: [Errno 111] Connection refused") == "refused"


def test_resume_tokens_never_reach_the_log_of_a_real_server(database_url, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os
    import signal
    import subprocess
    import sys
    import time

    import httpx

    port = _closed_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    env |= {
        "SIGNOFF_DATABASE_URL": database_url,
        "SIGNOFF_ENCRYPTION_KEYS": TEST_ENCRYPTION_KEY,
        "SIGNOFF_ACCESS_LOG": "true",  # off by default; when on, it must redact
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "signoff", "serve", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    token = "tok" + "S3cr3tT0k3nV4lu3" * 2
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "serve did not start"
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        assert httpx.get(f"{base}/r/{token}").status_code == 404
        assert httpx.get(f"{base}/r/{token}?x=1", headers={"Accept": "application/json"})
        form = httpx.post(f"{base}/r/{token}", data={"decision": "APPROVED", "csrf": "x"})
        assert form.status_code == 404
        assert httpx.post(f"{base}/r/{token}", json={"decision": "REJECTED"}).status_code == 404
    finally:
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=30)
    output = stdout + stderr
    assert token not in output
    assert '"path": "/r/[redacted]"' in output or "path=/r/[redacted]" in output, output[-2000:]
