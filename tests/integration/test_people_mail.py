"""The people page mails a new person's set-password link when e-mail is configured (a
real SMTP server), and shows it on screen when the mail cannot go."""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Iterator
from contextlib import closing
from typing import Any

import httpx
import pytest

from signoff.domain.clock import ManualClock
from tests.mailbox import Mailbox
from tests.support import LiveServer, live_server

PASSWORD = "correct horse battery staple"


@pytest.fixture
def mailbox() -> Iterator[Mailbox]:
    with Mailbox() as box:
        yield box


def _csrf(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, html
    return match.group(1)


def _signed_in_admin(server: LiveServer) -> httpx.Client:
    with server.admin() as api:
        made = api.post(
            "/users", json={"principal_id": "ada", "role": "admin", "password": PASSWORD}
        )
    assert made.status_code == 201, made.text
    browser = httpx.Client(base_url=server.base_url, timeout=30)
    login = browser.get("/console/login")
    signed = browser.post(
        "/console/login",
        data={"csrf": _csrf(login.text), "username": "ada", "password": PASSWORD},
    )
    assert signed.status_code == 303, signed.text
    return browser


def _add(browser: httpx.Client, **fields: str) -> httpx.Response:
    page = browser.get("/console/people")
    assert page.status_code == 200, page.text
    return browser.post("/console/people", data={"csrf": _csrf(page.text), **fields})


def test_the_link_is_mailed_to_the_new_person(
    make_settings: Callable[..., Any], clock: ManualClock, mailbox: Mailbox
) -> None:
    settings = make_settings(
        smtp_host="127.0.0.1", smtp_port=mailbox.port, public_base_url="http://signoff.test"
    )
    with live_server(settings, clock) as server, closing(_signed_in_admin(server)) as browser:
        added = _add(browser, principal_id="cyd", email="cyd@example.org", role="reviewer")
        assert added.status_code == 200, added.text
        assert "The set-password link was sent by e-mail to cyd@example.org" in added.text
        assert "/console/set-password/" not in added.text  # not shown: it went to cyd alone
        (message,) = mailbox.to("cyd@example.org")
        assert message["Subject"] == "Set your Signoff password"
        (link,) = re.findall(
            r"http://signoff\.test/console/set-password/\S+", Mailbox.body(message)
        )
        local = link.replace("http://signoff.test", server.base_url)
        page = httpx.get(local)
        assert page.status_code == 200
        assert "You are setting the password of <strong>cyd</strong>" in page.text

        # Without an address there is nobody to mail: the link is shown once.
        shown = _add(browser, principal_id="dee", role="reviewer")
        assert "Set-password link for dee" in shown.text
        assert f"{settings.public_base_url}/console/set-password/" in shown.text
        assert mailbox.to("dee@example.org") == []


def test_a_mail_that_cannot_go_leaves_the_link_on_screen(
    make_settings: Callable[..., Any], clock: ManualClock
) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        closed = int(sock.getsockname()[1])
    settings = make_settings(smtp_host="127.0.0.1", smtp_port=closed)
    with live_server(settings, clock) as server, closing(_signed_in_admin(server)) as browser:
        added = _add(browser, principal_id="eve", email="eve@example.org", role="reviewer")
        assert added.status_code == 200, added.text
        assert "The e-mail to eve@example.org was not sent" in added.text
        assert "Give them the link below yourself" in added.text
        assert "/console/set-password/" in added.text
