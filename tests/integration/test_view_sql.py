"""PostgreSQL's single statements build a task's public view in SQL (the events they write
carry it); it must be the Python view, field for field, in every state a task can be in."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest

from signoff.domain.clock import ManualClock, rfc3339
from signoff.domain.tasks import task_view
from signoff.settings import Settings
from signoff.store import oneshot
from signoff.store import tasks as task_store
from signoff.store.runtime.database import Database, create_engine
from tests.support import LiveServer, escalation

SUMMARY = {
    "recommendation": "APPROVE",
    "rationale": "Matches the invoice.",
    "risks": [],
    "evidence_links": [],
    "generated_by": "model-x",
}

VIEW = oneshot.statement(
    "view_probe",
    f"SELECT {oneshot.view_sql('t')}::text AS v FROM review_tasks t WHERE t.id = :task_id::uuid",
)


async def _views(url: str, ids: list[str], clock: ManualClock) -> list[tuple[Any, Any]]:
    database = Database(create_engine(Settings(database_url=url)))
    try:
        pairs = []
        now = clock.now()
        for raw in ids:
            async with database.transaction(write=False) as uow:
                task = await task_store.find_task(uow.connection, uuid.UUID(raw))
            assert task is not None
            values = {"task_id": uuid.UUID(raw), "now": now, "now_text": rfc3339(now)}
            rows = await database.one_statement(VIEW.sql, *VIEW.args(values))
            pairs.append((json.loads(rows[0]["v"]), task_view(task, now, metadata=True)))
        return pairs
    finally:
        await database.dispose()


@pytest.mark.parametrize("engine", ["postgresql"])
def test_the_sql_task_view_is_the_python_task_view_in_every_state(
    server: LiveServer, clock: ManualClock, database_url: str
) -> None:
    producer = server.new_client("producer", "bot")
    reviewer = server.new_client("reviewer", "rita")
    plain = producer.escalate(escalation()).json()["id"]
    rich = producer.escalate(
        escalation(
            subject={"pay": "100 EUR"},
            approval_ttl_seconds=600,
            summary=SUMMARY,
            metadata={"run": 7, "tags": ["a"]},
        )
    ).json()
    lapsed = producer.escalate(escalation()).json()["id"]
    cancelled = producer.escalate(escalation()).json()["id"]
    assert reviewer.claim(lapsed).status_code == 200
    token = reviewer.claim(rich["id"]).json()["lease_token"]
    pin = {"revision": 1, "digest": rich["digest"]}
    assert reviewer.resolve(rich["id"], token, {"decision": "APPROVED"} | pin).is_success
    assert producer.post(f"/tasks/{cancelled}/cancel").status_code == 200
    held = producer.escalate(escalation()).json()["id"]
    assert reviewer.claim(held).status_code == 200
    clock.advance(60 * 60)  # the first claim's lease lapsed; later ones too
    assert reviewer.claim(held).status_code == 200  # held again, live
    ids = [plain, rich["id"], lapsed, cancelled, held]
    for from_sql, from_python in asyncio.run(_views(database_url, ids, clock)):
        assert from_sql == from_python
