"""Deadline and escalation-level notices in Slack, as direct messages, following each
person's notification choice as e-mail does (each event, a digest, none). On both engines,
against the local fake of Slack (tests/slackfake.py); no SMTP server is configured, so
Slack is the only way these notices go."""

from __future__ import annotations

import time
import uuid
from typing import Any

from signoff.domain.clock import ManualClock
from tests.integration.test_slack import _escalate, _people, _server, _task, fake
from tests.integration.test_waiting import sweep
from tests.slackfake import SIGNING_SECRET, SlackFake

__all__ = ["fake"]  # the fixture, shared with tests/integration/test_slack.py

REMINDER, REASSIGNED, EXPIRED = (
    "Reminder: review still waiting",
    "Reassigned to you: review needed",
    "Expired without a decision",
)


def _notices(fake: SlackFake, user: str) -> list[str]:
    """The text of each direct message (not a card) sent to ``user``."""
    return [
        str(c.params["text"])
        for c in fake.called("chat.postMessage")
        if c.params["channel"] == f"D{user}" and "blocks" not in c.params
    ]


def _until(check: Any) -> None:
    deadline = time.monotonic() + 15
    while not check():
        assert time.monotonic() < deadline, "the notice did not come"
        time.sleep(0.05)


def test_level_notices_go_to_slack_as_each_person_chose(
    make_settings: Any, clock: ManualClock, fake: SlackFake
) -> None:
    fake.add_member("U_FRAN", "fran@example.org")
    with _server(make_settings, clock, fake, slack_signing_secret=SIGNING_SECRET) as server:
        producer, dan = _people(server)
        assert server.settings.smtp_host is None
        policy = {
            "name": "nudges",
            "levels": [
                {"after_seconds": 60, "action": "remind", "notify": ["group:reviewers"]},
                {"after_seconds": 60, "action": "expire", "notify": ["group:reviewers"]},
            ],
        }
        with server.admin() as admin:
            assert admin.post("/escalation-policies", json=policy).status_code == 201
            # carol gathers a digest every hour; eve hears of nothing; alice of each.
            assert admin.patch("/users/carol", json={"notify": "1h"}).status_code == 200
            assert admin.patch("/users/eve", json={"notify": "none"}).status_code == 200
            fran = {
                "principal_id": "fran",
                "role": "reviewer",
                "groups": ["finance"],
                "email": "fran@example.org",
            }
            assert admin.post("/users", json=fran).status_code == 201
        supervisor = server.new_client("supervisor", "sue")
        task = _escalate(producer, "nudged", policy="nudges", assigned_group="reviewers")
        title = task["headline"]["title"] if task.get("headline") else None

        # The first level reminds the group: alice at once, by direct message.
        clock.advance(60)
        assert sweep(server) == 1
        _until(lambda: _notices(fake, "U_ALICE"))
        (reminder,) = _notices(fake, "U_ALICE")
        assert REMINDER in reminder
        assert f"/console/tasks/{task['id']}|Open the task page>" in reminder
        if title:
            assert title[:20] in reminder

        # A supervisor hands it to finance: fran is told; the reviewers are not.
        moved = supervisor.post(f"/tasks/{task['id']}/reassign", json={"group": "finance"})
        assert moved.status_code == 200, moved.text
        _until(lambda: _notices(fake, "U_FRAN"))
        assert REASSIGNED in _notices(fake, "U_FRAN")[0]

        # The last level expires it and tells the reviewers again.
        clock.advance(60)
        assert sweep(server) == 1
        assert _task(producer, task["id"])["status"] == "EXPIRED"
        _until(lambda: len(_notices(fake, "U_ALICE")) == 2)
        assert EXPIRED in _notices(fake, "U_ALICE")[1]
        # carol's digest is not due yet; eve chose none.
        assert not _notices(fake, "U_CAROL")
        assert not _notices(fake, "U_EVE")

        # At the end of her hour carol gets one message with both notices.
        clock.advance(3600)
        _until(lambda: _notices(fake, "U_CAROL"))
        (digest,) = _notices(fake, "U_CAROL")
        assert "2 updates" in digest
        assert REMINDER in digest
        assert EXPIRED in digest
        assert not _notices(fake, "U_EVE")
        assert len(_notices(fake, "U_ALICE")) == 2, "nothing is sent twice"
        # One row per person and notice (the new task's request is its card, not a notice);
        # each sent, none pending.
        rows = server.rows("chat_deliveries", task_id=uuid.UUID(task["id"]))
        notices = sorted(
            (r["kind"], r["channel"], r["status"]) for r in rows if r["kind"][:2] == "n:"
        )
        assert {kind for kind, _, _ in notices} == {"n:reminder", "n:reassigned", "n:expired"}
        assert ("n:reassigned", "fran", "DONE") in notices
        assert not [n for n in notices if n[1] in ("eve", "bot")], "none chosen; the producer"
        assert all(status == "DONE" for _, _, status in notices), notices
        producer.close()
        dan.close()
        supervisor.close()
