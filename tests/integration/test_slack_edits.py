"""Edit, then approve, in Slack, on both engines, against the local fake of Slack: the
card's "Edit and approve" button (only on a task with editable fields), its modal (one
prefilled input per field, its kind said), the edit decided through the core as at the
API (the same row, trail and outbox but the door), and every refusal: a value of the
wrong kind or a field not editable (the modal's field errors), a stale card, a person
who may not decide — nothing written by any of them."""

from __future__ import annotations

import json
import uuid
from typing import Any

from signoff.domain.clock import ManualClock
from signoff.domain.digests import json_digest
from tests.doors import door_neutral, twin_escalation
from tests.integration.test_differential import differences
from tests.integration.test_slack import (
    APPROVE,
    CHANNEL,
    _buttons,
    _drawn,
    _people,
    _posted,
    _server,
    _task,
    _told,
    _value,
    fake,
)
from tests.integration.test_slack_doors import _card, slack_deployment
from tests.slackfake import SIGNING_SECRET, SlackFake, block_action, view_submission
from tests.support import Client, LiveServer, escalation

__all__ = ["fake"]  # the fixture, shared with tests/integration/test_slack.py

EDIT = "signoff_decide:APPROVED_WITH_EDITS"
SUBJECT = {"title": "Pay ACME", "amount": 100, "memo": "for March", "actions": [{"id": "pay"}]}
EDITABLE = ["/amount", "/memo"]


def _escalate(producer: Client, handle: str, **extra: Any) -> dict[str, Any]:
    body = escalation(f"{handle}-{uuid.uuid4().hex[:6]}", **{"subject": SUBJECT, **extra})
    made = producer.escalate(body)
    assert made.status_code == 201, made.text
    return dict(made.json())


def _edit_button(card: dict[str, Any]) -> dict[str, Any] | None:
    elements = [e for block in _buttons(card) for e in block["elements"]]
    return next((e for e in elements if e["action_id"] == EDIT), None)


def _open(server: LiveServer, fake: SlackFake, user: str, ts: str, value: str) -> dict[str, Any]:
    """``user`` clicks Edit and approve on the card ``ts``: the modal Slack opened."""
    before = len(fake.called("views.open"))
    clicked = fake.post_interaction(server.base_url, block_action(user, CHANNEL, ts, EDIT, value))
    assert clicked.status_code == 200
    fake.wait_for("views.open", count=before + 1)
    return fake.opened()[-1]


def _submit(
    server: LiveServer, fake: SlackFake, user: str, modal: dict[str, Any], **edits: Any
) -> Any:
    """The modal sent with ``edits`` (block id: value); returns the door's answer."""
    notes = edits.pop("notes", None)
    payload = view_submission(user, modal, notes, edits)
    sent = fake.post_interaction(server.base_url, payload)
    assert sent.status_code == 200, sent.text
    return sent.json() if sent.content else None


def _unchanged(server: LiveServer, producer: Any, task: dict[str, Any], events: int) -> None:
    after = _task(producer, task["id"])
    assert (after["status"], after["current_revision"]) == ("PENDING_REVIEW", 1)
    assert len(producer.get(f"/tasks/{task['id']}/events").json()["items"]) == events
    assert server.count("subject_revisions", task_id=uuid.UUID(task["id"])) == 1


def test_edit_and_approve_leaves_the_row_trail_and_outbox_of_an_api_edit(
    database_url: str, clock: ManualClock, fake: SlackFake
) -> None:
    edited = SUBJECT | {"amount": 90}
    with slack_deployment(database_url, clock, fake) as (server, deployment):
        for handle in ("api", "slack"):
            body = twin_escalation(subject=SUBJECT, editable=EDITABLE, approval_ttl_seconds=3600)
            assert deployment.escalate(handle, body).status == 201
        ts, card = _card(fake, deployment.task_id("slack"))
        # The same instant of the shared clock for both: times must agree too.
        assert deployment.claim("alice", "api").status == 200
        by_api = deployment.api["alice"].resolve(
            deployment.task_id("api"),
            deployment.leases[("alice", "api")],
            {
                "decision": "APPROVED_WITH_EDITS",
                "operator_id": "alice",
                "revision": 1,
                "digest": json_digest(SUBJECT),
                "subject": edited,
                "notes": "10 less, as agreed",
            },
        )
        assert by_api.status_code == 200, by_api.text
        modal = _open(server, fake, "U_ALICE", ts, _value(card))
        answer = _submit(
            server,
            fake,
            "U_ALICE",
            modal,
            notes="10 less, as agreed",
            **{"edit:/amount": "90"},
        )
        assert not answer, answer  # the modal closes
        fake.wait_for(
            "chat.update",
            lambda c: c.params["ts"] == ts and "alice in Slack" in json.dumps(c.params),
        )
        labels = deployment.twin_labels("api", "slack")
        shots = [deployment.snapshot(handle) for handle in ("api", "slack")]
        doors = [
            [e["details"].get("door") for e in shot.trail if e["action"] == "resolve"]
            for shot in shots
        ]
        assert doors == [["api"], ["slack"]], doors
        api_shot, slack_shot = (door_neutral(shot, labels) for shot in shots)
        assert slack_shot.row["decision"] == "APPROVED_WITH_EDITS"
        assert slack_shot.row["operator_id"] == "alice"
        assert slack_shot.row["current_revision"] == 2
        assert slack_shot.row["approved_digest"] == json_digest(edited)
        for part in ("row", "trail", "outbox"):
            diff = differences(getattr(api_shot, part), getattr(slack_shot, part))
            assert not diff, f"the {part} differs:\n" + "\n".join(diff)
        revision = deployment.producer.get(
            f"/tasks/{deployment.task_id('slack')}/revisions/2"
        ).json()
        assert (revision["subject"], revision["created_by"]) == (edited, "alice")
        (action,) = server.rows("chat_actions", decision="APPROVED_WITH_EDITS")
        assert (action["chat_user"], action["principal_id"], action["outcome"]) == (
            "U_ALICE",
            "alice",
            "recorded",
        )


