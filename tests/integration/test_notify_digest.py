"""How people hear of work: each event, a digest every interval, or none — over a real
SMTP server, on both engines. A digest gathers every held notification of a person into
one e-mail, once, whatever crashes around it."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from contextlib import closing
from email.header import decode_header, make_header
from typing import Any

import httpx
import pytest

from signoff.domain.clock import ManualClock
from signoff.services import notify_digest
from signoff.services.context import ServiceContext
from signoff.services.secrets import reencrypt_with_newest_key
from signoff.store.runtime.database import Database, create_engine
from signoff.workers.notifier import LEASE_SECONDS, Notifier
from tests.mailbox import Mailbox
from tests.support import Client, LiveServer, escalation, live_server

PUBLIC = "http://signoff.test"
PASSWORD = "correct horse battery staple"


class Crash(Exception):
    """The process dies here (raised inside a transaction: nothing of it is committed)."""


async def _with_context(server: LiveServer, work: Callable[[ServiceContext], Any]) -> Any:
    database = Database(create_engine(server.settings))
    try:
        return await work(
            ServiceContext(database=database, settings=server.settings, clock=server.clock)
        )
    finally:
        await database.dispose()


def send_mail(server: LiveServer) -> int:
    """One pass of a fresh notifier (a restarted process)."""
    return int(asyncio.run(_with_context(server, lambda c: Notifier(c).send_once())))


@pytest.fixture
def mailbox() -> Iterator[Mailbox]:
    with Mailbox() as box:
        yield box


@pytest.fixture
def mailing(make_settings, clock: ManualClock, mailbox: Mailbox) -> Iterator[LiveServer]:  # type: ignore[no-untyped-def]
    settings = make_settings(
        run_workers=False,
        smtp_host="127.0.0.1",
        smtp_port=mailbox.port,
        public_base_url=PUBLIC,
    )
    with live_server(settings, clock) as server:
        yield server


def reviewer(server: LiveServer, name: str, notify: str | None = None) -> None:
    with server.admin() as admin:
        made = admin.post(
            "/users",
            json={
                "principal_id": name,
                "role": "reviewer",
                "groups": ["reviewers"],
                "email": f"{name}@example.org",
                "password": PASSWORD,
            },
        )
        assert made.status_code == 201, made.text
        assert made.json()["notify"] == "each"
        if notify is not None:
            changed = admin.patch(f"/users/{name}", json={"notify": notify})
            assert changed.status_code == 200, changed.text
            assert changed.json()["notify"] == notify


def payment(
    producer: Client, payee: str, amount: int, deadline: str = "2030-01-01T00:00:00Z"
) -> str:
    headline = {
        "title": "Release {/amount} to {/payee/name}",
        "fields": [
            {"label": "Amount", "pointer": "/amount", "type": "money", "currency": "EUR"},
            {"label": "Payee", "pointer": "/payee/name", "type": "person"},
        ],
    }
    body = escalation(
        assigned_group="reviewers",
        subject={"amount": amount, "payee": {"name": payee}},
        headline=headline,
        deadline=deadline,
    )
    response = producer.escalate(body)
    assert response.status_code == 201, response.text
    return str(response.json()["task_id"])


def subject_of(message: Any) -> str:
    return str(make_header(decode_header(message["Subject"])))


def links(body: str) -> list[str]:
    return re.findall(re.escape(PUBLIC) + r"/r/[A-Za-z0-9_-]+", body)


def test_a_digest_is_one_e_mail_for_many_tasks_each_with_its_headline_and_link(
    mailing: LiveServer, mailbox: Mailbox
) -> None:
    reviewer(mailing, "dana", "1h")
    reviewer(mailing, "eli")  # each event, as before
    producer = mailing.new_client("producer", "bot")
    payment(producer, "ACME Ltd", 12500, "2030-01-01T00:00:00Z")
    payment(producer, "Globex", 800, "2029-06-01T00:00:00Z")
    payment(producer, "Initech", 99, "2029-01-01T00:00:00Z")

    send_mail(mailing)
    assert len(mailbox.to("eli@example.org")) == 3
    assert mailbox.to("dana@example.org") == []  # held until the hour is over
    assert mailing.count("notifications", principal_id="dana", status="HELD") == 3

    mailing.clock.advance(59 * 60)
    send_mail(mailing)
    assert mailbox.to("dana@example.org") == []

    mailing.clock.advance(60)
    send_mail(mailing)
    send_mail(mailing)  # a second pass finds nothing more to gather or send
    [digest] = mailbox.to("dana@example.org")
    assert subject_of(digest) == "[Signoff] Digest: 3 tasks waiting for you"
    body = Mailbox.body(digest).replace("\r\n", "\n")
    assert ". Release €12,500.00 to ACME Ltd\n    Amount: €12,500.00\n    Payee: ACME Ltd\n" in body
    # The soonest deadline first.
    numbered = re.findall(r"^(\d)\. Release .+ to (\w+)", body, flags=re.MULTILINE)
    assert numbered == [("1", "Initech"), ("2", "Globex"), ("3", "ACME")]
    assert "gathered since" in body
    assert "(1 hour ago)" in body
    assert "Deadline: 1 Jan 2030, 00:00 UTC (in 3 years)" in body
    found = links(body)
    assert len(found) == 3
    assert len(set(found)) == 3
    for link in found:
        page = httpx.get(link.replace(PUBLIC, mailing.base_url))
        assert page.status_code == 200
    assert "Release €800.00 to Globex" in httpx.get(found[1].replace(PUBLIC, mailing.base_url)).text
    assert "Release €99.00 to Initech" in httpx.get(found[0].replace(PUBLIC, mailing.base_url)).text
    assert mailing.count("notifications", principal_id="dana", status="DIGESTED") == 3
    [row] = mailing.rows("notifications", principal_id="dana", kind="digest")
    assert row["status"] == "SENT"
    assert row["resume_token"] is None


def test_a_task_settled_before_the_digest_is_listed_without_a_link(
    mailing: LiveServer, mailbox: Mailbox
) -> None:
    reviewer(mailing, "dana", "15m")
    producer = mailing.new_client("producer", "bot")
    settled = payment(producer, "ACME Ltd", 12500)
    payment(producer, "Globex", 800)
    cancelled = producer.post(f"/tasks/{settled}/cancel")
    assert cancelled.status_code == 200, cancelled.text

    mailing.clock.advance(15 * 60)
    send_mail(mailing)
    [digest] = mailbox.to("dana@example.org")
    assert subject_of(digest) == "[Signoff] Digest: 1 task waiting for you"
    body = Mailbox.body(digest).replace("\r\n", "\n")
    waiting, settled_entry = body.split("\n2. ")  # what still waits comes first
    assert "Release €800.00 to Globex" in waiting
    assert len(links(waiting)) == 1
    assert "Release €12,500.00 to ACME Ltd" in settled_entry
    assert "No longer waiting: cancelled." in settled_entry
    assert links(settled_entry) == []  # never a link to a decision that can no longer be made


def test_a_task_handed_to_another_group_keeps_no_link_in_the_digest(
    mailing: LiveServer, mailbox: Mailbox
) -> None:
    reviewer(mailing, "dana", "1h")
    with mailing.admin() as admin:
        made = admin.post(
            "/users",
            json={"principal_id": "sue", "role": "supervisor", "groups": ["aml"]},
        )
        assert made.status_code == 201, made.text
    producer = mailing.new_client("producer", "bot")
    moved = payment(producer, "ACME Ltd", 12500)
    payment(producer, "Globex", 800, "2031-01-01T00:00:00Z")
    with mailing.admin() as admin:
        handed = admin.post(f"/tasks/{moved}/reassign", json={"group": "aml"})
        assert handed.status_code == 200, handed.text

    mailing.clock.advance(3600)
    send_mail(mailing)
    [digest] = mailbox.to("dana@example.org")
    assert subject_of(digest) == "[Signoff] Digest: 1 task waiting for you"
    body = Mailbox.body(digest).replace("\r\n", "\n")
    yours, handed_on = body.split("\n2. ")
    assert "Release €800.00 to Globex" in yours
    assert len(links(yours)) == 1
    assert "Release €12,500.00 to ACME Ltd" in handed_on
    assert "No longer yours to decide: it was handed to another group." in handed_on
    assert links(handed_on) == []  # its link was withdrawn: the digest does not show it


def test_none_sends_nothing_but_the_task_is_in_the_inbox(
    mailing: LiveServer, mailbox: Mailbox
) -> None:
    reviewer(mailing, "nia", "none")
    producer = mailing.new_client("producer", "bot")
    task_id = payment(producer, "ACME Ltd", 12500)
    mailing.clock.advance(2 * 86400)
    send_mail(mailing)
    assert mailbox.to("nia@example.org") == []
    assert mailing.count("notifications", principal_id="nia") == 0
    with closing(_signed_in(mailing, "nia")) as browser:
        assert task_id in browser.get("/console").text


def test_a_crash_around_the_digest_loses_nothing_and_sends_nothing_twice(
    mailing: LiveServer, mailbox: Mailbox
) -> None:
    reviewer(mailing, "dana", "15m")
    producer = mailing.new_client("producer", "bot")
    for number in range(4):
        payment(producer, f"Payee {number}", 100 + number)
    mailing.clock.advance(15 * 60)

    async def gather_and_die(context: ServiceContext) -> None:
        async with context.database.transaction() as uow:
            gathered = await notify_digest.gather_digest(uow, context, "dana", now=context.now())
            assert gathered is not None
            raise Crash  # dies before the commit

    async def crash_while_gathering(context: ServiceContext) -> None:
        with pytest.raises(Crash):
            await gather_and_die(context)

    asyncio.run(_with_context(mailing, crash_while_gathering))
    assert mailing.count("notifications", principal_id="dana", status="HELD") == 4
    assert mailing.count("notifications", principal_id="dana", kind="digest") == 0

    async def gather_then_die_while_sending(context: ServiceContext) -> None:
        assert await notify_digest.gather_due_digests(context) == 1
        assert await notify_digest.gather_due_digests(context) == 0  # nothing gathered twice
        from signoff.services import notifications

        claimed = await notifications.claim_notifications(
            context, lease_seconds=LEASE_SECONDS, limit=10
        )
        assert [row["kind"] for row in claimed] == ["digest"]  # leased, never sent: dies

    asyncio.run(_with_context(mailing, gather_then_die_while_sending))
    # The restart re-encrypts every secret at rest with the newest key, as each start does.
    assert asyncio.run(_with_context(mailing, reencrypt_with_newest_key)) >= 1
    assert send_mail(mailing) == 0  # the lease holds while the dead sender might still send
    assert mailbox.to("dana@example.org") == []

    mailing.clock.advance(LEASE_SECONDS + 1)
    send_mail(mailing)  # the restarted notifier
    send_mail(mailing)
    [digest] = mailbox.to("dana@example.org")
    body = Mailbox.body(digest)
    for number in range(4):
        assert f"Payee {number}" in body
    assert len(set(links(body))) == 4
    assert mailing.count("notifications", principal_id="dana", kind="digest") == 1


@pytest.mark.parametrize("bad", ["7m", "", "EACH", 15])
def test_a_choice_not_offered_is_refused_naming_the_field(mailing: LiveServer, bad: Any) -> None:
    reviewer(mailing, "dana")
    with mailing.admin() as admin:
        refused = admin.patch("/users/dana", json={"notify": bad})
        assert refused.status_code == 422, refused.text
        problem = refused.json()
        assert problem["error_code"] == "ERR_VALIDATION"
        assert [error["field"] for error in problem["errors"]] == ["notify"]
    [row] = mailing.rows("users", principal_id="dana")
    assert row["notify"] == "each"


def test_the_single_event_e_mail_gives_times_in_words(
    make_settings: Callable[..., Any], mailbox: Mailbox
) -> None:
    from datetime import UTC, datetime

    clock = ManualClock(datetime(2026, 12, 5, 11, 5, tzinfo=UTC))
    settings = make_settings(
        run_workers=False, smtp_host="127.0.0.1", smtp_port=mailbox.port, public_base_url=PUBLIC
    )
    with live_server(settings, clock) as server:
        reviewer(server, "eli")
        producer = server.new_client("producer", "bot")
        body = escalation(assigned_group="reviewers", deadline="2026-12-05T14:05:00Z")
        assert producer.escalate(body).status_code == 201
        send_mail(server)
    [message] = mailbox.to("eli@example.org")
    text = Mailbox.body(message)
    assert "next deadline: 5 Dec, 14:05 UTC (in 3 hours)" in text
    assert "2026-12-05T14:05" not in text


def _signed_in(server: LiveServer, name: str) -> httpx.Client:
    browser = httpx.Client(base_url=server.base_url, timeout=30)
    login = browser.get("/console/login")
    signed = browser.post(
        "/console/login",
        data={"csrf": _csrf(login.text), "username": name, "password": PASSWORD},
    )
    assert signed.status_code == 303, signed.text
    return browser


def _csrf(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, html
    return match.group(1)


def test_a_person_chooses_on_their_account_page(mailing: LiveServer) -> None:
    reviewer(mailing, "dana")
    with closing(_signed_in(mailing, "dana")) as browser:
        page = browser.get("/console/account")
        assert page.status_code == 200
        assert 'id="notify-each" name="notify" value="each" checked' in page.text
        csrf = _csrf(page.text)

        saved = browser.post(
            "/console/account/notifications",
            data={"csrf": csrf, "notify": "4h"},
            follow_redirects=True,
        )
        assert saved.status_code == 200, saved.text
        assert "Saved. From now on: a digest every 4 hours." in saved.text
        assert 'value="4h" checked' in saved.text
        assert mailing.rows("users", principal_id="dana")[0]["notify"] == "4h"

        refused = browser.post(
            "/console/account/notifications", data={"csrf": csrf, "notify": "7m"}
        )
        assert refused.status_code == 422
        assert "Nothing was changed: choose one of" in refused.text
        assert "ERR_" not in refused.text
        forged = browser.post("/console/account/notifications", data={"notify": "none"})
        assert forged.status_code == 403
    assert mailing.rows("users", principal_id="dana")[0]["notify"] == "4h"
