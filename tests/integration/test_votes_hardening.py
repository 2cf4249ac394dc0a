"""Approval by several people, hardened, on both engines: a retry never becomes a second
vote, votes never make the current revision look stale, the answer says what a vote did,
rules nobody can meet are refused, stages count from 1 and revisions are JSON integers,
vetoes come from the people a stage names, and a vote's time is read under the task's lock."""

from __future__ import annotations

import asyncio
import copy
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest

from signoff.client import Signoff
from signoff.domain.clock import ManualClock
from signoff.domain.states import Decision, Role
from signoff.domain.tasks import Principal
from signoff.services import revisions
from signoff.services import votes as vote_service
from signoff.services.context import ServiceContext
from signoff.settings import Settings
from signoff.store import tasks as task_store
from signoff.store.runtime.database import Database, create_engine
from tests.integration.test_votes import SUBJECT, ask, cast, events, person
from tests.support import Client, LiveServer, escalation, live_server

STAGES = {
    "stages": [
        {"name": "finance", "groups": {"finance": 1}},
        {"name": "legal", "groups": {"legal": 1}},
    ]
}


@pytest.fixture
def producer(server: LiveServer):  # type: ignore[no-untyped-def]
    with server.new_client("producer", "bot") as client:
        yield client


def vote_body(voter: Client, task: dict[str, Any], **extra: Any) -> dict[str, Any]:
    current = voter.get(f"/tasks/{task['id']}").json()
    body = {"decision": "APPROVED", "revision": current["current_revision"]}
    return body | {"digest": current["digest"]} | extra


# --- A retry never becomes a second vote -----------------------------------------------


def test_a_retried_vote_is_never_counted_at_the_next_stage(
    server: LiveServer, producer: Client
) -> None:
    bo = person(server, "bo", ["finance", "legal"])
    person(server, "lena", ["legal"])
    task = ask(producer, STAGES)
    body = vote_body(bo, task)
    first = bo.post(f"/tasks/{task['id']}/votes", json=body)
    assert first.status_code == 200, first.text
    assert first.json()["approval_progress"]["stage"] == 2
    # The same request again (its answer was lost): a retry, never a legal vote.
    again = bo.post(f"/tasks/{task['id']}/votes", json=body)
    assert again.status_code == 200, again.text
    assert again.json()["status"] == "PENDING_REVIEW"
    assert again.json()["vote"] | {"text": ""} == {
        "recorded": False,
        "counted": False,
        "reason": "retry",
        "stage": 1,
        "text": "",
    }
    assert len(again.json()["votes"]) == 1
    assert events(server, task["id"], "task.vote_cast") == 1
    # Another vote without naming the stage is refused, and says which stage to name.
    other = bo.post(f"/tasks/{task['id']}/votes", json=body | {"notes": "as legal"})
    assert (other.status_code, other.json()["error_code"]) == (409, "ERR_ALREADY_VOTED")
    assert other.json()["stage"] == 2
    # Naming a stage that is not being voted on is refused.
    wrong = bo.post(f"/tasks/{task['id']}/votes", json=body | {"stage": 1, "notes": "x"})
    assert (wrong.status_code, wrong.json()["error_code"]) == (409, "ERR_STAGE_NOT_OPEN")
    assert wrong.json()["stage"] == 2
    # Said outright, the vote at the legal stage counts; asked again, it is a retry too.
    legal = bo.post(f"/tasks/{task['id']}/votes", json=body | {"stage": 2})
    assert legal.status_code == 200, legal.text
    assert (legal.json()["status"], legal.json()["decision"]) == ("RESOLVED", "APPROVED")
    assert (legal.json()["vote"]["counted"], legal.json()["vote"]["stage"]) == (True, 2)
    repeat = bo.post(f"/tasks/{task['id']}/votes", json=body | {"stage": 2})
    assert (repeat.status_code, repeat.json()["vote"]["reason"]) == (200, "retry")
    assert events(server, task["id"], "task.resolved") == 1


def test_the_sdk_names_the_stage(server: LiveServer, producer: Client) -> None:
    made = person(server, "bo", ["finance", "legal"])
    task = ask(producer, STAGES)
    assert made.key is not None
    with Signoff(server.base_url, made.key) as sdk:
        seen = sdk.get_task(task["id"])
        first = sdk.vote(seen, decision="APPROVED")
        assert first.vote is not None
        assert first.vote.counted
        retry = sdk.vote(seen, decision="APPROVED")
        assert retry.vote is not None
        assert (retry.vote.recorded, retry.status) == (False, "PENDING_REVIEW")
        second = sdk.vote(seen, decision="APPROVED", stage=2)
        assert second.vote is not None
        assert second.vote.stage == 2
        assert second.decision == "APPROVED"


# --- Votes do not make the current revision look stale ---------------------------------