def test_the_edit_modal_and_its_refusals(
    make_settings: Any, clock: ManualClock, fake: SlackFake
) -> None:
    fake.add_member("U_OLGA", "olga@example.org")
    with _server(make_settings, clock, fake, slack_signing_secret=SIGNING_SECRET) as server:
        producer, dan = _people(server)
        with server.admin() as admin:  # a reviewer of another group
            made = admin.post(
                "/users",
                json={
                    "principal_id": "olga",
                    "role": "reviewer",
                    "groups": ["auditors"],
                    "email": "olga@example.org",
                },
            )
            assert made.status_code == 201, made.text

        # A card of a task without editable fields has no such button.
        plain = _escalate(producer, "plain", assigned_group="reviewers")
        _, plain_card = _posted(fake, plain["id"])
        assert _edit_button(plain_card) is None
        labels = [e["text"]["text"] for e in _buttons(plain_card)[0]["elements"]]
        assert labels == ["Approve", "Reject", "Request revision"]

        # With editable fields: the button, bound like the others, without a confirm.
        task = _escalate(
            producer, "edit", assigned_group="reviewers", subject=SUBJECT, editable=EDITABLE
        )
        ts, card = _posted(fake, task["id"])
        button = _edit_button(card)
        assert button is not None
        assert button["text"]["text"] == "Edit and approve"
        assert "confirm" not in button
        first = _value(card)
        assert f".{task['id']}.1.{task['digest']}." in first

        # The modal: one input per editable field, labelled, prefilled, its kind said.
        modal = _open(server, fake, "U_ALICE", ts, first)
        assert fake.called("views.open")[-1].params["trigger_id"] == "T1"
        assert json.loads(modal["private_metadata"])["value"] == first
        inputs = {b["block_id"]: b for b in modal["blocks"] if b["type"] == "input"}
        assert list(inputs) == ["edit:/amount", "edit:/memo", "notes"]
        amount, memo = inputs["edit:/amount"], inputs["edit:/memo"]
        assert amount["label"]["text"] == "/amount"
        assert amount["element"]["initial_value"] == "100"
        assert "a number" in amount["hint"]["text"]
        assert memo["element"]["initial_value"] == "for March"
        assert "text" in memo["hint"]["text"]
        events = len(producer.get(f"/tasks/{task['id']}/events").json()["items"])

        # A value of the wrong kind: the modal's field error; nothing written.
        answer = _submit(server, fake, "U_ALICE", modal, **{"edit:/amount": "a hundred"})
        assert answer["response_action"] == "errors"
        assert answer["errors"] == {"edit:/amount": "must stay a number"}
        # A field the producer did not declare editable (a forged form): the same.
        answer = _submit(server, fake, "U_ALICE", modal, **{"edit:/title": "Pay ACME Ltd"})
        assert answer["response_action"] == "errors"
        assert answer["errors"] == {"edit:/title": "is not editable"}
        # Sent as it was prefilled: the edit changes nothing.
        answer = _submit(server, fake, "U_ALICE", modal)
        assert answer["response_action"] == "errors"
        assert "changes nothing" in answer["errors"]["edit:/amount"]
        _unchanged(server, producer, task, events)

        # A person who may not decide it: another group's reviewer, the producer's
        # principal has no Slack account, an unlinked Slack user — refused, nothing opens.
        opened = len(fake.called("views.open"))
        clicked = block_action("U_BOB", CHANNEL, ts, EDIT, first)
        assert fake.post_interaction(server.base_url, clicked).status_code == 200
        _told(fake, "U_BOB", "no Signoff account has the e-mail bob@example.org")
        assert len(fake.called("views.open")) == opened
        clicked = block_action("U_OLGA", CHANNEL, ts, EDIT, first)
        assert fake.post_interaction(server.base_url, clicked).status_code == 200
        _told(fake, "U_OLGA", f"task {task['id']} does not exist")
        assert len(fake.called("views.open")) == opened
        # ... and what is sent in her name is decided by the core's rules all the same.
        assert not _submit(server, fake, "U_OLGA", modal, **{"edit:/amount": "90"})
        told = fake.wait_for("chat.postEphemeral", lambda c: c.params["user"] == "U_OLGA", 2)
        assert told[1].params["text"].startswith("Nothing was decided: task "), told[1].params
        _unchanged(server, producer, task, events)
        assert not [
            e
            for e in producer.get(f"/tasks/{task['id']}/events").json()["items"]
            if e["action"] in ("claim", "release")
        ]

        # Slack refusing to open the form (the click's trigger expired): said privately.
        fake.refuse("views.open", "expired_trigger_id")
        clicked = block_action("U_ALICE", CHANNEL, ts, EDIT, first)
        assert fake.post_interaction(server.base_url, clicked).status_code == 200
        _told(fake, "U_ALICE", "Slack did not open the form")
        _unchanged(server, producer, task, events)

        # A new revision from the producer: a click on the old card is refused before any
        # modal opens (said privately, the card drawn again) and the modal opened before it
        # is refused too — closed, said privately.
        revised = producer.put(
            f"/tasks/{task['id']}/subject",
            headers={"If-Match": '"1"'},
            json={"subject": SUBJECT | {"memo": "for April"}},
        )
        assert revised.status_code == 200, revised.text
        second = _value(_drawn(fake, ts, "Changed since revision 1: memo"))
        opened = len(fake.called("views.open"))
        clicked = block_action("U_SAM", CHANNEL, ts, EDIT, first)
        assert fake.post_interaction(server.base_url, clicked).status_code == 200
        _told(fake, "U_SAM", "showed revision 1")
        assert len(fake.called("views.open")) == opened
        assert not _submit(server, fake, "U_ALICE", modal, **{"edit:/amount": "90"})
        _told(fake, "U_ALICE", "showed revision 1")
        after = _task(producer, task["id"])
        assert (after["status"], after["current_revision"]) == ("PENDING_REVIEW", 2)

        # On the current card the edit is decided, the card says so.
        modal = _open(server, fake, "U_ALICE", ts, second)
        assert json.loads(modal["private_metadata"])["value"] == second
        assert not _submit(server, fake, "U_ALICE", modal, **{"edit:/amount": "90"})
        decided = _drawn(fake, ts, "by alice in Slack")
        assert not _buttons(decided)
        after = _task(producer, task["id"])
        assert (after["decision"], after["current_revision"], after["approved_revision"]) == (
            "APPROVED_WITH_EDITS",
            3,
            3,
        )
        producer.close()
        dan.close()


