"""A Slack card is posted once, even when Slack accepted a post whose answer never came
back (the window in which a process dies after the post): the retry finds the message by
its metadata in the channel's history and adopts it. A post Slack refused is posted once
on the retry, and the normal path reads no history. On both engines, against the local
fake of Slack (tests/slackfake.py)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from signoff.domain.clock import ManualClock
from tests.integration.test_slack import (
    CHANNEL,
    _drawn,
    _escalate,
    _people,
    _posted,
    _server,
    _settled,
    fake,
)
from tests.integration.test_waiting import sweep
from tests.processes import wait_for
from tests.slackfake import SIGNING_SECRET, SlackFake
from tests.support import LiveServer

__all__ = ["fake"]  # the fixture, shared with tests/integration/test_slack.py


def _row(
    server: LiveServer, task_id: str, check: Callable[[dict[str, Any]], bool], **where: Any
) -> dict[str, Any]:
    """The task's delivery row (of ``where``) once ``check`` holds for it."""
    found: list[dict[str, Any]] = []

    def there() -> bool:
        found[:] = server.rows("chat_deliveries", task_id=uuid.UUID(task_id), **where)
        return len(found) == 1 and check(found[0])

    wait_for(there, seconds=15, what="the delivery row")
    return found[0]


def _posts(fake: SlackFake, task_id: str, channel: str = CHANNEL) -> list[dict[str, Any]]:
    return [
        c.params
        for c in fake.called("chat.postMessage")
        if c.params["channel"] == channel and task_id in json.dumps(c.params)
    ]


def _cursor(server: LiveServer) -> Any:
    return server.rows("chat_cursors", door="slack")[0]["position"]


def _read(server: LiveServer, before: Any) -> None:
    """Wait until the door has read the outbox past ``before``."""
    wait_for(lambda: _cursor(server) != before, seconds=15, what="the door to read the outbox")


def test_a_post_whose_answer_was_lost_is_one_card(
    make_settings: Any, clock: ManualClock, fake: SlackFake
) -> None:
    with _server(make_settings, clock, fake, slack_signing_secret=SIGNING_SECRET) as server:
        producer, dan = _people(server)
        fake.wait_for("auth.test")
        # The normal path reads no channel history.
        plain = _escalate(producer, "plain", assigned_group="reviewers")
        _posted(fake, plain["id"])
        _settled(server)
        assert not fake.called("conversations.history")

        # Slack posts the card but its answer is lost (a 500 that is not Slack's).
        fake.lose_answer("chat.postMessage", how="500", channel=CHANNEL)
        task = _escalate(producer, "lost", assigned_group="reviewers")
        ts, card = _posted(fake, task["id"])
        row = _row(server, task["id"], lambda r: r["attempts"] >= 1, kind="post")
        assert (row["status"], row["ts"]) == ("PENDING", None)
        assert row["attempted_at"] is not None, "the attempt was committed before the post"
        meta = card["metadata"]
        assert meta["event_type"] == "signoff_card"
        assert meta["event_payload"]["task_id"] == task["id"]
        assert str(row["id"]) in meta["event_payload"]["deliveries"].split(",")
        # Before the retry the task changes: no card is known for it yet, so nothing is
        # redrawn then.
        before = _cursor(server)
        assert dan.claim(task["id"]).status_code == 200
        _read(server, before)
        assert not [c for c in fake.called("chat.update") if c.params["ts"] == ts]

        # The retry finds the card in the channel's history, adopts it, and draws it
        # again as the task is now; it posts nothing.
        clock.advance(2)
        _drawn(fake, ts, "dan is reviewing it")
        (history,) = fake.called("conversations.history")
        looked = history.params
        assert looked["channel"] == CHANNEL
        assert looked["include_all_metadata"] in (True, "true", "1")
        assert int(looked["limit"]) <= 100
        assert float(looked["oldest"]) <= float(ts) <= float(looked["latest"])
        row = _row(server, task["id"], lambda r: r["status"] == "DONE", kind="post")
        assert row["ts"] == ts
        assert len(_posts(fake, task["id"])) == 1
        assert len(fake.in_channel(CHANNEL, task["id"])) == 1, "one card in the channel"
        (recorded,) = server.rows("chat_cards", task_id=uuid.UUID(task["id"]))
        assert (recorded["channel"], recorded["ts"]) == (CHANNEL, ts)

        # Later changes redraw that card.
        grant = dan.claim(task["id"]).json()
        decided = dan.resolve(
            task["id"],
            grant["lease_token"],
            {"decision": "APPROVED", "revision": 1, "digest": task["digest"]},
        )
        assert decided.status_code == 200, decided.text
        _drawn(fake, ts, "Approved by dan")
        _settled(server)
        assert len(_posts(fake, task["id"])) == 1
        assert len(fake.in_channel(CHANNEL, task["id"])) == 1

        # A voter's direct message whose connection dropped after Slack posted it: one
        # message in the direct-message channel.
        fake.lose_answer("chat.postMessage", how="drop", channel="DU_ALICE")
        ruled = _escalate(
            producer, "rule", assigned_group="reviewers", approval_rule={"approvals": 2}
        )
        fake.wait_for(
            "chat.postMessage",
            lambda c: c.params["channel"] == "DU_ALICE" and ruled["id"] in json.dumps(c.params),
        )
        _row(
            server,
            ruled["id"],
            lambda r: r["attempts"] >= 1 and r["attempted_at"] is not None,
            kind="dm",
            channel="alice",
        )
        clock.advance(2)
        _row(server, ruled["id"], lambda r: r["status"] == "DONE", kind="dm", channel="alice")
        _settled(server)
        assert len(_posts(fake, ruled["id"], "DU_ALICE")) == 1
        assert len(fake.in_channel("DU_ALICE", ruled["id"])) == 1
        assert [c.params["channel"] for c in fake.called("conversations.history")][1:] == [
            "DU_ALICE"
        ]
        producer.close()
        dan.close()


