"""Console sign-in over HTTP: users, sessions, CSRF, throttling, disabling."""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

import httpx

from signoff.domain.clock import ManualClock
from signoff.domain.states import Role
from signoff.services.context import ServiceContext
from tests.support import LiveServer, live_server

PASSWORD = "correct horse battery"


def _create_user(server: LiveServer, principal_id: str = "ann", **extra: object) -> dict:
    body = {
        "principal_id": principal_id,
        "role": "reviewer",
        "email": f"{principal_id}@example.com",
    }
    body.update(extra)
    with server.admin() as admin:
        response = admin.post("/users", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def _csrf(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, html
    return match.group(1)


def _browser(server: LiveServer) -> httpx.Client:
    return httpx.Client(base_url=server.base_url, follow_redirects=False, timeout=30)


def _sign_in(
    browser: httpx.Client, username: str, password: str, next_path: str = ""
) -> httpx.Response:
    page = browser.get("/console/login" + (f"?next={next_path}" if next_path else ""))
    assert page.status_code == 200
    form = {"username": username, "password": password, "csrf": _csrf(page.text)}
    if next_path:
        form["next"] = next_path
    return browser.post("/console/login", data=form)


def test_a_user_sets_a_password_through_the_link_and_signs_in(server: LiveServer) -> None:
    created = _create_user(server)
    assert created["has_password"] is False
    link = created["set_password_link"]
    path = link[link.index("/console/") :]
    with _browser(server) as browser:
        page = browser.get(path)
        assert page.status_code == 200
        assert "ann" in page.text
        response = browser.post(
            path, data={"csrf": _csrf(page.text), "password": PASSWORD, "password_again": PASSWORD}
        )
        assert response.status_code == 303
        assert response.headers["location"] == "/console/login?notice=password_set"
        again = browser.get(path)
        assert again.status_code == 404
        assert "used already" in again.text
        signed_in = _sign_in(browser, "ann@example.com", PASSWORD, "/console/tasks/x")
        assert signed_in.status_code == 303
        assert signed_in.headers["location"] == "/console/tasks/x"
        cookie = signed_in.headers["set-cookie"]
        assert "HttpOnly" in cookie
        assert "samesite=lax" in cookie.lower()


def test_wrong_password_then_throttled(server: LiveServer) -> None:
    _create_user(server, password=PASSWORD)
    with _browser(server) as browser:
        for _ in range(5):
            response = _sign_in(browser, "ann", "wrong password!")
            assert response.status_code == 401
            assert "username or password is not right" in response.text
        throttled = _sign_in(browser, "ann", PASSWORD)
        assert throttled.status_code == 429
        assert int(throttled.headers["retry-after"]) > 0
        assert "try again in" in throttled.text
        server.clock.advance(16 * 60)
        assert _sign_in(browser, "ann", PASSWORD).status_code == 303


def test_concurrent_guesses_are_counted_before_any_is_checked(server: LiveServer) -> None:
    """Many guesses at once: no more than the limit get their password checked, so a
    right password at the end of the burst is refused like any other."""
    _create_user(server, password=PASSWORD)
    limit = server.settings.login_max_failures

    async def burst() -> list[int]:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=120) as browser:
            csrf = _csrf((await browser.get("/console/login")).text)

            async def guess(password: str) -> int:
                form = {"username": "ann", "password": password, "csrf": csrf}
                return (await browser.post("/console/login", data=form)).status_code

            wrong = [guess(f"wrong guess number {i}") for i in range(40)]
            return list(await asyncio.gather(*wrong, guess(PASSWORD)))

    statuses = asyncio.run(burst())
    assert set(statuses) <= {401, 303, 429}
    checked = [status for status in statuses if status != 429]
    assert len(checked) <= limit, statuses
    with _browser(server) as browser:
        after = _sign_in(browser, "ann", PASSWORD)
        # Unless the right one was among the first few checked, the pause holds.
        assert after.status_code == (303 if 303 in statuses else 429)


def _sign_in_from(
    browser: httpx.Client, address: str, username: str, password: str
) -> httpx.Response:
    forwarded = {"X-Forwarded-For": address}
    page = browser.get("/console/login", headers=forwarded)
    form = {"username": username, "password": password, "csrf": _csrf(page.text)}
    return browser.post("/console/login", data=form, headers=forwarded)


def test_strangers_cannot_lock_an_account_out(make_settings, clock: ManualClock) -> None:  # type: ignore[no-untyped-def]
    """Wrong passwords pause sign-in of that account from that address only: its owner,
    elsewhere, still signs in. An address failing across many accounts is paused too."""
    settings = make_settings(forwarded_allow_ips="127.0.0.1", login_max_failures_per_address=8)
    with live_server(settings, clock) as server:
        _create_user(server, password=PASSWORD)
        with _browser(server) as attacker:
            for _ in range(5):
                assert (
                    _sign_in_from(attacker, "203.0.113.9", "ann", "a wrong guess").status_code
                    == 401
                )
            paused = _sign_in_from(attacker, "203.0.113.9", "ann", PASSWORD)
            assert paused.status_code == 429
            assert "this account from your address" in paused.text
        with _browser(server) as owner:
            assert _sign_in_from(owner, "198.51.100.7", "ann", PASSWORD).status_code == 303
        with _browser(server) as sprayer:
            for index in range(8):
                answer = _sign_in_from(sprayer, "192.0.2.1", f"user-{index}", "a wrong guess")
                assert answer.status_code == 401
            refused = _sign_in_from(sprayer, "192.0.2.1", "ann", PASSWORD)
            assert refused.status_code == 429
            assert "your address" in refused.text
        with _browser(server) as owner:
            assert _sign_in_from(owner, "198.51.100.7", "ann", PASSWORD).status_code == 303


def test_a_next_path_in_any_script_signs_in(server: LiveServer) -> None:
    """``next`` ends in a Location header: characters beyond Latin-1 are escaped, never
    a 500."""
    _create_user(server, password=PASSWORD)
    target = "/console/tasks?q=\u65e5\u672c\u20ac"
    escaped = "/console/tasks?q=%E6%97%A5%E6%9C%AC%E2%82%AC"
    with _browser(server) as browser:
        signed_in = _sign_in(browser, "ann", PASSWORD, target)
        assert signed_in.status_code == 303
        assert signed_in.headers["location"] == escaped
        again = browser.get("/console/login", params={"next": target})
        assert (again.status_code, again.headers["location"]) == (303, escaped)


class _HttpsBrowser:
    """A browser behind a TLS-terminating proxy (``X-Forwarded-Proto: https``) that
    keeps cookies itself: an http client would not send back ``Secure`` ones."""

    def __init__(self, server: LiveServer) -> None:
        self.client = _browser(server)
        self.cookies: dict[str, str] = {}
        self.set_cookies: list[str] = []

    def request(self, method: str, path: str, **kwargs: object) -> httpx.Response:
        headers = {"X-Forwarded-Proto": "https"}
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        response = self.client.request(method, path, headers=headers, **kwargs)  # type: ignore[arg-type]
        for line in response.headers.get_list("set-cookie"):
            self.set_cookies.append(line)
            name, _, rest = line.partition("=")
            value = rest.split(";", 1)[0].strip('"')
            if "max-age=0" in line.lower() or not value:
                self.cookies.pop(name, None)
            else:
                self.cookies[name] = value
        return response

    def cookie_line(self, name: str) -> str:
        return [line for line in self.set_cookies if line.startswith(f"{name}=")][-1]


def test_cookies_are_secure_over_https_and_sign_out_clears_the_lease_tokens(
    make_settings, clock: ManualClock
) -> None:  # type: ignore[no-untyped-def]
    from tests.support import escalation

    settings = make_settings(forwarded_allow_ips="127.0.0.1")
    with live_server(settings, clock) as server:
        _create_user(server, password=PASSWORD)
        with server.new_client("producer") as producer:
            task = producer.escalate(escalation())
        assert task.status_code == 201, task.text
        browser = _HttpsBrowser(server)
        page = browser.request("GET", "/console/login")
        form = {"username": "ann", "password": PASSWORD, "csrf": _csrf(page.text)}
        assert browser.request("POST", "/console/login", data=form).status_code == 303
        assert "secure" in browser.cookie_line("signoff_session").lower()
        csrf = _csrf(browser.request("GET", "/console/account").text)
        claimed = browser.request(
            "POST", f"/console/tasks/{task.json()['id']}/claim", data={"csrf": csrf}
        )
        assert claimed.status_code < 400, claimed.text
        assert "signoff_leases" in browser.cookies
        assert "secure" in browser.cookie_line("signoff_leases").lower()
        out = browser.request("POST", "/console/logout", data={"csrf": csrf})
        assert out.status_code == 303
        assert "signoff_leases" not in browser.cookies
        assert "signoff_session" not in browser.cookies


def test_pages_need_a_session_and_htmx_gets_401(server: LiveServer) -> None:
    with _browser(server) as browser:
        response = browser.get("/console/logout")  # GET is not a route; POST needs a session
        response = browser.post("/console/logout", data={})
        assert response.status_code == 303
        assert response.headers["location"] == "/console/login?next=/console/logout"
        fragment = browser.post("/console/logout", headers={"HX-Request": "true"})
        assert fragment.status_code == 401
        assert fragment.headers["hx-redirect"].startswith("/console/login")


def test_disabling_ends_the_session_at_once_and_logout_needs_csrf(server: LiveServer) -> None:
    _create_user(server, password=PASSWORD)
    with _browser(server) as browser:
        assert _sign_in(browser, "ann", PASSWORD).status_code == 303
        # Signed in: the login page sends on to the inbox.
        assert browser.get("/console/login").headers["location"] == "/console"
        assert browser.post("/console/logout", data={"csrf": "forged"}).status_code == 403
        with server.admin() as admin:
            response = admin.patch("/users/ann", json={"disabled": True})
        assert response.status_code == 200
        assert response.json()["disabled"] is True
        assert browser.get("/console/login").status_code == 200  # no longer signed in
        assert _sign_in(browser, "ann", PASSWORD).status_code == 403


def test_idle_and_absolute_lifetimes(server: LiveServer) -> None:
    clock: ManualClock = server.clock
    _create_user(server, password=PASSWORD)
    with _browser(server) as browser:
        assert _sign_in(browser, "ann", PASSWORD).status_code == 303
        for _ in range(24):  # active every 29 minutes: the idle limit never bites...
            clock.advance(29 * 60)
            assert browser.get("/console/login").status_code == 303
        clock.advance(29 * 60)  # ... but 12 hours after sign-in it is over
        assert browser.get("/console/login").status_code == 200
        assert _sign_in(browser, "ann", PASSWORD).status_code == 303
        clock.advance(31 * 60)
        assert browser.get("/console/login").status_code == 200


def test_an_admin_cannot_give_a_guessable_password(server: LiveServer) -> None:
    with server.admin() as admin:
        for password in ("aaaaaaaaaaaa", "          ", "ann-signoff-2024"):
            body = {"principal_id": "ann", "role": "reviewer", "password": password}
            refused = admin.post("/users", json=body)
            assert refused.status_code == 422, refused.text
            problem = refused.json()
            assert problem["error_code"] == "ERR_VALIDATION"
            assert [e["field"] for e in problem["errors"]] == ["password"]
    assert server.count("users") == 0


def test_users_api_is_for_admins(server: LiveServer) -> None:
    _create_user(server)
    with server.new_client("reviewer") as reviewer:
        assert reviewer.get("/users").status_code == 403
    with server.admin() as admin:
        listed = admin.get("/users").json()["items"]
        assert [u["principal_id"] for u in listed] == ["ann"]
        assert "password_hash" not in listed[0]
        assert (
            admin.post("/users", json={"principal_id": "ann", "role": "reviewer"}).status_code
            == 409
        )
        assert admin.post("/users/nobody/disable").status_code == 404


def test_a_console_users_approval_passes_the_execution_gate_until_disabled(
    server: LiveServer,
) -> None:
    """A user is the same principal an API key is: their approval authorises execution,
    and disabling them withdraws that authority exactly as revoking a key does."""
    import asyncio

    from signoff.domain.states import Decision
    from signoff.services import sessions
    from signoff.services import tasks as task_service
    from signoff.services.context import ServiceContext
    from signoff.store.runtime.database import Database, create_engine
    from tests.integration.test_approvals import execute, new_subject_task, refusal

    _create_user(server, "editor-ann", password=PASSWORD)
    with server.new_client("producer", "agent-7") as producer:
        first = new_subject_task(producer)
        second = new_subject_task(producer)

        async def approve(task_id: str) -> str:
            database = Database(create_engine(server.settings))
            try:
                ctx = ServiceContext(
                    database=database, settings=server.settings, clock=server.clock
                )
                session = await sessions.sign_in(ctx, "editor-ann", PASSWORD, address=None)
                principal = session.user.principal
                grant = await task_service.claim(ctx, principal, task_id)
                task = await task_service.resolve(
                    ctx,
                    principal,
                    task_id,
                    grant.lease_token,
                    decision=Decision.APPROVED,
                    notes=None,
                    resolution_payload=None,
                    revision=grant.task.current_revision,
                    digest=grant.task.digest,
                    door="console",
                )
                return str(task.digest)
            finally:
                await database.dispose()

        digest = asyncio.run(approve(first["id"]))
        assert execute(producer, first["id"], 1, digest).status_code == 200
        digest = asyncio.run(approve(second["id"]))
        with server.admin() as admin:
            assert admin.post("/users/editor-ann/disable").status_code == 200
        outcome = execute(producer, second["id"], 1, digest)
        assert refusal(outcome) == "APPROVER_NOT_AUTHORISED"


def test_htmx_requests_get_problems_not_pages(server: LiveServer) -> None:
    _create_user(server, password=PASSWORD)
    with _browser(server) as browser:
        assert _sign_in(browser, "ann", PASSWORD).status_code == 303
        missing = browser.post("/console/logout", headers={"HX-Request": "true"})
        assert missing.status_code == 403
        assert missing.json()["error_code"] == "ERR_CSRF"
        page = browser.get("/console/account")
        token = _csrf(page.text)
        done = browser.post(
            "/console/logout", headers={"HX-Request": "true", "X-CSRF-Token": token}
        )
        assert done.status_code == 303
        gone = browser.get("/console/account", headers={"HX-Request": "true"})
        assert gone.status_code == 401
        assert gone.headers["hx-redirect"] == "/console/login?next=/console/account"


def test_switches_take_true_or_false_not_numbers(server) -> None:  # type: ignore[no-untyped-def]
    with server.admin() as admin:
        made = admin.post("/users", json={"principal_id": "nina", "role": "reviewer"})
        assert made.status_code == 201, made.text
        refused = admin.patch("/users/nina", json={"disabled": 0})
        assert (refused.status_code, refused.json()["error_code"]) == (422, "ERR_VALIDATION")
        listed = admin.get("/users").json()["items"]
        assert [u["disabled"] for u in listed if u["principal_id"] == "nina"] == [False]
        # The body is refused before any endpoint is looked up.
        flipped = admin.patch(f"/webhook-endpoints/{uuid.uuid4()}", json={"enabled": 1})
        assert (flipped.status_code, flipped.json()["error_code"]) == (422, "ERR_VALIDATION")


def test_first_sign_ins_of_one_identity_at_once_make_one_account(database_url: str) -> None:
    """Two tabs finishing single sign-on at the same moment: both are signed in, to the
    one account the first of them created (never a 500 from the unique constraint)."""
    from signoff.services import sessions
    from signoff.settings import Settings
    from signoff.store.runtime.database import open_database
    from signoff.store.runtime.migrate import upgrade

    identity = sessions.Identity(
        issuer="https://idp.example", subject="subject-7", principal_id="maria",
        email="maria@example.com", email_verified=True, groups=["editorial"],
        role=Role.REVIEWER,
    )  # fmt: skip

    async def together() -> list[Any]:
        settings = Settings(database_url=database_url, encryption_keys=None)
        database = open_database(settings)
        try:
            await upgrade(database.engine)
            context = ServiceContext(database=database, settings=settings, clock=ManualClock())
            return await asyncio.gather(
                *(sessions.sign_in_oidc(context, identity) for _ in range(6)),
                return_exceptions=True,
            )
        finally:
            await database.dispose()

    signed_in = asyncio.run(together())
    assert [type(s).__name__ for s in signed_in] == ["SignedInSession"] * 6, signed_in
    assert {s.user.principal_id for s in signed_in} == {"maria"}
    assert len({s.user.id for s in signed_in}) == 1


def test_a_new_users_name_is_stored_in_one_form_and_may_not_look_like_anothers(
    server: LiveServer,
) -> None:
    """NFKC when stored; a name equal to another's once case-folded is refused, so two
    people never look alike in vote lists (a key's principal counts too)."""
    server.new_client("reviewer", "rob").close()
    with server.admin() as admin:
        made = admin.post(
            "/users", json={"principal_id": "ｏｌｇａ", "role": "reviewer", "password": PASSWORD}
        )
        assert made.status_code == 201, made.text
        assert made.json()["principal_id"] == "olga"
        for name in ("OLGA", "Ｏｌｇａ", "ROB"):
            body = {"principal_id": name, "role": "reviewer", "password": PASSWORD}
            refused = admin.post("/users", json=body)
            assert refused.status_code == 409, refused.text
            assert refused.json()["error_code"] == "ERR_USER_EXISTS"
        for name in ("OLGA", "ｒｏｂ-x", "Rob"):  # a key's principal may not look alike either
            body = {"role": "reviewer", "principal_id": name}
            refused = admin.post("/api-keys", json=body)
            if name == "ｒｏｂ-x":  # no one is named rob-x: stored plain
                assert refused.status_code == 201, refused.text
                assert refused.json()["principal_id"] == "rob-x"
                continue
            assert refused.status_code == 422, refused.text
            assert [e["field"] for e in refused.json()["errors"]] == ["principal_id"]
        # The same name as a key's principal is that principal's account, as before.
        assert (
            admin.post(
                "/users", json={"principal_id": "rob", "role": "reviewer", "password": PASSWORD}
            ).status_code
            == 201
        )
    assert server.count("users") == 2