def test_an_edit_in_slack_on_a_voted_task_is_the_first_vote_on_it(
    make_settings: Any, clock: ManualClock, fake: SlackFake
) -> None:
    with _server(make_settings, clock, fake, slack_signing_secret=SIGNING_SECRET) as server:
        producer, dan = _people(server)
        task = _escalate(
            producer,
            "voted",
            assigned_group="reviewers",
            editable=EDITABLE,
            approval_rule={"approvals": 2},
        )
        ts, card = _posted(fake, task["id"])
        assert _edit_button(card) is not None, "offered on a task decided by votes too"
        by_api = dan.post(
            f"/tasks/{task['id']}/votes",
            json={"decision": "APPROVED", "revision": 1, "digest": task["digest"]},
        )
        assert by_api.status_code == 200, by_api.text
        # dan's vote redraws the card: its buttons stay bound to revision 1.
        current = _value(_drawn(fake, ts, "dan: Approve"))
        modal = _open(server, fake, "U_ALICE", ts, current)
        assert not _submit(server, fake, "U_ALICE", modal, **{"edit:/memo": "for March, net"})
        _told(fake, "U_ALICE", "recorded and counts")
        after = _task(producer, task["id"])
        assert (after["status"], after["current_revision"]) == ("PENDING_REVIEW", 2)
        assert [(v["voter"], v["revision"], v["door"]) for v in after["votes"]] == [
            ("alice", 2, "slack")
        ], "the edit voided dan's vote and is the first on the new revision"
        edited = _drawn(fake, ts, "alice: Approve (in Slack)")
        clicked = block_action("U_SAM", CHANNEL, ts, APPROVE, _value(edited))
        assert fake.post_interaction(server.base_url, clicked).status_code == 200
        _drawn(fake, ts, "sam: Approve (in Slack)")
        decided = _task(producer, task["id"])
        assert (decided["status"], decided["decision"]) == ("RESOLVED", "APPROVED_WITH_EDITS")
        producer.close()
        dan.close()
