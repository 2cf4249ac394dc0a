"""Regression tests for findings of the fault and attack campaigns (each failed before
its fix), on both engines."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest

from tests.integration.test_approvals import SUBJECT, decide, new_subject_task, revise
from tests.support import LiveServer, escalation


def test_a_resume_link_form_larger_than_the_limit_is_refused_while_streaming(
    make_settings, clock
) -> None:  # type: ignore[no-untyped-def]
    from tests.support import live_server

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
