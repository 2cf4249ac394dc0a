"""The e-mail link page shows what is being decided and takes notes and revision requests."""

from __future__ import annotations

import re

import httpx

from tests.integration.test_waiting import (  # noqa: F401  (fixtures)
    links_in,
    local,
    mailbox,
    person,
    send_mail,
    waiting,
)
from tests.mailbox import Mailbox
from tests.support import LiveServer, escalation

SUBJECT = {"title": "Pay ACME", "amount": "100 EUR", "actions": [{"id": "pay"}]}


def _csrf(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, html
    return match.group(1)


def test_the_link_page_shows_the_subject_and_its_changes_and_requests_a_revision(
    waiting: LiveServer,  # noqa: F811
    mailbox: Mailbox,  # noqa: F811
) -> None:
    producer = waiting.new_client("producer", "bot")
    alice = person(waiting, "reviewer", "alice", ["reviewers"])
    body = escalation(assigned_group="reviewers", policy="three-steps", subject=SUBJECT)
    task = producer.escalate(body).json()
    send_mail(waiting)
    (link,) = links_in(mailbox, "alice@example.org")
    url = local(waiting, link)
    page = httpx.get(url)
    for text in ("What is being decided", "Title", "Pay ACME", "Notes", "Request revision"):
        assert text in page.text
    assert "Changed since you last looked" not in page.text
    assert "Open in console" not in page.text  # nobody is signed in to the console here

    # alice saw revision 1 (in the API); the link page then shows what changed since.
    assert alice.get(f"/tasks/{task['id']}").status_code == 200
    changed = producer.put(
        f"/tasks/{task['id']}/subject",
        headers={"If-Match": '"1"'},
        json={"subject": SUBJECT | {"amount": "100000 EUR"}},
    )
    assert changed.status_code == 200
    page = httpx.get(url)
    assert "Changes from revision 1 to revision 2" in page.text
    assert "100000 EUR" in page.text

    csrf = _csrf(page.text)
    no_notes = httpx.post(
        url, data={"csrf": csrf, "decision": "REVISION_REQUESTED", "revision": "2"}
    )
    assert no_notes.status_code == 422
    asked = httpx.post(
        url,
        data={
            "csrf": csrf,
            "decision": "REVISION_REQUESTED",
            "revision": "2",
            "notes": "the amount is a thousand times the invoice",
        },
    )
    assert asked.status_code == 200, asked.text
    assert "Recorded: REVISION_REQUESTED" in asked.text
    shown = producer.get(f"/tasks/{task['id']}").json()
    assert (shown["decision"], shown["notes"]) == (
        "REVISION_REQUESTED",
        "the amount is a thousand times the invoice",
    )
    decided = httpx.get(url)
    assert "already recorded: REVISION_REQUESTED" in decided.text
    assert "<dt>Entity</dt>" not in decided.text  # no empty labels on a decided page


def test_an_approval_invalidated_by_a_new_revision_sends_a_new_mail_with_a_link(
    waiting: LiveServer,  # noqa: F811
    mailbox: Mailbox,  # noqa: F811
) -> None:
    producer = waiting.new_client("producer", "bot")
    person(waiting, "reviewer", "alice", ["reviewers"])
    body = escalation(assigned_group="reviewers", policy="three-steps", subject=SUBJECT)
    task = producer.escalate(body).json()
    send_mail(waiting)
    (link,) = links_in(mailbox, "alice@example.org")
    approved = httpx.post(local(waiting, link), json={"decision": "APPROVED", "revision": 1})
    assert approved.json()["state"] == "decided"

    changed = producer.put(
        f"/tasks/{task['id']}/subject",
        headers={"If-Match": '"1"'},
        json={"subject": SUBJECT | {"amount": "900 EUR"}},
    )
    assert changed.status_code == 200
    assert producer.get(f"/tasks/{task['id']}").json()["status"] == "PENDING_REVIEW"
    send_mail(waiting)
    subjects = [str(m["Subject"]) for m in mailbox.to("alice@example.org")]
    assert any("invalidated the approval" in s for s in subjects), subjects
    fresh = links_in(mailbox, "alice@example.org")[-1]
    assert fresh != link
    page = httpx.get(local(waiting, fresh))
    assert "Changes from revision 1 to revision 2" in page.text
    assert "900 EUR" in page.text


def test_a_person_signed_in_to_the_console_is_offered_the_same_task_there(
    waiting: LiveServer,  # noqa: F811
    mailbox: Mailbox,  # noqa: F811
) -> None:
    producer = waiting.new_client("producer", "bot")
    password = "correct horse battery staple"
    with waiting.admin() as admin:
        created = admin.post(
            "/users",
            json={
                "principal_id": "ann",
                "role": "reviewer",
                "email": "ann@example.org",
                "groups": ["reviewers"],
                "password": password,
            },
        )
    assert created.status_code == 201, created.text
    task = producer.escalate(
        escalation(assigned_group="reviewers", policy="three-steps", subject=SUBJECT)
    ).json()
    send_mail(waiting)
    (link,) = links_in(mailbox, "ann@example.org")
    url = local(waiting, link)
    assert "Open in console" not in httpx.get(url).text
    with httpx.Client(base_url=waiting.base_url, timeout=30) as browser:
        login = browser.get("/console/login")
        signed = browser.post(
            "/console/login",
            data={"username": "ann", "password": password, "csrf": _csrf_any(login.text)},
        )
        assert signed.status_code in (302, 303), signed.text
        page = browser.get(url)
    assert f'href="/console/tasks/{task["id"]}">Open in console' in page.text


def _csrf_any(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, html
    return match.group(1)


def test_the_link_page_allows_only_its_own_style_and_no_framing(
    waiting: LiveServer,  # noqa: F811
    mailbox: Mailbox,  # noqa: F811
) -> None:
    producer = waiting.new_client("producer", "bot")
    person(waiting, "reviewer", "alice", ["reviewers"])
    producer.escalate(escalation(assigned_group="reviewers", policy="three-steps"))
    send_mail(waiting)
    (link,) = links_in(mailbox, "alice@example.org")
    nonces = []
    for _ in range(2):
        page = httpx.get(local(waiting, link))
        policy = page.headers["content-security-policy"]
        assert "unsafe-inline" not in policy
        assert "frame-ancestors 'none'" in policy
        assert (page.headers["x-frame-options"], page.headers["x-content-type-options"]) == (
            "DENY",
            "nosniff",
        )
        nonce = re.search(r"style-src 'nonce-([^']+)'", policy)
        assert nonce is not None, policy
        assert f'<style nonce="{nonce.group(1)}">' in page.text
        nonces.append(nonce.group(1))
    assert nonces[0] != nonces[1]  # a fresh one per page


def test_the_link_page_compares_any_two_revisions(
    waiting: LiveServer,  # noqa: F811
    mailbox: Mailbox,  # noqa: F811
) -> None:
    producer = waiting.new_client("producer", "bot")
    person(waiting, "reviewer", "alice", ["reviewers"])
    body = escalation(assigned_group="reviewers", policy="three-steps", subject=SUBJECT)
    task = producer.escalate(body).json()
    send_mail(waiting)
    (link,) = links_in(mailbox, "alice@example.org")
    url = local(waiting, link)
    assert "Compare revisions" not in httpx.get(url).text  # one revision: nothing to compare
    for revision, change in ((1, {"amount": "200 EUR"}), (2, {"title": "Pay ACME Ltd"})):
        answer = producer.put(
            f"/tasks/{task['id']}/subject",
            headers={"If-Match": f'"{revision}"'},
            json={"subject": SUBJECT | {"amount": "200 EUR"} | change},
        )
        assert answer.status_code == 200, answer.text
    page = httpx.get(url, params={"compare_from": "1", "compare_to": "3"}).text
    assert "Compare revisions" in page
    section = page[page.index('id="comparison"') :]
    assert "Changes from revision 1 to revision 3" in section
    assert "Amount" in section
    assert "Title" in section
    only_title = httpx.get(url, params={"compare_from": "2", "compare_to": "3"}).text
    section = only_title[only_title.index('id="comparison"') :]
    assert "Changes from revision 2 to revision 3" in section
    assert "Amount" not in section.split("</table>")[0]
    for odd in ({"compare_from": "3", "compare_to": "3"}, {"compare_from": "1", "compare_to": "9"}):
        shown = httpx.get(url, params=odd)
        assert shown.status_code == 200
        assert 'id="comparison"' not in shown.text