def test_a_post_slack_refused_is_posted_once(
    make_settings: Any, clock: ManualClock, fake: SlackFake
) -> None:
    with _server(make_settings, clock, fake, slack_signing_secret=SIGNING_SECRET) as server:
        producer, dan = _people(server)
        fake.wait_for("auth.test")
        # Slack answers the post with an error: nothing was posted, the retry posts it
        # without reading any history.
        fake.refuse("chat.postMessage", "fatal_error")
        refused = _escalate(producer, "refused", assigned_group="reviewers")
        row = _row(server, refused["id"], lambda r: r["attempts"] >= 1)
        assert (row["last_error"], row["attempted_at"]) == ("fatal_error", None)
        clock.advance(2)
        _row(server, refused["id"], lambda r: r["status"] == "DONE")
        assert len(fake.in_channel(CHANNEL, refused["id"])) == 1

        # A 429: retried no sooner than its Retry-After, then posted, no history read.
        fake.rate_limit("chat.postMessage", 1, retry_after=30)
        limited = _escalate(producer, "limited", assigned_group="reviewers")
        row = _row(server, limited["id"], lambda r: r["last_error"] == "ratelimited")
        assert row["next_attempt_at"] >= clock.now() + timedelta(seconds=30)
        assert row["attempted_at"] is None
        clock.advance(31)
        _row(server, limited["id"], lambda r: r["status"] == "DONE")
        assert len(fake.in_channel(CHANNEL, limited["id"])) == 1
        assert not fake.called("conversations.history")

        # Slack down (a 503 that is not Slack's: it may or may not have posted): the
        # retry looks first, finds nothing, and posts once.
        fake.down = True
        late = _escalate(producer, "down", assigned_group="reviewers")
        row = _row(server, late["id"], lambda r: r["attempts"] >= 1)
        assert row["attempted_at"] is not None
        assert not fake.in_channel(CHANNEL, late["id"])
        fake.down = False
        clock.advance(2)
        _row(server, late["id"], lambda r: r["status"] == "DONE")
        _settled(server)
        assert len(_posts(fake, late["id"])) == 1
        assert len(fake.in_channel(CHANNEL, late["id"])) == 1
        assert [c.params["channel"] for c in fake.called("conversations.history")] == [CHANNEL]
        producer.close()
        dan.close()


def test_a_notice_whose_answer_was_lost_is_one_message(
    make_settings: Any, clock: ManualClock, fake: SlackFake
) -> None:
    with _server(make_settings, clock, fake, slack_signing_secret=SIGNING_SECRET) as server:
        producer, dan = _people(server)
        policy = {
            "name": "nudges",
            "levels": [
                {"after_seconds": 60, "action": "remind", "notify": ["group:reviewers"]},
                {"after_seconds": 3600, "action": "expire"},
            ],
        }
        with server.admin() as admin:
            assert admin.post("/escalation-policies", json=policy).status_code == 201
        task = _escalate(producer, "nudged", policy="nudges", assigned_group="reviewers")
        _posted(fake, task["id"])
        _settled(server)
        # alice's reminder is posted to her direct messages; the answer is lost.
        fake.lose_answer("chat.postMessage", how="500", channel="DU_ALICE")
        clock.advance(60)
        assert sweep(server) == 1
        reminder = {"kind": "n:reminder", "channel": "alice"}
        _row(server, task["id"], lambda r: r["attempted_at"] is not None, **reminder)
        (sent,) = _posts(fake, task["id"], "DU_ALICE")
        assert sent["metadata"]["event_type"] == "signoff_notice"
        clock.advance(2)
        row = _row(server, task["id"], lambda r: r["status"] == "DONE", **reminder)
        (message,) = fake.in_channel("DU_ALICE", task["id"])
        assert row["ts"] == message["ts"]
        _settled(server)
        assert len(_posts(fake, task["id"], "DU_ALICE")) == 1
        assert [c.params["channel"] for c in fake.called("conversations.history")] == ["DU_ALICE"]
        producer.close()
        dan.close()
