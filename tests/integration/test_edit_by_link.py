"""Edit, then approve through a resume link (SQLite and PostgreSQL): the page offers the
fields the producer allowed, and the edit it sends is what is approved."""

from __future__ import annotations

import re

import httpx

from signoff.domain.digests import json_digest
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

SUBJECT = {"title": "Pay ACME", "amount": 100, "actions": [{"id": "pay"}]}


def test_a_resume_link_edits_what_the_producer_allowed_and_approves_it(
    waiting: LiveServer,  # noqa: F811
    mailbox: Mailbox,  # noqa: F811
) -> None:
    producer = waiting.new_client("producer", "bot")
    person(waiting, "reviewer", "alice", ["reviewers"])
    body = escalation(
        assigned_group="reviewers", policy="three-steps", subject=SUBJECT, editable=["/amount"]
    )
    task = producer.escalate(body).json()
    send_mail(waiting)
    (link,) = links_in(mailbox, "alice@example.org")
    url = local(waiting, link)
    page = httpx.get(url).text
    assert 'name="edit:/amount" type="text" value="100"' in page
    assert "edit:/title" not in page
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf is not None
    form = {"csrf": csrf.group(1), "decision": "APPROVED_WITH_EDITS", "revision": "1"}
    wrong = httpx.post(url, data=form | {"edit:/amount": "ninety"})
    assert wrong.status_code == 422  # a number stays a number: nothing recorded
    assert producer.get(f"/tasks/{task['id']}").json()["status"] == "PENDING_REVIEW"
    done = httpx.post(url, data=form | {"edit:/amount": "90"})
    assert done.status_code == 200, done.text
    assert "Recorded: APPROVED_WITH_EDITS" in done.text
    shown = producer.get(f"/tasks/{task['id']}").json()
    assert (shown["decision"], shown["approved_digest"]) == (
        "APPROVED_WITH_EDITS",
        json_digest(SUBJECT | {"amount": 90}),
    )
    assert producer.get(f"/tasks/{task['id']}/revisions/2").json()["created_by"] == "alice"
