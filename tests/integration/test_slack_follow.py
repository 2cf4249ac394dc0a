"""Slack cards routed by escalation policy, and drawn again when the task changes without
anyone clicking: a lease ended by a supervisor, a hand-over to another group, an expiry by
the sweeper. On both engines, against the local fake of Slack (tests/slackfake.py)."""

from __future__ import annotations

import json
from typing import Any

from signoff.domain.clock import ManualClock
from tests.integration.test_slack import (
    APPROVE,
    _buttons,
    _drawn,
    _escalate,
    _people,
    _posted,
    _server,
    _settled,
    _task,
    _told,
    _value,
    fake,
)
from tests.integration.test_waiting import sweep
from tests.slackfake import SIGNING_SECRET, SlackFake, block_action

__all__ = ["fake"]  # the fixture, shared with tests/integration/test_slack.py


def _updates(fake: SlackFake, ts: str) -> list[dict[str, Any]]:
    return [c.params for c in fake.called("chat.update") if c.params["ts"] == ts]


def test_policy_routing_and_redraws_after_release_hand_over_and_expiry(
    make_settings: Any, clock: ManualClock, fake: SlackFake
) -> None:
    routes = '{"group:finance": "C_FINANCE", "policy:payments": "C_PAY"}'
    with _server(
        make_settings, clock, fake, slack_signing_secret=SIGNING_SECRET, slack_channels=routes
    ) as server:
        producer, dan = _people(server)
        supervisor = server.new_client("supervisor", "sue")
        policy = {"name": "payments", "levels": [{"after_seconds": 3600, "action": "expire"}]}
        with server.admin() as admin:
            made = admin.post("/escalation-policies", json=policy)
            assert made.status_code == 201, made.text
            fran = {"role": "reviewer", "principal_id": "fran", "groups": ["finance"]}
            assert admin.post("/api-keys", json=fran).status_code == 201

        # Routing: the policy's channel for a task of that policy; its group, when it has
        # a routed one, goes first; neither: the default channel.
        paid = _escalate(producer, "policy", policy="payments")
        paid_ts, paid_card = _posted(fake, paid["id"])
        assert paid_card["channel"] == "C_PAY"
        both = _escalate(producer, "both", policy="payments", assigned_group="finance")
        assert _posted(fake, both["id"])[1]["channel"] == "C_FINANCE"
        plain = _escalate(producer, "plain", assigned_group="reviewers")
        ts, card = _posted(fake, plain["id"])
        assert card["channel"] == "C_REVIEW"

        # dan claims it through the API; a supervisor ends the lease: the card no longer
        # names a reviewer and still has its buttons.
        assert dan.claim(plain["id"]).status_code == 200
        _drawn(fake, ts, "dan is reviewing it")
        _settled(server)
        released = supervisor.post(f"/tasks/{plain['id']}/force-release", json={})
        assert released.status_code == 200, released.text
        (after_release,) = fake.wait_for(
            "chat.update",
            lambda c: c.params["ts"] == ts and "is reviewing it" not in json.dumps(c.params),
        )
        after_release = after_release.params
        assert _buttons(after_release)

        # Handed over to finance: the card is drawn again; alice (not in finance) clicking
        # the card she sees is refused privately and the task is untouched.
        drawn_before = len(_updates(fake, ts))
        moved = supervisor.post(f"/tasks/{plain['id']}/reassign", json={"group": "finance"})
        assert moved.status_code == 200, moved.text
        fake.wait_for("chat.update", lambda c: c.params["ts"] == ts, count=drawn_before + 1)
        payload = block_action("U_ALICE", "C_REVIEW", ts, APPROVE, _value(card))
        assert fake.post_interaction(server.base_url, payload).status_code == 200
        assert "Nothing was decided" in _told(fake, "U_ALICE", "Nothing was decided")
        after = _task(producer, plain["id"])
        assert (after["status"], after["assigned_group"], after["decision"]) == (
            "PENDING_REVIEW",
            "finance",
            None,
        )

        # The policy's last level expires the task: its card says so and loses its buttons.
        clock.advance(3600)
        assert sweep(server) >= 1
        assert _task(producer, paid["id"])["status"] == "EXPIRED"
        expired = _drawn(fake, paid_ts, "Expired without a decision")
        assert not _buttons(expired)
        producer.close()
        dan.close()
        supervisor.close()
