"""Single sign-on through a real OpenID Connect provider (``oidc-provider-mock``, run on a
free port), in a real browser, against ``signoff serve`` on both engines."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from oidc_provider_mock import run_server_in_thread
from playwright.sync_api import Page, expect

from tests.browser.support import ConsoleServer, accessibility_violations, serve_console
from tests.conftest import ENGINES

pytestmark = pytest.mark.filterwarnings("ignore:get_jwt_config:DeprecationWarning")

ROLE_MAP = {"payments-reviewers": "reviewer", "ops-leads": "supervisor"}


@pytest.fixture(scope="module")
def identity_provider() -> Iterator[str]:
    with run_server_in_thread() as server:
        yield f"http://localhost:{server.server_port}"


@pytest.fixture(scope="module", params=ENGINES)
def sso_server(
    request: pytest.FixtureRequest,
    identity_provider: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ConsoleServer]:
    engine = str(request.param)
    with serve_console(
        engine,
        tmp_path_factory.mktemp(f"sso-{engine}"),
        SIGNOFF_OIDC_ISSUER=identity_provider,
        SIGNOFF_OIDC_CLIENT_ID="signoff-console",
        SIGNOFF_OIDC_CLIENT_SECRET="client-secret-for-tests",
        SIGNOFF_OIDC_ROLE_MAP=json.dumps(ROLE_MAP),
    ) as server:
        yield server


def _person(identity_provider: str, groups: list[str]) -> str:
    """A person known to the provider, with these groups; returns their ``sub``."""
    sub = f"sub-{uuid.uuid4().hex[:8]}"
    claims = {
        "preferred_username": f"olga-{sub[-8:]}",
        "email": f"olga-{sub[-8:]}@example.com",
        "groups": groups,
    }
    response = httpx.put(f"{identity_provider}/users/{sub}", json=claims, timeout=10)
    assert response.status_code == 204, response.text
    return sub


def _sign_in_with_sso(page: Page, sub: str) -> None:
    page.goto("/console/login?next=/console/account")
    assert accessibility_violations(page) == []  # the login page with its SSO button
    page.get_by_role("button", name="Sign in with SSO").click()
    page.get_by_placeholder("sub").fill(sub)  # the provider's own sign-in form
    page.get_by_role("button", name="Authorize").click()


def test_sso_signs_in_with_the_role_the_groups_map_to(
    open_page: Callable[..., Page], sso_server: ConsoleServer, identity_provider: str
) -> None:
    sub = _person(identity_provider, ["ops-leads", "payments-reviewers", "unrelated"])
    page = open_page(sso_server)
    _sign_in_with_sso(page, sub)
    page.wait_for_url(lambda url: urlsplit(url).path == "/console/account")
    facts = page.locator("dl")
    expect(facts).to_contain_text(f"olga-{sub[-8:]}")
    expect(facts).to_contain_text("supervisor")  # the highest mapped role
    expect(facts).to_contain_text("ops-leads, payments-reviewers, unrelated")
    expect(facts).to_contain_text("single sign-on")
    with sso_server.admin() as admin:
        users = {u["principal_id"]: u for u in admin.get("/users").json()["items"]}
    assert users[f"olga-{sub[-8:]}"]["source"] == "oidc"
    # The same principal works against the API's rules: disabling ends the session.
    with sso_server.admin() as admin:
        assert admin.post(f"/users/olga-{sub[-8:]}/disable").status_code == 200
    page.goto("/console/account")
    assert urlsplit(page.url).path == "/console/login"
    _sign_in_with_sso(page, sub)
    expect(page.get_by_role("alert")).to_contain_text("disabled")


def test_sso_refuses_someone_in_no_mapped_group_and_says_why(
    open_page: Callable[..., Page], sso_server: ConsoleServer, identity_provider: str
) -> None:
    sub = _person(identity_provider, ["marketing"])
    page = open_page(sso_server)
    _sign_in_with_sso(page, sub)
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("in none of the groups that may use Signoff")
    expect(alert).to_contain_text("ops-leads, payments-reviewers")
    expect(page.get_by_role("link", name="Back to the sign-in page")).to_be_visible()
    assert accessibility_violations(page) == []
    page.goto("/console/account")
    assert urlsplit(page.url).path == "/console/login"  # no session was opened


def _named_person(identity_provider: str, username: str, **claims: object) -> str:
    """A person known to the provider by ``username``, in a mapped group."""
    sub = f"sub-{uuid.uuid4().hex[:8]}"
    body = {"preferred_username": username, "groups": ["payments-reviewers"], **claims}
    response = httpx.put(f"{identity_provider}/users/{sub}", json=body, timeout=10)
    assert response.status_code == 204, response.text
    return sub


def _users(server: ConsoleServer) -> dict[str, dict]:  # type: ignore[type-arg]
    with server.admin() as admin:
        return {u["principal_id"]: u for u in admin.get("/users").json()["items"]}


def test_sso_accounts_are_keyed_on_the_subject_not_the_name(
    open_page: Callable[..., Page], sso_server: ConsoleServer, identity_provider: str
) -> None:
    """A second person at the provider who picks the same username does not get the
    first one's account; e-mail addresses count only when the provider verified them."""
    name = f"pat-{uuid.uuid4().hex[:8]}"
    first = _named_person(identity_provider, name, email=f"{name}@example.com", email_verified=True)
    page = open_page(sso_server)
    _sign_in_with_sso(page, first)
    page.wait_for_url(lambda url: urlsplit(url).path == "/console/account")
    assert _users(sso_server)[name]["email"] == f"{name}@example.com"

    second = _named_person(
        identity_provider, name, email=f"mallory-{name}@example.com", email_verified=False
    )
    intruder = open_page(sso_server)
    _sign_in_with_sso(intruder, second)
    expect(intruder.get_by_role("alert")).to_contain_text(f"The name {name} belongs to another")
    intruder.goto("/console/account")
    assert urlsplit(intruder.url).path == "/console/login"  # no session was opened
    assert _users(sso_server)[name]["email"] == f"{name}@example.com"  # unchanged

    unverified = _named_person(
        identity_provider, f"quinn-{name}", email=f"quinn-{name}@example.com"
    )
    page = open_page(sso_server)
    _sign_in_with_sso(page, unverified)
    page.wait_for_url(lambda url: urlsplit(url).path == "/console/account")
    assert _users(sso_server)[f"quinn-{name}"]["email"] is None