class VoteOnFirstRead(ManualClock):
    """A clock that, the first time it is read while armed, lets a vote through the live
    server happen: the revision being written read the task before that moment."""

    def __init__(self, start: datetime) -> None:
        super().__init__(start)
        self.armed: Any = None

    def now(self) -> datetime:
        hook, self.armed = self.armed, None
        if hook is not None:
            hook()
        return super().now()


def test_a_vote_between_the_read_and_the_write_does_not_make_if_match_stale(
    make_settings, clock: ManualClock
) -> None:
    settings: Settings = make_settings()
    hooked = VoteOnFirstRead(clock.now())
    with live_server(settings, clock) as server, server.new_client("producer", "bot") as bot:
        alice, bob = person(server, "alice"), person(server, "bob")
        task = ask(bot, {"approvals": 2}, material_paths=["/amount", "/actions"])
        hooked.armed = lambda: cast(alice, task)  # a vote lands after the revise's read
        producer = Principal(uuid.uuid4(), "bot", Role.PRODUCER)

        async def revise() -> Any:
            database = Database(create_engine(settings))
            context = ServiceContext(database=database, settings=settings, clock=hooked)
            try:
                return await revisions.revise_subject(
                    context,
                    producer,
                    task["id"],
                    if_match='"1"',
                    body={"subject": copy.deepcopy(SUBJECT) | {"note": "Q3"}},
                )
            finally:
                await database.dispose()

        revised = asyncio.run(revise())
        assert hooked.armed is None  # the vote was cast while the revision was written
        assert revised.current_revision == 2
        # The vote (on a non-material path's change) stands for the new revision.
        after = bob.get(f"/tasks/{task['id']}").json()
        assert [(v["voter"], v["revision"]) for v in after["votes"]] == [("alice", 2)]
        done = cast(bob, task)
        assert (done.json()["status"], done.json()["approved_revision"]) == ("RESOLVED", 2)


# --- The answer says what a vote did ---------------------------------------------------


def test_the_answer_says_whether_a_vote_was_recorded_and_counted(
    server: LiveServer, producer: Client
) -> None:
    fiona, fred = person(server, "fiona", ["finance"]), person(server, "fred", ["finance"])
    lena = person(server, "lena", ["legal"])
    grouped = ask(producer, {"groups": {"finance": 1, "legal": 1}})
    first = cast(fiona, grouped).json()["vote"]
    assert (first["recorded"], first["counted"], first["reason"]) == (True, True, "counted")
    full = cast(fred, grouped).json()["vote"]
    assert (full["recorded"], full["counted"], full["reason"]) == (True, False, "no_place")
    assert "does not count" in full["text"]
    assert cast(lena, grouped).json()["vote"]["counted"] is True
    # Beyond the free places: two approvals, one of them finance's.
    oscar, olga = person(server, "oscar"), person(server, "olga")
    free = ask(producer, {"approvals": 2, "groups": {"finance": 1}})
    assert cast(oscar, free).json()["vote"]["reason"] == "counted"
    beyond = cast(olga, free).json()
    assert (beyond["vote"]["counted"], beyond["approval_progress"]["approvals"]) == (False, 1)
    # An excluded repeat is a retry: nothing recorded.
    staged = ask(producer, STAGES | {"exclude": ["earlier_stages"]})
    bo = person(server, "bo", ["finance", "legal"])
    assert cast(bo, staged).json()["vote"]["counted"] is True
    repeat = cast(bo, staged).json()["vote"]
    assert (repeat["recorded"], repeat["reason"]) == (False, "retry")
    assert events(server, staged["id"], "task.vote_cast") == 1
    # Without a veto a rejection counts as one vote against.
    against = ask(producer, {"approvals": 2, "veto": False})
    no = cast(oscar, against, "REJECTED", notes="not yet").json()["vote"]
    assert (no["counted"], no["reason"]) == (True, "against")


# --- Rules nobody can meet --------------------------------------------------------------


def test_a_rule_its_groups_cannot_meet_is_refused_at_escalation_and_at_put(
    server: LiveServer, producer: Client
) -> None:
    person(server, "fiona", ["finance"])
    person(server, "alice")
    nobody = producer.escalate(escalation(approval_rule={"groups": {"nobody": 3}}))
    assert nobody.status_code == 422, nobody.text
    assert nobody.json()["error_code"] == "ERR_UNMEETABLE_APPROVAL_RULE"
    assert [e["field"] for e in nobody.json()["errors"]] == ["approval_rule.groups.nobody"]
    too_many = producer.escalate(escalation(approval_rule={"approvals": 3}))
    assert too_many.json()["error_code"] == "ERR_UNMEETABLE_APPROVAL_RULE"
    assert [e["field"] for e in too_many.json()["errors"]] == ["approval_rule.approvals"]
    staged = producer.escalate(escalation(approval_rule=STAGES))
    assert [e["field"] for e in staged.json()["errors"]] == ["approval_rule.stages[1].groups.legal"]
    with server.admin() as admin:
        put = admin.put("/approval-rules/legal-too", json=STAGES)
        assert (put.status_code, put.json()["error_code"]) == (422, "ERR_UNMEETABLE_APPROVAL_RULE")
        assert [e["field"] for e in put.json()["errors"]] == ["(root).stages[1].groups.legal"]
        assert admin.get("/approval-rules").json()["items"] == []
        # The producer's principal never votes: its reviewer key makes the saved rule
        # possible, but not the producer's own escalation.
        person(server, "bot", ["legal"])
        assert admin.put("/approval-rules/legal-too", json=STAGES).status_code == 201
    mine = producer.escalate(escalation(approval_rule="legal-too"))
    assert (mine.status_code, mine.json()["error_code"]) == (422, "ERR_UNMEETABLE_APPROVAL_RULE")
    assert [e["field"] for e in mine.json()["errors"]] == ["approval_rule.stages[1].groups.legal"]
    assert server.count("review_tasks") == 0
    person(server, "lena", ["legal"])
    assert producer.escalate(escalation(approval_rule="legal-too")).status_code == 201


