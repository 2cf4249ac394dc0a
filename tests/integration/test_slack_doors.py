"""A decision from a Slack card leaves what the same decision through the API leaves: the
task's row, its audit trail and its outbox events, byte for byte once each deployment's
own ids are labelled (tests/doors.py::door_neutral names the one thing a door may add, the
approver's credential). On both engines, against the local fake of Slack."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from signoff.domain.clock import ManualClock
from tests.doors import (
    SUBJECT,
    Deployment,
    deployment_settings,
    door_neutral,
    door_recorded,
    twin_escalation,
)
from tests.integration.test_differential import differences
from tests.integration.test_slack import APPROVE, CHANNEL, REJECT, _value, fake
from tests.mailbox import Mailbox
from tests.slackfake import BOT_TOKEN, SIGNING_SECRET, SlackFake, block_action, view_submission
from tests.support import LiveServer, live_server

__all__ = ["fake"]  # the fixture, shared with tests/integration/test_slack.py


@contextmanager
def slack_deployment(
    database_url: str, clock: ManualClock, fake: SlackFake
) -> Iterator[tuple[LiveServer, Deployment]]:
    """A deployment with the Slack door on (against ``fake``), its people made, and alice
    linked to the Slack user ``U_ALICE`` by her confirmed e-mail."""
    with Mailbox() as mailbox:
        settings = deployment_settings(
            database_url,
            mailbox,
            slack_bot_token=BOT_TOKEN,
            slack_api_url=fake.api_url,
            slack_signing_secret=SIGNING_SECRET,
            slack_default_channel=CHANNEL,
            dispatcher_poll_seconds=0.1,
        )
        with live_server(settings, clock) as server:
            deployment = Deployment("only", server, mailbox)
            deployment.populate()
            with server.admin() as admin:
                linked = admin.patch("/users/alice", json={"email": "alice@example.org"})
                assert linked.status_code == 200, linked.text
            try:
                yield server, deployment
            finally:
                deployment.close()


def _card(fake: SlackFake, task_id: str) -> tuple[str, dict[str, Any]]:
    call = fake.wait_for("chat.postMessage", lambda c: task_id in json.dumps(c.params))[-1]
    return str(call.answer["ts"]), call.params


def test_a_slack_decision_leaves_the_row_trail_and_outbox_of_an_api_decision(
    database_url: str, clock: ManualClock, fake: SlackFake
) -> None:
    with slack_deployment(database_url, clock, fake) as (server, deployment):
        for decision, notes in (("APPROVED", None), ("REJECTED", "the amount is wrong")):
            by_api, by_slack = f"api-{decision}", f"slack-{decision}"
            for handle in (by_api, by_slack):
                body = twin_escalation(subject=SUBJECT, approval_ttl_seconds=3600)
                assert deployment.escalate(handle, body).status == 201
            ts, card = _card(fake, deployment.task_id(by_slack))
            # The same instant of the shared clock for both: times must agree too.
            assert deployment.claim("alice", by_api).status == 200
            assert deployment.resolve_api("alice", by_api, decision, notes).status == 200
            action = APPROVE if decision == "APPROVED" else REJECT
            clicked = fake.post_interaction(
                server.base_url,
                block_action("U_ALICE", CHANNEL, ts, action, _value(card)),
            )
            assert clicked.status_code == 200
            if notes is not None:
                modal = fake.wait_for("views.open")[-1].params["view"]
                sent = fake.post_interaction(
                    server.base_url, view_submission("U_ALICE", modal, notes)
                )
                assert sent.status_code == 200
            # Each card names the door its decision came through, when known.
            said = {"APPROVED": "Approved by alice", "REJECTED": "Rejected by alice"}
            fake.wait_for(
                "chat.update",
                lambda c, ts=ts, said=said[decision]: (
                    c.params["ts"] == ts and f"{said} in Slack" in json.dumps(c.params)
                ),
            )
            api_ts, _ = _card(fake, deployment.task_id(by_api))
            fake.wait_for(
                "chat.update",
                lambda c, ts=api_ts, said=said[decision]: (
                    c.params["ts"] == ts and f"{said} through the API" in json.dumps(c.params)
                ),
            )
            recorded = [door_recorded(deployment.snapshot(h)) for h in (by_api, by_slack)]
            assert recorded == ["api", "slack"], recorded
            labels = deployment.twin_labels(by_api, by_slack)
            api_shot, slack_shot = (
                door_neutral(deployment.snapshot(handle), labels) for handle in (by_api, by_slack)
            )
            assert slack_shot.row["decision"] == decision
            assert slack_shot.row["operator_id"] == "alice"
            assert slack_shot.row["notes"] == notes
            actions = [event["action"] for event in slack_shot.trail]
            assert actions[-2:] == ["claim", "resolve"], actions
            assert slack_shot.outbox[-1]["event_type"] == "task.resolved"
            for part in ("row", "trail", "outbox"):
                diff = differences(getattr(api_shot, part), getattr(slack_shot, part))
                assert not diff, f"{decision}: the {part} differs:\n" + "\n".join(diff)
            # The Slack user behind the person is in the chat ledger.
            (action_row,) = server.rows("chat_actions", decision=decision)
            assert (action_row["chat_user"], action_row["principal_id"]) == (
                "U_ALICE",
                "alice",
            )
            clock.advance(1)