def test_sso_never_takes_over_an_api_keys_principal_unless_an_admin_links_it(
    open_page: Callable[..., Page], sso_server: ConsoleServer, identity_provider: str
) -> None:
    bot = f"bot-{uuid.uuid4().hex[:8]}"
    sso_server.api_key("reviewer", bot)
    sub = _named_person(identity_provider, bot)
    page = open_page(sso_server)
    _sign_in_with_sso(page, sub)
    expect(page.get_by_role("alert")).to_contain_text(f"The name {bot} belongs to another")
    assert bot not in _users(sso_server)

    linked = subprocess.run(
        [
            *(sys.executable, "-m", "signoff", "link-sso", "--principal-id", bot),
            *("--subject", sub, "--issuer", identity_provider),
            *("--database-url", sso_server.database_url),
        ],
        env=sso_server.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert linked.returncode == 0, linked.stderr
    page = open_page(sso_server)
    _sign_in_with_sso(page, sub)
    page.wait_for_url(lambda url: urlsplit(url).path == "/console/account")
    expect(page.locator("dl")).to_contain_text(bot)


def test_the_providers_error_text_is_never_shown(
    open_page: Callable[..., Page], sso_server: ConsoleServer
) -> None:
    page = open_page(sso_server)
    page.goto(
        "/console/login/sso/callback?error=access_denied"
        "&error_description=Your+account+is+suspended.+Call+%2B1-555-0100+now"
    )
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("did not sign you in (error code access_denied)")
    assert "555-0100" not in page.content()
    page.goto("/console/login/sso/callback?error=Call+%2B1-555-0100+to+unlock")
    expect(page.get_by_role("alert")).to_contain_text("did not sign you in.")
    assert "555-0100" not in page.content()


def test_sso_refuses_a_name_that_looks_like_anothers_and_stores_names_in_one_form(
    open_page: Callable[..., Page], sso_server: ConsoleServer, identity_provider: str
) -> None:
    """Full-width letters and another case are one name (NFKC, case-folded): a second
    person cannot sit beside ``pat`` in a vote list as ``ＰＡＴ``."""
    tag = uuid.uuid4().hex[:6]
    first = _named_person(identity_provider, f"ｐａｔ-{tag}")  # full-width letters
    page = open_page(sso_server)
    _sign_in_with_sso(page, first)
    page.wait_for_url(lambda url: urlsplit(url).path == "/console/account")
    assert f"pat-{tag}" in _users(sso_server)  # stored in NFKC: plain letters

    for look_alike in (f"PAT-{tag}", f"ＰＡＴ-{tag}"):
        intruder = open_page(sso_server)
        _sign_in_with_sso(intruder, _named_person(identity_provider, look_alike))
        expect(intruder.get_by_role("alert")).to_contain_text(f"looks like pat-{tag}")
        intruder.goto("/console/account")
        assert urlsplit(intruder.url).path == "/console/login"  # no session was opened
    assert [n for n in _users(sso_server) if n.casefold() == f"pat-{tag}"] == [f"pat-{tag}"]
