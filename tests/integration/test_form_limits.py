"""Every console form is read through the bounded body reader: a body larger than
``SIGNOFF_MAX_BODY_BYTES`` is refused (413) before the form is parsed, whether it declares
its length or streams in chunks, and nothing is written."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.integration.test_console_auth import PASSWORD, _browser, _create_user, _csrf, _sign_in
from tests.support import LiveServer, escalation, live_server

LIMIT = 16 * 1024
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.fixture
def small(make_settings, clock) -> Iterator[LiveServer]:  # type: ignore[no-untyped-def]
    with live_server(make_settings(max_body_bytes=LIMIT, run_workers=False), clock) as live:
        yield live


def _chunked(head: bytes) -> Iterator[bytes]:
    """No Content-Length: only a reader that stops while streaming can refuse it."""
    yield head
    for _ in range(64):
        yield b"x" * 4096


def _declared(head: bytes) -> bytes:
    return head + b"x" * (LIMIT * 4)


def _refused(response: httpx.Response) -> None:
    assert response.status_code == 413, response.text
    assert "too large" in response.text


@pytest.mark.parametrize("shape", [_chunked, _declared])
def test_an_oversized_sign_in_form_is_refused_and_signs_no_one_in(small: LiveServer, shape) -> None:  # type: ignore[no-untyped-def]
    _create_user(small, password=PASSWORD)
    with _browser(small) as browser:
        page = browser.get("/console/login")
        head = f"username=ann&password={PASSWORD}&csrf={_csrf(page.text)}&filler=".encode()
        _refused(browser.post("/console/login", content=shape(head), headers=FORM))
        fragment = browser.post(
            "/console/login", content=shape(head), headers=FORM | {"HX-Request": "true"}
        )
        assert fragment.status_code == 413
        assert fragment.json()["error_code"] == "ERR_PAYLOAD_TOO_LARGE"
    assert small.count("user_sessions") == 0
    assert small.count("login_attempts") == 0  # not even counted as an attempt


@pytest.mark.parametrize("shape", [_chunked, _declared])
def test_an_oversized_set_password_form_sets_nothing(small: LiveServer, shape) -> None:  # type: ignore[no-untyped-def]
    link = _create_user(small)["set_password_link"]
    path = link[link.index("/console/") :]
    with _browser(small) as browser:
        page = browser.get(path)
        head = (
            f"csrf={_csrf(page.text)}&password={PASSWORD}&password_again={PASSWORD}&filler="
        ).encode()
        _refused(browser.post(path, content=shape(head), headers=FORM))
        assert browser.get(path).status_code == 200  # the link is still unused
    assert small.rows("users", principal_id="ann")[0]["password_hash"] is None


@pytest.mark.parametrize("shape", [_chunked, _declared])
def test_an_oversized_console_action_changes_nothing(small: LiveServer, shape) -> None:  # type: ignore[no-untyped-def]
    _create_user(small, password=PASSWORD)
    with small.new_client("producer") as producer:
        task = producer.escalate(escalation()).json()
    with _browser(small) as browser:
        assert _sign_in(browser, "ann", PASSWORD).status_code == 303
        page = browser.get(f"/console/tasks/{task['id']}")
        assert page.status_code == 200
        csrf = _csrf(page.text)
        head = f"csrf={csrf}&filler=".encode()
        _refused(
            browser.post(f"/console/tasks/{task['id']}/claim", content=shape(head), headers=FORM)
        )
        # The token in a header: the CSRF check reads no body, the action's form reader does.
        _refused(
            browser.post(
                f"/console/tasks/{task['id']}/claim",
                content=shape(b"filler="),
                headers=FORM | {"X-CSRF-Token": csrf},
            )
        )
        _refused(browser.post("/console/start", content=shape(head), headers=FORM))
        assert small.count("task_events", task_id=uuid.UUID(task["id"]), action="claim") == 0
        # Within the limit the same form works.
        claimed = browser.post(f"/console/tasks/{task['id']}/claim", data={"csrf": csrf})
        assert claimed.status_code == 200
    assert small.count("task_events", task_id=uuid.UUID(task["id"]), action="claim") == 1