# --- Stage numbers and strict revisions -------------------------------------------------


def test_stages_count_from_one_everywhere(server: LiveServer, producer: Client) -> None:
    bo = person(server, "bo", ["finance", "legal"])
    task = ask(producer, STAGES)
    voted = cast(bo, task).json()
    assert voted["votes"][0]["stage"] == 1
    assert voted["approval_progress"]["stage"] == 2
    assert voted["vote"]["stage"] == 1
    legal = bo.post(f"/tasks/{task['id']}/votes", json=vote_body(bo, task, stage=2)).json()
    assert [v["stage"] for v in legal["votes"]] == [1, 2]


@pytest.mark.parametrize(
    ("field", "value"),
    [("revision", "1"), ("revision", True), ("revision", 1.0), ("stage", "1"), ("stage", 0)],
)
def test_a_vote_takes_json_integers_only(
    server: LiveServer, producer: Client, field: str, value: Any
) -> None:
    alice = person(server, "alice")
    task = ask(producer, {"approvals": 1})
    answer = alice.post(f"/tasks/{task['id']}/votes", json=vote_body(alice, task) | {field: value})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error_code"] == "ERR_VALIDATION"
    assert [e["field"] for e in answer.json()["errors"]] == [field]
    assert server.count("task_votes") == 0


# --- Vetoes come from the people a stage names ------------------------------------------


def test_only_the_stage_groups_can_veto(server: LiveServer, producer: Client) -> None:
    oscar, lena = person(server, "oscar"), person(server, "lena", ["legal"])
    person(server, "olga")
    task = ask(producer, {"approvals": 2, "groups": {"legal": 1}})
    outside = cast(oscar, task, "REJECTED", notes="I do not like it").json()
    assert outside["status"] == "PENDING_REVIEW"
    assert (outside["vote"]["recorded"], outside["vote"]["counted"]) == (True, False)
    assert outside["vote"]["reason"] == "not_a_veto"
    assert outside["approval_progress"]["against"] == 1
    veto = cast(lena, task, "REJECTED", notes="the contract says otherwise").json()
    assert (veto["status"], veto["decision"], veto["operator_id"]) == (
        "RESOLVED",
        "REJECTED",
        "lena",
    )
    assert veto["vote"]["reason"] == "veto"
    # A stage that names no group: anyone who may vote may veto.
    anyone = ask(producer, {"approvals": 2})
    assert cast(oscar, anyone, "REJECTED", notes="no").json()["decision"] == "REJECTED"


# --- A vote's time is read under the lock ----------------------------------------------


def test_a_vote_is_timestamped_when_it_holds_the_task(make_settings, clock: ManualClock) -> None:
    settings: Settings = make_settings(approval_ttl_seconds=600)
    with live_server(settings, clock) as server, server.new_client("producer", "bot") as bot:
        person(server, "alice")
        task = ask(bot, {"approvals": 1})
        alice = Principal(uuid.uuid4(), "alice", Role.REVIEWER)

        async def interleave() -> tuple[Any, datetime]:
            database = Database(create_engine(settings))
            context = ServiceContext(database=database, settings=settings, clock=clock)
            try:
                async with database.transaction() as holder:  # another writer holds the task
                    await task_store.lock_task(holder.connection, uuid.UUID(task["id"]))
                    pending = asyncio.create_task(
                        vote_service.vote(
                            context,
                            alice,
                            task["id"],
                            decision=Decision.APPROVED,
                            notes=None,
                            revision=1,
                            digest=task["digest"],
                            door="api",
                        )
                    )
                    await asyncio.sleep(0)  # the vote starts and waits for the task
                    released = clock.advance(5)
                    await holder.commit()
                return await pending, released
            finally:
                await database.dispose()

        ballot, released = asyncio.run(interleave())
    decided = ballot.task
    counted = [datetime.fromisoformat(v["at"]) for v in decided.votes or []]
    assert decided.resolved_at is not None
    assert all(decided.resolved_at >= at for at in counted)
    assert counted == [released]
    assert decided.resolved_at == released
    assert decided.approval_expires_at == released + timedelta(seconds=600)
