"""The resume-link page, the whole world of a reviewer who decides from an e-mail: a real
link, sent over real SMTP (tests/mailbox.py), opened in Chromium."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.browser.console.conftest import Served, axe_violations
from tests.mailbox import Mailbox
from tests.support import example_escalation

expect = pytest.importorskip("playwright.sync_api").expect

PUBLIC = "http://signoff.example"
SUBJECT: dict[str, Any] = {
    "title": "Quarterly results",
    "body": "Revenue grew 12% year on year, driven by the new payments product.",
}
SUMMARY = {
    "recommendation": "REJECT",
    "rationale": "The figure is not in the wire.",
    "generated_by": "summariser-v2",
}


@pytest.fixture
def mailbox() -> Iterator[Mailbox]:
    with Mailbox() as box:
        yield box


@pytest.fixture
def served_env(mailbox: Mailbox) -> dict[str, str]:
    return {
        "SIGNOFF_SMTP_HOST": "127.0.0.1",
        "SIGNOFF_SMTP_PORT": str(mailbox.port),
        "SIGNOFF_PUBLIC_BASE_URL": PUBLIC,
    }


def _reviewer(served: Served, principal_id: str) -> httpx.Client:
    body = {
        "role": "reviewer",
        "principal_id": principal_id,
        "groups": ["payments"],
        "email": f"{principal_id}@example.org",
    }
    with served.api() as admin:
        created = admin.post("/api-keys", json=body)
    assert created.status_code == 201, created.text
    return served.api(created.json()["key"])


def _link_for(mailbox: Mailbox, served: Served, address: str) -> str:
    """The decision link in the first message to ``address`` (the server's notifier sends
    it within a second or two)."""
    deadline = time.monotonic() + 60
    while not mailbox.to(address):
        assert time.monotonic() < deadline, "no message arrived"
        time.sleep(0.2)
    body = Mailbox.body(mailbox.to(address)[0])
    (link,) = re.findall(re.escape(PUBLIC) + r"/r/[A-Za-z0-9_-]+", body)
    return link.replace(PUBLIC, served.base_url)


def test_the_link_page_shows_changes_attempts_and_nested_values_and_keeps_notes_on_refusal(
    served: Served, chromium: Any, mailbox: Mailbox
) -> None:
    producer = served.key("producer", "bot")
    alice, bob = _reviewer(served, "alice"), _reviewer(served, "bob")
    bundle = example_escalation()["diagnostic_bundle"]
    bundle["input_snapshot"] = {
        "amount": "12500.00",
        "counterparty": {"name": "Acme Trading", "accounts": ["DE89 3704", "FR76 3000"]},
    }
    task_id = served.escalate(
        producer,
        subject=SUBJECT,
        summary=SUMMARY,
        assigned_group="payments",
        diagnostic_bundle=bundle,
    )
    link = _link_for(mailbox, served, "alice@example.org")
    # Alice read revision 1 (through the API); revision 2 arrives before she opens the link.
    assert alice.get(f"/tasks/{task_id}/revisions/1").status_code == 200
    with served.api(producer) as api:
        revised = api.put(
            f"/tasks/{task_id}/subject",
            headers={"If-Match": '"1"'},
            json={"subject": SUBJECT | {"body": SUBJECT["body"].replace("12%", "14%")}},
        )
    assert revised.status_code == 200, revised.text

    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(link)
    changes = page.locator(".changes")
    expect(changes).to_contain_text("Changed since you last looked (revision 1)")
    body_row = changes.get_by_role("row", name=re.compile("^Body"))
    expect(body_row.locator("del")).to_have_text("removed: 12")
    expect(body_row.locator("ins")).to_have_text("added: 14")
    tried = page.get_by_role("region", name="What the producer already tried")
    expect(tried).to_contain_text("retry_payment_gateway")
    expect(tried).to_contain_text("timeout after 3 attempts")
    expect(tried.locator("time").first).to_have_text("29 Nov 2026, 08:15 UTC")
    counterparty = tried.locator("ul.nested ul.nested").first
    expect(counterparty).to_contain_text("Name: Acme Trading")
    expect(counterparty).to_contain_text("FR76 3000")
    expect(page.locator("body")).not_to_contain_text("{'")  # no Python dict
    ai = page.get_by_role("region", name="AI recommendation — a person decides")
    expect(ai).to_contain_text("Written for revision 1; the content has changed since")
    assert axe_violations(page) == []
    page.set_viewport_size({"width": 375, "height": 740})
    assert axe_violations(page) == []
    # Any two revisions compare, by keyboard, on the page itself.
    page.get_by_label("From revision").select_option("1")
    page.get_by_label("to revision").select_option("2")
    page.get_by_role("button", name="Compare").press("Enter")
    comparison = page.locator("#comparison")
    expect(comparison.locator("caption")).to_have_text("Changes from revision 1 to revision 2")
    expect(comparison.get_by_role("row", name=re.compile("^Body"))).to_be_visible()
    assert axe_violations(page) == []
    page.goto(link)

    # Bob claims it meanwhile: Alice's click is refused with advice that fits, notes kept.
    assert bob.post(f"/tasks/{task_id}/claim").status_code == 200
    page.get_by_label("Notes").fill("checked against the wire")
    with page.expect_response(re.compile(r"/r/")) as answer:
        page.get_by_role("button", name="Approve").click()
    assert answer.value.status == 409
    expect(page.get_by_role("status")).to_have_text(
        "bob is reviewing this task now. Try again later, or ask bob whether they will decide it."
    )
    expect(page.locator("body")).not_to_contain_text("whole link")
    expect(page.locator("body")).not_to_contain_text("ERR_")
    expect(page.get_by_label("Notes")).to_have_value("checked against the wire")
    context.close()
    alice.close()
    bob.close()
