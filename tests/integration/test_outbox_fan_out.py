"""An outbox event written while no webhook endpoint is enabled is stored already fanned
out (``fanned_out_at`` = its ``created_at``): no dispatcher has to visit it, and no
endpoint registered or enabled later gets it. Every path that writes events is checked,
on both engines: the one-step escalation, the one-statement changes (claim, resolve on
PostgreSQL) and the general path (an escalation with a subject)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime
from typing import Any

from signoff.settings import Settings
from signoff.store import deliveries
from signoff.store.runtime.database import Database, create_engine
from tests.support import LiveServer, escalation, example_resolve_for, live_server

SUBJECT = {"title": "Q3 refund policy", "body": "Refunds within 30 days."}


def _events(server: LiveServer, task_id: str) -> list[dict[str, Any]]:
    rows = server.rows("outbox_events", task_id=uuid.UUID(task_id))
    return sorted(rows, key=lambda row: row["task_version"])


def _decide(server: LiveServer) -> list[str]:
    """Escalate (one step), escalate with a subject (general path), claim and resolve the
    first: the ids of the two tasks."""
    with server.new_client("producer") as producer, server.new_client("reviewer") as alice:
        plain = producer.escalate(escalation())
        with_subject = producer.escalate(escalation(subject=SUBJECT, source_revisions=["S01:r1"]))
        assert plain.status_code == 201, plain.text
        assert with_subject.status_code == 201, with_subject.text
        task_id = plain.json()["id"]
        token = alice.claim(task_id).json()["lease_token"]
        resolved = alice.resolve(task_id, token, example_resolve_for(alice))
        assert resolved.status_code == 200, resolved.text
    return [task_id, with_subject.json()["id"]]


def _register(server: LiveServer, **body: Any) -> str:
    with server.admin() as admin:
        response = admin.post("/webhook-endpoints", json={"url": "http://127.0.0.1:9/hook", **body})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def _fan_out(settings: Settings, now: datetime) -> tuple[int, int]:
    database = Database(create_engine(settings))
    try:
        async with database.transaction() as uow:
            made = await deliveries.fan_out(uow.connection, now=now, limit=1000)
            await uow.commit()
        return made
    finally:
        await database.dispose()


def test_events_written_with_no_endpoint_enabled_are_already_fanned_out(
    make_settings, clock
) -> None:
    settings = make_settings(run_workers=False, webhook_allow_private_networks=True)
    with live_server(settings, clock) as server:
        before = _decide(server)
        for task_id in before:
            events = _events(server, task_id)
            assert events, task_id
            for event in events:
                assert event["fanned_out_at"] == event["created_at"], event["event_type"]

        endpoint_id = _register(server)
        after = _decide(server)
        for task_id in after:
            events = _events(server, task_id)
            assert len(events) >= 1
            assert all(event["fanned_out_at"] is None for event in events)

        # The fan-out makes deliveries for the events written after the registration only.
        events, deliveries = asyncio.run(_fan_out(settings, clock.now()))
        written_after = sum(len(_events(server, task_id)) for task_id in after)
        assert (events, deliveries) == (written_after, written_after)
        delivered_tasks = {str(row["task_id"]) for row in server.rows("webhook_deliveries")}
        assert delivered_tasks == set(after)

        # A disabled endpoint is no endpoint: events are fanned out as they are written.
        with server.admin() as admin:
            patched = admin.patch(f"/webhook-endpoints/{endpoint_id}", json={"enabled": False})
        assert patched.status_code == 200, patched.text
        for task_id in _decide(server):
            for event in _events(server, task_id):
                assert event["fanned_out_at"] == event["created_at"]
        assert asyncio.run(_fan_out(settings, clock.now())) == (0, 0)


def test_a_dispatcher_asks_one_question_per_round_and_gets_the_same_answer(
    make_settings, clock
) -> None:
    """``has_work_now`` (one prepared statement on PostgreSQL) agrees with ``has_work``."""
    settings = make_settings(run_workers=False, webhook_allow_private_networks=True)

    async def both() -> tuple[Any, Any]:
        database = Database(create_engine(settings))
        try:
            now = clock.now()
            fast = await deliveries.has_work_now(database, now=now)
            async with database.transaction(write=False) as uow:
                general = await deliveries.has_work(uow.connection, now=now)
            return fast, general
        finally:
            await database.dispose()

    with live_server(settings, clock) as server:
        _decide(server)
        fast, general = asyncio.run(both())
        assert fast == general
        assert (fast.unfanned, fast.due) == (False, False)
        _register(server)
        _decide(server)
        fast, general = asyncio.run(both())
        assert fast == general
        assert (fast.unfanned, fast.due) == (True, False)
        asyncio.run(_fan_out(settings, clock.now()))
        fast, general = asyncio.run(both())
        assert fast == general
        assert (fast.unfanned, fast.due) == (False, True)
