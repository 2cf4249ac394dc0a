"""Getting in and out of the console, and admins managing people, in a real browser
against a real ``signoff serve`` (SQLite and PostgreSQL)."""

from __future__ import annotations

import re
import uuid
from typing import Any

import httpx
import pytest

from tests.browser.console.conftest import PASSWORD, Served, axe_violations

expect = pytest.importorskip("playwright.sync_api").expect


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _tab_to(page: Any, name: str, *, limit: int = 30) -> None:
    """Press Tab until the focused element is the one named ``name`` (keyboard only)."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        focused = page.evaluate("() => (document.activeElement.textContent || '').trim()")
        if focused == name:
            return
    raise AssertionError(f"{name!r} is not reachable with Tab")


def _no_codes(page: Any) -> None:
    text = page.locator("main").inner_text()
    assert "ERR_" not in text, text
    assert "error_code" not in text, text


def _new_page(served: Served, chromium: Any, width: int = 1280) -> Any:
    context = chromium.new_context(
        base_url=served.base_url, viewport={"width": width, "height": 900}
    )
    context.set_default_timeout(15000)
    return context.new_page()


def _api_user(served: Served, principal_id: str) -> dict[str, Any]:
    with served.api() as api:
        items = api.get("/users").json()["items"]
    return next(dict(item) for item in items if item["principal_id"] == principal_id)


def _sign_in(page: Any, principal_id: str, password: str = PASSWORD) -> None:
    page.goto("/console/login")
    page.get_by_label("Username").fill(principal_id)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()


def test_signing_out_from_the_header_by_keyboard_ends_the_session(
    served: Served, signed_in: Any, chromium: Any
) -> None:
    ann = signed_in(_name("ann"))
    cookies = ann.context.cookies()
    _tab_to(ann, "Sign out")
    ann.keyboard.press("Enter")
    expect(ann).to_have_url(re.compile(r"/console/login\?notice=signed_out"))
    expect(ann.get_by_role("status")).to_have_text("You are signed out.")
    ann.goto("/console")
    expect(ann).to_have_url(re.compile(r"/console/login(\?next=.*)?$"))
    # The session ended on the server: its old cookie no longer signs anyone in.
    other = _new_page(served, chromium)
    other.context.add_cookies(cookies)
    other.goto("/console")
    expect(other).to_have_url(re.compile(r"/console/login(\?next=.*)?$"))


def test_the_header_links_to_the_account_page(signed_in: Any) -> None:
    bob_id = _name("bob")
    bob = signed_in(bob_id, groups=["payments"])
    bob.get_by_role("link", name="Your account").click()
    expect(bob).to_have_url(re.compile(r"/console/account$"))
    expect(bob.get_by_role("heading", name="Your account")).to_be_visible()
    expect(bob.locator("main")).to_contain_text(bob_id)
    expect(bob.locator("main")).to_contain_text("payments")
    expect(bob.get_by_role("link", name="People")).to_have_count(0)  # not an admin


def test_an_admin_adds_a_person_who_sets_a_password_and_signs_in(
    served: Served, signed_in: Any, chromium: Any
) -> None:
    admin = signed_in(_name("ada"), "admin")
    admin.get_by_role("link", name="People").click()
    expect(admin.get_by_role("heading", name="People", exact=True)).to_be_visible()
    new_id = _name("cyd")

    # Refusals name the field and say what to do; nothing is added meanwhile.
    admin.get_by_label("Principal id").fill("two words")
    admin.get_by_label("E-mail").fill("not-an-address")
    admin.get_by_role("button", name="Add the person").click()
    alert = admin.get_by_role("alert")
    expect(alert).to_contain_text("The person was not added")
    expect(alert).to_contain_text("The principal id must be 1 to 255 characters without spaces")
    expect(alert).to_contain_text("Write it as name@example.com")
    expect(admin.get_by_label("E-mail")).to_have_attribute("aria-invalid", "true")
    _no_codes(admin)
    existing = served.user(_name("dup"))
    admin.get_by_label("Principal id").fill(existing)
    admin.get_by_label("E-mail").fill("")
    admin.get_by_role("button", name="Add the person").click()
    expect(admin.get_by_role("alert")).to_contain_text("Someone already has this principal id")
    _no_codes(admin)

    # Added through the keyboard: fields, the role from the list, the button.
    admin.get_by_label("Principal id").fill(new_id)
    admin.get_by_label("E-mail").fill(f"{new_id}@example.com")
    admin.get_by_label("Role").select_option("supervisor")
    admin.get_by_label("Groups").fill("payments, aml")
    admin.get_by_label("Groups").press("Enter")
    expect(admin.get_by_role("heading", name=f"{new_id} is added")).to_be_visible()
    field = admin.get_by_label(f"Set-password link for {new_id}")
    link = field.input_value()
    # The link names the port this server listens on (no public URL is configured).
    assert link.startswith(f"{served.base_url}/console/set-password/"), link
    admin.get_by_role("button", name="Copy the link").click()
    expect(admin.locator("#copy-status")).to_contain_text("link")
    admin.get_by_role("link", name="Back to the people").click()
    row = admin.get_by_role("row", name=re.compile(new_id))
    expect(row).to_contain_text("supervisor")
    expect(row).to_contain_text("payments, aml")
    expect(row).to_contain_text("Enabled")
    expect(row).to_contain_text("a password (not set yet)")

    newcomer = _new_page(served, chromium)
    newcomer.goto(link)
    newcomer.get_by_label("New password").fill(PASSWORD)
    newcomer.get_by_label("Repeat the password").fill(PASSWORD)
    newcomer.get_by_role("button", name="Set password").click()
    expect(newcomer.get_by_role("status")).to_contain_text("Your password is set")
    _sign_in(newcomer, new_id)
    expect(newcomer).to_have_url(re.compile(r"/console$"))
    expect(newcomer.locator("header")).to_contain_text(f"Signed in as {new_id} (supervisor)")


def test_disabling_a_person_ends_their_session_after_a_confirmation(
    served: Served, signed_in: Any
) -> None:
    admin = signed_in(_name("ada"), "admin")
    eve_id = _name("eve")
    eve = signed_in(eve_id)
    admin.goto("/console/people")
    admin.get_by_role("link", name=eve_id).click()
    admin.get_by_role("button", name=f"Disable {eve_id}").click()
    expect(admin.get_by_role("heading", name=f"Disable {eve_id}?")).to_be_visible()
    admin.get_by_role("button", name=f"Yes, disable {eve_id}").focus()
    admin.keyboard.press("Enter")
    expect(admin.get_by_role("status")).to_contain_text("Every session of this person has ended")
    expect(admin.locator("main")).to_contain_text("Disabled")

    eve.goto("/console")
    expect(eve).to_have_url(re.compile(r"/console/login(\?next=.*)?$"))
    _sign_in(eve, eve_id)
    expect(eve.get_by_role("alert")).to_contain_text("disabled")

    admin.get_by_role("button", name=f"Enable {eve_id}").click()
    expect(admin.get_by_role("status")).to_contain_text("can sign in again")
    _sign_in(eve, eve_id)
    expect(eve).to_have_url(re.compile(r"/console$"))


def test_cancelling_a_disable_changes_nothing(served: Served, signed_in: Any) -> None:
    admin = signed_in(_name("ada"), "admin")
    kim = served.user(_name("kim"))
    admin.goto(f"/console/people/edit?principal_id={kim}")
    admin.get_by_role("button", name=f"Disable {kim}").click()
    admin.get_by_role("link", name="Cancel: change nothing").click()
    expect(admin.locator("main")).to_contain_text("Enabled")
    assert _api_user(served, kim)["disabled"] is False


def test_changing_groups_changes_what_a_reviewer_sees(served: Served, signed_in: Any) -> None:
    producer = served.key("producer", _name("bot"))
    entity = _name("pay")
    served.escalate(producer, entity_id=entity, assigned_group="payments")
    admin = signed_in(_name("ada"), "admin")
    gus_id = _name("gus")
    gus = signed_in(gus_id)
    gus.goto("/console")
    expect(gus.locator("main")).not_to_contain_text(entity)

    admin.goto("/console/people")
    admin.get_by_role("link", name=gus_id).click()
    admin.get_by_role("textbox", name="Groups").fill("payments")
    admin.get_by_role("button", name="Save the role and groups").click()
    expect(admin.get_by_role("status")).to_contain_text("The role and groups are saved")
    gus.goto("/console")
    expect(gus.locator("main")).to_contain_text(entity)

    # Taking the group away asks first, and says what it takes.
    admin.get_by_role("textbox", name="Groups").fill("")
    admin.get_by_role("button", name="Save the role and groups").click()
    expect(admin.get_by_role("heading", name=f"Take access away from {gus_id}?")).to_be_visible()
    expect(admin.locator("main")).to_contain_text("The group payments is taken away")
    admin.get_by_role("button", name="Yes, change the access").click()
    expect(admin.get_by_role("status")).to_contain_text("The role and groups are saved")
    gus.goto("/console")
    expect(gus.locator("main")).not_to_contain_text(entity)


def test_a_lesser_role_is_confirmed_first(served: Served, signed_in: Any) -> None:
    admin_id = _name("ada")
    admin = signed_in(admin_id, "admin")
    admin.goto(f"/console/people/edit?principal_id={admin_id}")
    admin.get_by_role("combobox", name="Role").select_option("supervisor")
    admin.get_by_role("button", name="Save the role and groups").click()
    expect(admin.locator("main")).to_contain_text("This is your own account")
    admin.get_by_role("link", name="Cancel: change nothing").click()
    expect(admin.locator("main")).to_contain_text("admin")
    assert _api_user(served, admin_id)["role"] == "admin"
    sue = served.user(_name("sue"), "supervisor")
    admin.goto(f"/console/people/edit?principal_id={sue}")
    admin.get_by_role("combobox", name="Role").select_option("reviewer")
    admin.get_by_role("button", name="Save the role and groups").click()
    expect(admin.locator("main")).to_contain_text("The role supervisor becomes reviewer")
    assert _api_user(served, sue)["role"] == "supervisor"
    admin.get_by_role("button", name="Yes, change the access").click()
    expect(admin.get_by_role("status")).to_contain_text("saved")
    assert _api_user(served, sue)["role"] == "reviewer"


def test_a_non_admin_is_told_in_words_that_people_need_an_admin(signed_in: Any) -> None:
    for role in ("reviewer", "supervisor"):
        page = signed_in(_name(role[:3]), role)
        response = page.goto("/console/people")
        assert response is not None
        assert response.status == 403
        expect(
            page.get_by_role("heading", name="Only administrators manage people")
        ).to_be_visible()
        expect(page.locator("main")).to_contain_text(f"a {role}")
        expect(page.get_by_role("link", name="People")).to_have_count(0)
        _no_codes(page)


def test_the_root_and_unknown_console_addresses_are_pages_for_browsers(
    served: Served, signed_in: Any, chromium: Any
) -> None:
    page = _new_page(served, chromium)
    response = page.goto("/")
    assert response is not None
    assert response.status == 200
    page.get_by_role("link", name="Open the review console").click()
    expect(page).to_have_url(re.compile(r"/console/login"))
    response = page.goto("/console/nope")
    assert response is not None
    assert response.status == 404
    expect(page.get_by_role("heading", name="This page does not exist")).to_be_visible()
    page.get_by_role("link", name="Back to the inbox").click()
    expect(page).to_have_url(re.compile(r"/console/login"))

    signed = signed_in(_name("ivy"))
    signed.goto("/console/nothing/here")
    expect(signed.get_by_role("heading", name="This page does not exist")).to_be_visible()
    expect(signed.get_by_role("button", name="Sign out")).to_be_visible()

    # Programs keep JSON.
    for accept in ("application/json", None):
        headers = {"Accept": accept} if accept else {}
        answer = httpx.get(f"{served.base_url}/", headers=headers)
        assert answer.status_code == 404
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["error_code"] == "ERR_NOT_FOUND"
    fetched = httpx.get(f"{served.base_url}/console/nope", headers={"Accept": "application/json"})
    assert fetched.headers["content-type"] == "application/problem+json"
    api = httpx.get(f"{served.base_url}/nope", headers={"Accept": "text/html"})
    assert api.headers["content-type"] == "application/problem+json"


@pytest.mark.parametrize("width", [1280, 375])
def test_the_people_pages_have_no_serious_accessibility_issue(
    served: Served, signed_in: Any, chromium: Any, width: int
) -> None:
    served.user(_name("ron"), groups=["payments"])
    admin = signed_in(_name("ada"), "admin", width=width)
    pages = {}
    admin.goto("/console/people")
    admin.get_by_label("E-mail").fill("wrong")
    admin.get_by_role("button", name="Add the person").click()
    expect(admin.get_by_role("alert")).to_be_visible()
    pages["people with errors"] = axe_violations(admin)
    new_id = _name("lee")
    admin.get_by_label("Principal id").fill(new_id)
    admin.get_by_label("E-mail").fill("")
    admin.get_by_role("button", name="Add the person").click()
    expect(admin.get_by_role("heading", name=f"{new_id} is added")).to_be_visible()
    pages["link"] = axe_violations(admin)
    admin.get_by_role("link", name=f"See {new_id}").click()
    pages["person"] = axe_violations(admin)
    admin.get_by_role("button", name=f"Disable {new_id}").click()
    pages["confirm"] = axe_violations(admin)
    admin.goto("/console/nope")
    pages["not found"] = axe_violations(admin)
    visitor = _new_page(served, chromium, width)
    visitor.goto("/")
    pages["landing"] = axe_violations(visitor)
    visitor.goto("/console/nope")
    pages["not found, signed out"] = axe_violations(visitor)
    reviewer = signed_in(_name("rey"), width=width)
    reviewer.goto("/console/people")
    pages["forbidden"] = axe_violations(reviewer)
    assert {name: found for name, found in pages.items() if found} == {}
