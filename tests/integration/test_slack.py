"""Chat approvals in Slack, on both engines: a live Signoff with the Slack door on, the
real Bolt and slack_sdk clients pointed at a local fake of Slack (tests/slackfake.py).

One scenario per transport checks many things along the way: signed, replayed and forged
requests; cards and their limits; identity by verified e-mail (unlinked, unconfirmed,
disabled); a stale card refused and redrawn; approve, reject with a modal's notes; a
2-of-2 rule reached by two Slack votes with a third door refused after it; and what the
trail and the chat ledger record.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import httpx
import pytest
import typer

from signoff.cli.integrations import slack_card
from signoff.domain.chat_cards import LIMITS
from signoff.domain.clock import ManualClock
from tests.doors import PASSWORD, _csrf
from tests.slackfake import (
    APP_TOKEN,
    BOT_TOKEN,
    SIGNING_SECRET,
    SlackFake,
    block_action,
    slack_fake,
    view_submission,
)
from tests.support import Client, LiveServer, escalation, live_server, logging_kept

SUBJECT = {"title": "Pay ACME", "amount": "100 EUR", "note": "x" * 2000}
APPROVE, REJECT = "signoff_decide:APPROVED", "signoff_decide:REJECTED"
CHANNEL = "C_REVIEW"


@pytest.fixture
def fake(clock: ManualClock) -> Iterator[SlackFake]:
    with slack_fake() as fake:
        fake.clock = lambda: clock.now().timestamp()  # Slack's clock is the server's
        fake.add_member("U_ALICE", "Alice@Example.org")
        fake.add_member("U_SAM", "sam@example.org")
        fake.add_member("U_BOB", "bob@example.org")  # no Signoff account has this e-mail
        fake.add_member("U_EVE", "eve@example.org", confirmed=False)
        fake.add_member("U_CAROL", "carol@example.org")
        yield fake


def _server(make_settings: Any, clock: ManualClock, fake: SlackFake, **extra: Any) -> Any:
    settings = make_settings(
        slack_bot_token=BOT_TOKEN,
        slack_api_url=fake.api_url,
        slack_default_channel=CHANNEL,
        secret_key="slack-test-secret-key",
        public_base_url="http://signoff.test",
        # The card worker looks at the outbox this often (a click in the process wakes it).
        dispatcher_poll_seconds=0.1,
        **extra,
    )
    return live_server(settings, clock)


def _people(server: LiveServer) -> tuple[Client, Client]:
    """Users alice, sam, eve and carol (with e-mails), a producer ``bot`` and an API
    reviewer ``dan``."""
    with server.admin() as admin:
        for who, role in [
            ("alice", "reviewer"),
            ("sam", "supervisor"),
            ("eve", "reviewer"),
            ("carol", "reviewer"),
        ]:
            made = admin.post(
                "/users",
                json={
                    "principal_id": who,
                    "role": role,
                    "groups": ["reviewers"],
                    "email": f"{who}@example.org",
                },
            )
            assert made.status_code == 201, made.text
        made = admin.post(
            "/api-keys", json={"role": "reviewer", "principal_id": "dan", "groups": ["reviewers"]}
        )
        assert made.status_code == 201, made.text
    return server.new_client("producer", "bot"), server.client(made.json()["key"], "dan")


def _posted(fake: SlackFake, task_id: str) -> tuple[str, dict[str, Any]]:
    """The card posted for a task (by the door's worker, from the outbox): ts and message."""
    call = fake.wait_for("chat.postMessage", lambda c: task_id in json.dumps(c.params))[-1]
    return str(call.answer["ts"]), call.params


def _drawn(fake: SlackFake, ts: str, needle: str) -> dict[str, Any]:
    """The first redraw of message ``ts`` that shows ``needle``."""
    calls = fake.wait_for(
        "chat.update", lambda c: c.params["ts"] == ts and needle in json.dumps(c.params["blocks"])
    )
    return calls[0].params


def _escalate(producer: Client, handle: str, **extra: Any) -> dict[str, Any]:
    body = escalation(f"{handle}-{uuid.uuid4().hex[:6]}", subject=SUBJECT, **extra)
    made = producer.escalate(body)
    assert made.status_code == 201, made.text
    return dict(made.json())


def _value(card: dict[str, Any]) -> str:
    buttons = next(b for b in card["blocks"] if b["type"] == "actions")["elements"]
    values = {button["value"] for button in buttons}
    assert len(values) == 1
    return str(values.pop())


def _buttons(card: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for b in card["blocks"] if b["type"] == "actions"]


def _told(fake: SlackFake, user: str, needle: str) -> str:
    """The private message to ``user`` that says ``needle`` (waited for)."""
    calls = fake.wait_for(
        "chat.postEphemeral", lambda c: c.params["user"] == user and needle in c.params["text"]
    )
    return str(calls[0].params["text"])


def _click(
    server: LiveServer, fake: SlackFake, user: str, ts: str, action: str, value: str, **signing: Any
) -> int:
    payload = block_action(user, CHANNEL, ts, action, value)
    return fake.post_interaction(server.base_url, payload, **signing).status_code


def _console(server: LiveServer, who: str) -> tuple[httpx.Client, str]:
    """A reviewer signed in to the console, and the CSRF token of its forms."""
    with server.admin() as admin:
        made = admin.post(
            "/users",
            json={
                "principal_id": who,
                "role": "reviewer",
                "groups": ["reviewers"],
                "password": PASSWORD,
            },
        )
        assert made.status_code == 201, made.text
    browser = httpx.Client(base_url=server.base_url, follow_redirects=False, timeout=30)
    page = browser.get("/console/login")
    signed = browser.post(
        "/console/login", data={"username": who, "password": PASSWORD, "csrf": _csrf(page.text)}
    )
    assert signed.status_code in (302, 303), signed.text
    return browser, _csrf(browser.get("/console").text)


def _settled(server: LiveServer) -> None:
    """Wait until the door has nothing left to deliver."""
    deadline = time.monotonic() + 15
    while server.rows("chat_deliveries", status="PENDING"):
        assert time.monotonic() < deadline, "deliveries stayed pending"
        time.sleep(0.05)


def _task(producer: Client, task_id: str) -> dict[str, Any]:
    return dict(producer.get(f"/tasks/{task_id}").json())


def test_cards_and_decisions_over_http(
    make_settings: Any, clock: ManualClock, fake: SlackFake
) -> None:
    with _server(make_settings, clock, fake, slack_signing_secret=SIGNING_SECRET) as server:
        producer, dan = _people(server)
        assert fake.wait_for("auth.test"), "the bot token is checked at start-up"
        task = _escalate(producer, "pay", assigned_group="reviewers")
        ts, card = _posted(fake, task["id"])
        assert fake.called("chat.postMessage")[-1].params["channel"] == CHANNEL

        # The card: headline first, the revision under review with long values folded
        # (said so), buttons bound to revision 1, within Slack's limits.
        blocks = card["blocks"]
        assert blocks[0]["type"] == "header"
        assert len(blocks) <= LIMITS["blocks"]
        texts = json.dumps(blocks)
        assert "Under review: revision 1" in texts
        assert "folded: 1,500 more characters" in texts
        assert f"http://signoff.test/console/tasks/{task['id']}" in texts
        for block in blocks:
            text = (block.get("text") or {}).get("text", "")
            assert len(text) <= LIMITS["section_text"]
        buttons = _buttons(card)[0]["elements"]
        assert [b["text"]["text"] for b in buttons] == ["Approve", "Reject", "Request revision"]
        assert "confirm" in buttons[0]
        assert "confirm" not in buttons[1]
        first = _value(card)
        assert f".{task['id']}.1.{task['digest']}." in first

        # Requests Slack did not sign, or signed over five minutes ago, do nothing.
        assert _click(server, fake, "U_ALICE", ts, APPROVE, first, secret="wrong") == 401
        replay = time.time() - 6 * 60
        assert _click(server, fake, "U_ALICE", ts, APPROVE, first, at=replay) == 401
        # A signed request whose button value was altered is refused, privately.
        forged = first.replace(".1.", ".7.")
        assert _click(server, fake, "U_ALICE", ts, APPROVE, forged) == 200
        _told(fake, "U_ALICE", "not drawn by this Signoff")
        # An unknown action gets Bolt's clear answer, not a 500; so do a payload that is
        # not JSON and an oversized body.
        assert _click(server, fake, "U_ALICE", ts, "something_else", first) == 404
        body, headers = fake.signed({})
        garbled = body.replace(b"%7B%7D", b"%7Bnot-json")
        headers = fake.signed_headers(garbled)
        answer = httpx.post(f"{server.base_url}/slack/events", content=garbled, headers=headers)
        assert 400 <= answer.status_code < 500, answer.status_code
        huge = fake.signed_headers(b"payload=" + b"x" * 100_000)
        answer = httpx.post(
            f"{server.base_url}/slack/events", content=b"payload=" + b"x" * 100_000, headers=huge
        )
        assert answer.status_code == 413

        # Identity: no account with the e-mail, an unconfirmed e-mail, a disabled account.
        assert _click(server, fake, "U_BOB", ts, APPROVE, first) == 200
        _told(fake, "U_BOB", "no Signoff account has the e-mail bob@example.org")
        assert _click(server, fake, "U_EVE", ts, APPROVE, first) == 200
        _told(fake, "U_EVE", "no verified e-mail")
        with server.admin() as admin:
            assert admin.post("/users/carol/disable").status_code == 200
        assert _click(server, fake, "U_CAROL", ts, APPROVE, first) == 200
        _told(fake, "U_CAROL", "carol is disabled")
        assert _task(producer, task["id"])["status"] == "PENDING_REVIEW"

        # A new revision (through the API): the card follows it, naming what changed; a
        # click on the old card is refused, said privately — never approving new content.
        revised = producer.put(
            f"/tasks/{task['id']}/subject",
            headers={"If-Match": '"1"'},
            json={"subject": {**SUBJECT, "amount": "900 EUR"}},
        )
        assert revised.status_code == 200, revised.text
        redrawn = _drawn(fake, ts, "Changed since revision 1: amount")
        second = _value(redrawn)
        assert ".2." in second
        assert _click(server, fake, "U_ALICE", ts, APPROVE, first) == 200
        _told(fake, "U_ALICE", "showed revision 1")
        assert _task(producer, task["id"])["status"] == "PENDING_REVIEW"

        # Approve on the current card: claimed and resolved in one go, the card updated.
        assert _click(server, fake, "U_ALICE", ts, APPROVE, second) == 200
        decided = _drawn(fake, ts, "Approved by alice in Slack")
        assert not _buttons(decided)
        after = _task(producer, task["id"])
        assert (after["status"], after["decision"], after["operator_id"]) == (
            "RESOLVED",
            "APPROVED",
            "alice",
        )
        assert after["approved_revision"] == 2
        # Refused clicks claimed nothing: one claim, the one that decided.
        trail = producer.get(f"/tasks/{task['id']}/events").json()["items"]
        assert [e["action"] for e in trail if e["action"] in ("claim", "release")] == ["claim"]
        ledger = server.rows("chat_actions", task_id=uuid.UUID(task["id"]))
        assert [
            (r["chat_user"], r["principal_id"], r["revision"], r["outcome"]) for r in ledger
        ] == [
            ("U_ALICE", "alice", 1, "ERR_STALE_REVISION"),
            ("U_ALICE", "alice", 2, "recorded"),
        ]
        assert server.count("chat_cards", task_id=uuid.UUID(task["id"])) == 1

        # Reject opens a modal; notes are required (the modal says so and stays open).
        other = _escalate(producer, "refund", assigned_group="reviewers")
        other_ts, other_card = _posted(fake, other["id"])
        assert _click(server, fake, "U_SAM", other_ts, REJECT, _value(other_card)) == 200
        modal = fake.wait_for("views.open")[-1].params["view"]
        assert modal["blocks"][0]["element"]["max_length"] <= LIMITS["input_max_length"]
        empty = fake.post_interaction(server.base_url, view_submission("U_SAM", modal, None))
        assert empty.status_code == 200
        assert empty.json()["response_action"] == "errors"
        assert "notes" in empty.json()["errors"]
        assert _task(producer, other["id"])["status"] == "PENDING_REVIEW"
        sent = fake.post_interaction(
            server.base_url, view_submission("U_SAM", modal, "the amount is wrong")
        )
        assert sent.status_code == 200
        _drawn(fake, other_ts, "Rejected by sam in Slack")
        rejected = _task(producer, other["id"])
        assert (rejected["decision"], rejected["notes"], rejected["operator_id"]) == (
            "REJECTED",
            "the amount is wrong",
            "sam",
        )

        # Two people click Approve on one card at once: one decides, the other is told.
        race = _escalate(producer, "race", assigned_group="reviewers")
        race_ts, race_card = _posted(fake, race["id"])
        value = _value(race_card)
        with ThreadPoolExecutor(2) as pool:
            statuses = list(
                pool.map(
                    lambda user: _click(server, fake, user, race_ts, APPROVE, value),
                    ["U_ALICE", "U_SAM"],
                )
            )
        assert statuses == [200, 200]
        _drawn(fake, race_ts, "Approved by ")
        deadline = time.monotonic() + 15
        while len(server.rows("chat_actions", task_id=uuid.UUID(race["id"]))) < 2:
            assert time.monotonic() < deadline, "both clicks are recorded"
            time.sleep(0.05)
        outcomes = sorted(
            r["outcome"] for r in server.rows("chat_actions", task_id=uuid.UUID(race["id"]))
        )
        assert outcomes[1] == "recorded"
        assert outcomes[0].startswith("ERR_"), outcomes
        raced = _task(producer, race["id"])
        assert raced["status"] == "RESOLVED"
        assert raced["operator_id"] in ("alice", "sam")
        assert (
            len(
                [
                    e
                    for e in producer.get(f"/tasks/{race['id']}/events").json()["items"]
                    if e["action"] == "resolve"
                ]
            )
            == 1
        )

        # A rule of three approvals reached by two Slack votes and one through the API;
        # one vote a person; a Slack click after it is refused (one outcome, any door).
        ruled = _escalate(
            producer, "rule", assigned_group="reviewers", approval_rule={"approvals": 3}
        )
        rule_ts, card = _posted(fake, ruled["id"])
        assert "0 of 3" in json.dumps(card["blocks"])
        # Each person whose vote it awaits gets it by direct message too (not the disabled
        # carol, not the producer, not dan who has no account with an e-mail).
        dms = fake.wait_for(
            "chat.postMessage",
            lambda c: ruled["id"] in json.dumps(c.params) and c.params["channel"] != CHANNEL,
            count=3,
        )
        assert sorted(c.params["channel"] for c in dms) == ["DU_ALICE", "DU_EVE", "DU_SAM"]
        eve_ts = next(str(c.answer["ts"]) for c in dms if c.params["channel"] == "DU_EVE")
        value = _value(card)
        assert _click(server, fake, "U_ALICE", rule_ts, APPROVE, value) == 200
        _told(fake, "U_ALICE", "recorded and counts")
        voted = _drawn(fake, rule_ts, "alice: Approve (in Slack)")
        assert "1 of 3" in json.dumps(voted["blocks"])
        assert _buttons(voted), "still open to votes"
        assert _click(server, fake, "U_ALICE", rule_ts, APPROVE, value) == 200
        _told(fake, "U_ALICE", "already recorded; nothing changed")
        by_api = dan.post(
            f"/tasks/{ruled['id']}/votes",
            json={"decision": "APPROVED", "revision": 1, "digest": ruled["digest"]},
        )
        assert by_api.status_code == 200, by_api.text
        assert "2 of 3" in json.dumps(
            _drawn(fake, rule_ts, "dan: Approve (through the API)")["blocks"]
        )
        assert _click(server, fake, "U_SAM", rule_ts, APPROVE, value) == 200
        reached = _drawn(fake, rule_ts, "sam: Approve (in Slack)")
        assert not _buttons(reached)
        assert not _buttons(_drawn(fake, eve_ts, "sam: Approve (in Slack)")), "DMs follow too"
        after = _task(producer, ruled["id"])
        assert (after["status"], after["decision"]) == ("RESOLVED", "APPROVED")
        assert [(v["voter"], v["door"]) for v in after["votes"]] == [
            ("alice", "slack"),
            ("dan", "api"),
            ("sam", "slack"),
        ]
        assert _click(server, fake, "U_EVE", eve_ts, APPROVE, value) == 200
        _told(fake, "U_EVE", "Nothing was decided")
        trail = producer.get(f"/tasks/{ruled['id']}/events")
        assert trail.status_code == 200, trail.text
        votes = [e for e in trail.json()["items"] if e["action"] == "vote"]
        assert [(e["actor_id"], e["details"]["vote"]["door"]) for e in votes] == [
            ("alice", "slack"),
            ("dan", "api"),
            ("sam", "slack"),
        ]
        assert [e["action"] for e in trail.json()["items"]].count("resolve") <= 1
        ledger = server.rows("chat_actions", task_id=uuid.UUID(ruled["id"]))
        assert [(r["chat_user"], r["principal_id"], r["outcome"]) for r in ledger][:3] == [
            ("U_ALICE", "alice", "recorded"),
            ("U_ALICE", "alice", "recorded"),
            ("U_SAM", "sam", "recorded"),
        ]
        producer.close()
        dan.close()


def test_cards_follow_every_door_through_outages_and_restarts(
    make_settings: Any, clock: ManualClock, fake: SlackFake
) -> None:
    """A decision in the console redraws the card; a 429 is retried no sooner than its
    Retry-After (by the clock); Slack down delays cards, a restart loses none, and the
    escalation never waited."""
    routes = '{"group:finance": "C_FINANCE", "producer:bot": "C_BOT"}'
    with _server(
        make_settings, clock, fake, slack_signing_secret=SIGNING_SECRET, slack_channels=routes
    ) as server:
        producer, dan = _people(server)
        # Routing: the group's channel first, then the producer's, then the default.
        finance = _escalate(producer, "finance", assigned_group="finance")
        finance_ts, finance_card = _posted(fake, finance["id"])
        assert finance_card["channel"] == "C_FINANCE"
        # The producer withdraws it: the card says so and loses its buttons.
        assert producer.post(f"/tasks/{finance['id']}/cancel").status_code == 200
        assert not _buttons(_drawn(fake, finance_ts, "Cancelled by the producer"))
        task = _escalate(producer, "console", assigned_group="reviewers")
        ts, card = _posted(fake, task["id"])
        assert card["channel"] == "C_BOT"
        # Decided in the console by carl (signed in with a password).
        console, csrf = _console(server, "carl")
        claimed = console.post(f"/console/tasks/{task['id']}/claim", data={"csrf": csrf})
        assert claimed.status_code == 200, claimed.text
        _drawn(fake, ts, "carl is reviewing it")
        _settled(server)
        fake.rate_limit("chat.update", 1, retry_after=30)
        form = {"csrf": csrf, "decision": "APPROVED", "revision": "1", "digest": task["digest"]}
        decided = console.post(f"/console/tasks/{task['id']}/decide", data=form)
        assert decided.status_code == 200, decided.text
        assert _task(producer, task["id"])["operator_id"] == "carl"
        # Slack said: not before 30 s. Nothing is drawn until the clock gets there.
        deadline = time.monotonic() + 15
        while not server.rows("chat_deliveries", last_error="ratelimited"):
            assert time.monotonic() < deadline, "the 429 was not recorded"
            time.sleep(0.05)
        for waiting in server.rows("chat_deliveries", last_error="ratelimited"):
            assert waiting["next_attempt_at"] >= clock.now() + timedelta(seconds=30)
        decided = [c for c in fake.called("chat.update") if "Approved" in json.dumps(c.params)]
        assert not decided
        clock.advance(31)
        # A decision made elsewhere names its own door, as its audit event records it.
        _drawn(fake, ts, "Approved by carl in the console")
        console.close()

        # A card deleted in Slack is not retried for ever: its redraw is skipped.
        gone = _escalate(producer, "gone", assigned_group="reviewers")
        _posted(fake, gone["id"])
        fake.refuse("chat.update", "message_not_found")
        assert producer.post(f"/tasks/{gone['id']}/cancel").status_code == 200
        deadline = time.monotonic() + 15
        while not server.rows("chat_deliveries", task_id=uuid.UUID(gone["id"]), status="SKIPPED"):
            assert time.monotonic() < deadline, "the redraw of a deleted card was not skipped"
            time.sleep(0.05)
        (skipped,) = server.rows("chat_deliveries", task_id=uuid.UUID(gone["id"]), kind="redraw")
        assert skipped["last_error"] == "message_not_found"

        # Slack down: escalations are answered at once; the cards wait, nothing is lost,
        # not even across a restart of Signoff.
        fake.down = True
        late = _escalate(producer, "outage", assigned_group="reviewers")
        deadline = time.monotonic() + 15
        # The card waits in a delivery row that has met the outage at least once.
        while not any(
            row["attempts"] >= 1
            for row in server.rows("chat_deliveries", task_id=uuid.UUID(late["id"]))
        ):
            assert time.monotonic() < deadline, "no delivery was tried"
            time.sleep(0.05)
    # Back with a bot token Slack now refuses: the server starts, says so, counts it.
    fake.down, fake.revoked = False, True
    with _server(
        make_settings, clock, fake, slack_signing_secret=SIGNING_SECRET, slack_channels=routes
    ) as server:
        counted = 'signoff_slack_calls_total{method="auth.test",result="token_revoked"}'
        deadline = time.monotonic() + 15
        with server.admin() as admin:
            while counted not in admin.get("/metrics").text:
                assert time.monotonic() < deadline, "the refused token is not counted"
                time.sleep(0.05)
        assert server.admin().get("/healthz").status_code == 200
        fake.revoked = False
        clock.advance(600)
        late_ts, _ = _posted(fake, late["id"])
        posted = [c for c in fake.called("chat.postMessage") if late["id"] in json.dumps(c.params)]
        assert len(posted) == 1, "posted once"
        deadline = time.monotonic() + 15
        while server.rows("chat_deliveries", task_id=uuid.UUID(late["id"]), status="PENDING"):
            assert time.monotonic() < deadline, "the delivery was not closed"
            time.sleep(0.05)
        (row,) = server.rows("chat_deliveries", task_id=uuid.UUID(late["id"]))
        assert (row["status"], row["ts"]) == ("DONE", late_ts)
        assert row["attempts"] >= 1
    producer.close()
    dan.close()


def test_socket_mode_takes_the_same_clicks(
    make_settings: Any,
    clock: ManualClock,
    fake: SlackFake,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with _server(make_settings, clock, fake, slack_app_token=APP_TOKEN) as server:
        producer, dan = _people(server)
        assert fake.socket_connected(), "Socket Mode opened Slack's WebSocket"
        assert fake.called("apps.connections.open")[0].token == APP_TOKEN
        # No signing secret: the HTTP endpoint is not there at all.
        assert server.client(None).post("/slack/events", content=b"x").status_code == 404
        task = _escalate(producer, "socket", assigned_group="reviewers")
        ts, card = _posted(fake, task["id"])
        fake.send_over_socket(block_action("U_ALICE", CHANNEL, ts, APPROVE, _value(card)))
        _drawn(fake, ts, "Approved by alice in Slack")
        after = _task(producer, task["id"])
        assert (after["status"], after["decision"], after["operator_id"]) == (
            "RESOLVED",
            "APPROVED",
            "alice",
        )
        # The card as JSON without Slack: the command `signoff slack-card`.
        monkeypatch.setenv("SIGNOFF_ENCRYPTION_KEYS", server.settings.encryption_keys or "")
        printed: list[str] = []
        monkeypatch.setattr(typer, "echo", lambda text, **_: printed.append(str(text)))
        with logging_kept():
            slack_card(task["id"], database_url=server.settings.database_url)
        shown = json.loads(printed[-1])
        assert shown["blocks"][0]["type"] == "header"
        assert "Approved by alice in Slack" in json.dumps(shown["blocks"])
        producer.close()
        dan.close()
