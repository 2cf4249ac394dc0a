"""Sign-in against a real ``signoff serve`` process: what its access log keeps, and which
client address and scheme it believes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.conftest import TEST_ENCRYPTION_KEY
from tests.integration.test_console_auth import PASSWORD, _csrf
from tests.processes import Server
from tests.support import ADMIN_KEY


@contextmanager
def _serve(database_url: str, tmp_path: Path, **env: str) -> Iterator[Server]:
    environment = {
        "SIGNOFF_DATABASE_URL": database_url,
        "SIGNOFF_ENCRYPTION_KEYS": TEST_ENCRYPTION_KEY,
        "SIGNOFF_BOOTSTRAP_ADMIN_KEY": ADMIN_KEY,
        **env,
    }
    with Server(environment, tmp_path / "serve.log") as server:
        yield server


def _admin(server: Server) -> httpx.Client:
    return httpx.Client(
        base_url=server.base_url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=30
    )


def test_the_access_log_keeps_no_credential_of_a_url(database_url: str, tmp_path: Path) -> None:
    """Set-password tokens and the identity provider's code and state are written as
    ``[redacted]``; the rest of the line stays."""
    code, state = "c0de" + "SsoAuthorizationCode" * 2, "st4te" + "RoundTripState" * 2
    with _serve(
        database_url,
        tmp_path,
        SIGNOFF_ACCESS_LOG="true",
        SIGNOFF_OIDC_ISSUER="http://127.0.0.1:9",  # never reached: the state is refused first
        SIGNOFF_OIDC_CLIENT_ID="signoff-console",
    ) as server:
        with _admin(server) as admin:
            made = admin.post("/users", json={"principal_id": "ann", "role": "reviewer"})
        assert made.status_code == 201, made.text
        link = made.json()["set_password_link"]
        token = link.rsplit("/", 1)[1]
        with httpx.Client(base_url=server.base_url, timeout=30) as browser:
            page = browser.get(f"/console/set-password/{token}")
            assert page.status_code == 200
            form = {"csrf": _csrf(page.text), "password": PASSWORD, "password_again": PASSWORD}
            done = browser.post(f"/console/set-password/{token}", data=form)
            assert done.status_code == 303
            callback = browser.get(
                "/console/login/sso/callback", params={"code": code, "state": state}
            )
            assert callback.status_code == 400
        server.terminate()
    text = server.log.read_text(errors="replace")
    assert token not in text
    assert code not in text
    assert state not in text
    paths = [e.get("path") for e in server.events() if e.get("event") == "http.request"]
    assert "/console/set-password/[redacted]" in paths, paths
    assert "/console/login/sso/callback?code=[redacted]&state=[redacted]" in paths, paths


def _guess(server: Server, forwarded_for: str, username: str, password: str) -> int:
    with httpx.Client(base_url=server.base_url, timeout=30) as browser:
        headers = {"X-Forwarded-For": forwarded_for}
        page = browser.get("/console/login", headers=headers)
        form = {"username": username, "password": password, "csrf": _csrf(page.text)}
        return browser.post("/console/login", data=form, headers=headers).status_code


def test_forwarded_addresses_are_believed_only_from_listed_proxies(
    database_url: str, tmp_path: Path
) -> None:
    """By default ``X-Forwarded-For`` is ignored, even from loopback: a client cannot
    pick a new address per guess. From a listed proxy it names the client."""
    limits = {"SIGNOFF_LOGIN_MAX_FAILURES_PER_ADDRESS": "3"}
    for listed, expected in (("", 429), ("127.0.0.1", 303)):
        env = {**limits, "SIGNOFF_FORWARDED_ALLOW_IPS": listed}
        with _serve(database_url, tmp_path, **env) as server:
            with _admin(server) as admin:
                body = {"principal_id": "ann", "role": "reviewer", "password": PASSWORD}
                made = admin.post("/users", json=body)
                assert made.status_code == 201, made.text
            for index in range(3):
                status = _guess(server, f"203.0.113.{index + 1}", f"user-{index}", "wrong one")
                assert status == 401
            assert _guess(server, "198.51.100.7", "ann", PASSWORD) == expected
        _reset(database_url)


def _reset(database_url: str) -> None:
    from tests.conftest import reset_postgres

    if database_url.startswith("sqlite"):
        Path(database_url.removeprefix("sqlite:///")).unlink()
    else:
        reset_postgres(database_url)
