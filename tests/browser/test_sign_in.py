"""Signing in to the console in a real browser, against ``signoff serve`` (both engines)."""

from __future__ import annotations

import re
import uuid
from urllib.parse import urlencode, urlsplit

from playwright.sync_api import Page, expect

from tests.browser.support import PASSWORD, ConsoleServer, login


def test_pages_without_a_session_send_to_the_login_page(
    page: Page, console_server: ConsoleServer
) -> None:
    page.goto("/console/account?view=mine")
    expect(page).to_have_url(re.compile(r"/console/login\?next=/console/account%3Fview%3Dmine"))
    expect(page.get_by_role("heading", name="Sign in to Signoff")).to_be_visible()
    expect(page.get_by_role("button", name="Sign in with SSO")).to_have_count(0)


def test_local_sign_in_with_the_keyboard_lands_where_it_was_going(
    page: Page, console_server: ConsoleServer
) -> None:
    user = console_server.create_user("reviewer", email=f"{uuid.uuid4().hex[:8]}@example.com")
    page.goto("/console/login?next=/console/account")
    # Keyboard only: the username field has focus; Tab to the password; Enter signs in.
    expect(page.get_by_label("Username", exact=True)).to_be_focused()
    page.keyboard.type(user.email or "")
    page.keyboard.press("Tab")
    expect(page.get_by_label("Password", exact=True)).to_be_focused()
    page.keyboard.type(user.password)
    page.keyboard.press("Enter")
    page.wait_for_url(lambda url: urlsplit(url).path == "/console/account")
    expect(page.get_by_role("heading", name="Your account")).to_be_visible()
    cookies = {c["name"]: c for c in page.context.cookies()}
    session = cookies["signoff_session"]
    assert session["httpOnly"]
    assert session["sameSite"] == "Lax"


def test_a_wrong_password_says_what_happened_and_what_to_do(
    page: Page, console_server: ConsoleServer
) -> None:
    user = console_server.create_user("reviewer")
    page.goto("/console/login")
    page.get_by_label("Username", exact=True).fill(user.principal_id)
    page.get_by_label("Password", exact=True).fill("not the password")
    page.get_by_role("button", name="Sign in", exact=True).click()
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("The username or password is not right")
    expect(alert).to_contain_text("try again")
    expect(page.get_by_label("Username", exact=True)).to_have_value(user.principal_id)
    expect(page.get_by_label("Password", exact=True)).to_be_focused()
    login(page, user)  # the right password still works
    assert "/console/login" not in page.url


def test_sign_in_pauses_after_five_failures(page: Page, console_server: ConsoleServer) -> None:
    user = console_server.create_user("reviewer")
    page.goto("/console/login")
    for _ in range(5):
        page.get_by_label("Username", exact=True).fill(user.principal_id)
        page.get_by_label("Password", exact=True).fill("guess " + uuid.uuid4().hex)
        with page.expect_response("**/console/login") as answer:
            page.get_by_role("button", name="Sign in", exact=True).click()
        assert answer.value.status == 401
    page.get_by_label("Username", exact=True).fill(user.principal_id)
    page.get_by_label("Password", exact=True).fill(user.password)
    with page.expect_response("**/console/login") as answer:
        page.get_by_role("button", name="Sign in", exact=True).click()
    assert answer.value.status == 429
    assert int(answer.value.headers["retry-after"]) > 0
    expect(page.get_by_role("alert")).to_contain_text(re.compile(r"try again in \d+ minutes"))


def test_a_disabled_users_session_ends_at_once(open_page, console_server: ConsoleServer) -> None:
    user = console_server.create_user("reviewer")
    page: Page = open_page(console_server)
    login(page, user)
    page.goto("/console/login")
    assert "/console/login" not in page.url  # signed in: sent on
    with console_server.admin() as admin:
        assert admin.post(f"/users/{user.principal_id}/disable").status_code == 200
    page.goto("/console/account")
    expect(page).to_have_url(re.compile(r"/console/login\?next=/console/account"))
    page.get_by_label("Username", exact=True).fill(user.principal_id)
    page.get_by_label("Password", exact=True).fill(PASSWORD)
    page.get_by_role("button", name="Sign in", exact=True).click()
    expect(page.get_by_role("alert")).to_contain_text("disabled")


def test_a_new_user_sets_a_password_from_the_link(
    page: Page, console_server: ConsoleServer
) -> None:
    principal_id = f"new-{uuid.uuid4().hex[:8]}"
    with console_server.admin() as admin:
        created = admin.post("/users", json={"principal_id": principal_id, "role": "supervisor"})
    link = created.json()["set_password_link"]
    page.goto(link)
    expect(page.get_by_role("heading", name="Set your password")).to_be_visible()
    page.get_by_label("New password").fill("short")
    page.get_by_label("Repeat the password").fill("short")
    page.get_by_role("button", name="Set password").click()
    expect(page.get_by_role("alert")).to_contain_text("at least 10 characters")
    for weak, why in (
        ("          ", "too easy to guess"),
        ("password1234", "very common password"),
        (f"{principal_id}-signoff", "your user name"),
    ):
        page.get_by_label("New password").fill(weak)
        page.get_by_label("Repeat the password").fill(weak)
        page.get_by_role("button", name="Set password").click()
        expect(page.get_by_role("alert")).to_contain_text(why)
    page.get_by_label("New password").fill(PASSWORD)
    page.get_by_label("Repeat the password").fill(PASSWORD)
    page.get_by_role("button", name="Set password").click()
    expect(page.get_by_role("status")).to_contain_text("Your password is set")
    login(page, principal_id, PASSWORD)


def test_the_inbox_shows_no_text_a_link_brings(page: Page, console_server: ConsoleServer) -> None:
    """A crafted link cannot make the console say something: notices are fixed texts
    chosen by name, with numbers and error codes only."""
    user = console_server.create_user("reviewer")
    login(page, user)
    bait = "Your session is compromised. Call +1-555-0100 now"
    page.goto("/console?" + urlencode({"message": bait}))
    expect(page.get_by_role("heading", level=1)).to_be_visible()
    assert "555-0100" not in page.content()
    page.goto(
        "/console?"
        + urlencode({"notice": "bulk", "action": "claim", "done": "1", "of": "2", "failed": bait})
    )
    expect(page.get_by_text("claim: 1 of 2 done.")).to_be_visible()
    assert "555-0100" not in page.content()
    page.goto("/console?" + urlencode({"notice": "refused", "code": "ERR_CLAIM_LIMIT"}))
    expect(page.get_by_role("status").first).to_contain_text("live leases")
