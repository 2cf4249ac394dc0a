"""Who reads which task: reviewers read unassigned tasks and their groups' tasks and
nothing else, through every door that reads a task; a task outside the reader's groups
is not found (404), as another producer's task is. On both engines."""

from __future__ import annotations

import asyncio
import copy
import re
import uuid
from typing import Any

import httpx
from sqlalchemy import select

from signoff.domain.tasks import Visibility
from signoff.settings import Settings
from signoff.store import tasks as task_store
from signoff.store.runtime.database import Database, create_engine
from signoff.store.tables import review_tasks
from tests.integration.test_approvals import SUBJECT, revise
from tests.support import Client, LiveServer, escalation

PASSWORD = "correct horse battery staple"


def _reviewer(server: LiveServer, principal_id: str, groups: list[str]) -> Client:
    with server.admin() as admin:
        response = admin.post(
            "/api-keys", json={"role": "reviewer", "principal_id": principal_id, "groups": groups}
        )
    assert response.status_code == 201, response.text
    return server.client(response.json()["key"], principal_id)


def _task(producer: Client, group: str | None, **extra: Any) -> dict[str, Any]:
    if group is not None:
        extra["assigned_group"] = group
    body = escalation(subject=copy.deepcopy(SUBJECT), source_revisions=["S01:r1"], **extra)
    response = producer.escalate(body)
    assert response.status_code == 201, response.text
    return dict(response.json())


def _console(server: LiveServer, principal_id: str, groups: list[str]) -> httpx.Client:
    with server.admin() as admin:
        created = admin.post(
            "/users",
            json={
                "principal_id": principal_id,
                "role": "reviewer",
                "email": f"{principal_id}@example.org",
                "groups": groups,
                "password": PASSWORD,
            },
        )
    assert created.status_code == 201, created.text
    browser = httpx.Client(base_url=server.base_url, timeout=30)
    login = browser.get("/console/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', login.text)
    assert csrf is not None
    signed = browser.post(
        "/console/login",
        data={"username": principal_id, "password": PASSWORD, "csrf": csrf.group(1)},
    )
    assert signed.status_code in (302, 303), signed.text
    return browser


def test_a_reviewer_reads_no_task_of_another_group_through_any_api_door(
    server: LiveServer,
) -> None:
    producer = server.new_client("producer", "bot")
    alice = _reviewer(server, "alice", ["a"])
    theirs = _task(producer, "b")
    ours = _task(producer, "a")
    open_task = _task(producer, None)
    assert revise(producer, theirs["id"], 1, {**SUBJECT, "title": "Second"}).status_code == 200
    other = theirs["id"]

    for path in (
        f"/tasks/{other}",
        f"/tasks/{other}?wait=1",
        f"/tasks/{other}?wait=1&after_version=0",
        f"/tasks/{other}/events",
        f"/tasks/{other}/revisions",
        f"/tasks/{other}/revisions/1",
        f"/tasks/{other}/diff?from=1&to=2",
    ):
        answer = alice.get(path)
        assert (answer.status_code, answer.json()["error_code"]) == (404, "ERR_TASK_NOT_FOUND"), (
            path,
            answer.text,
        )
    # Acting on it says no more than reading it does.
    claimed = alice.claim(other)
    assert (claimed.status_code, claimed.json()["error_code"]) == (404, "ERR_TASK_NOT_FOUND")
    assert alice.renew(other, str(uuid.uuid4())).status_code == 404

    assert alice.get("/tasks", params={"assigned_group": "b"}).json()["items"] == []
    listed = {t["id"] for t in alice.get("/tasks", params={"limit": 200}).json()["items"]}
    assert listed == {ours["id"], open_task["id"]}
    assert alice.get(f"/tasks/{ours['id']}").status_code == 200
    assert alice.get(f"/tasks/{open_task['id']}/events").status_code == 200

    # Supervisors and admins read every group; producers their own tasks, as before.
    sue = server.new_client("supervisor", "sue")
    assert sue.get(f"/tasks/{other}").status_code == 200
    assert other in {t["id"] for t in sue.get("/tasks", params={"limit": 200}).json()["items"]}
    with server.admin() as admin:
        assert admin.get(f"/tasks/{other}/events").status_code == 200
    assert producer.get(f"/tasks/{other}").status_code == 200
    assert server.new_client("producer", "another-bot").get(f"/tasks/{other}").status_code == 404


def test_a_task_moved_to_another_group_leaves_the_reviewers_view(server: LiveServer) -> None:
    producer = server.new_client("producer", "bot")
    alice = _reviewer(server, "alice", ["a"])
    _reviewer(server, "bob", ["b"])
    sue = server.new_client("supervisor", "sue")
    task = _task(producer, "a")
    assert alice.get(f"/tasks/{task['id']}").status_code == 200
    assert sue.post(f"/tasks/{task['id']}/reassign", json={"group": "b"}).status_code == 200
    assert alice.get(f"/tasks/{task['id']}").status_code == 404
    assert alice.get("/tasks").json()["items"] == []


def test_a_reviewer_reads_no_task_of_another_group_in_the_console(server: LiveServer) -> None:
    producer = server.new_client("producer", "bot")
    theirs = _task(producer, "b", entity_type="hidden_kind", reason_code="HIDDEN_REASON")
    ours = _task(producer, "a")
    browser = _console(server, "ann", ["a"])
    try:
        page = browser.get(f"/console/tasks/{theirs['id']}")
        assert page.status_code == 404
        assert theirs["entity_id"] not in page.text
        state = browser.get(f"/console/tasks/{theirs['id']}/state")
        assert state.status_code == 404
        assert browser.get(f"/console/tasks/{ours['id']}").status_code == 200
        for view in ("available", "due", "mine", "decided"):
            rows = browser.get("/console/inbox/rows", params={"view": view, "group": "b"})
            assert rows.status_code == 200
            assert theirs["id"] not in rows.text, view
        inbox = browser.get("/console")
        assert ours["id"] in inbox.text
        assert theirs["id"] not in inbox.text
        # The filter choices do not name what only other groups' tasks hold.
        assert "hidden_kind" not in inbox.text
        assert "HIDDEN_REASON" not in inbox.text
    finally:
        browser.close()


async def _admitted(url: str, scope: Visibility) -> tuple[set[str], set[str]]:
    database = Database(create_engine(Settings(database_url=url)))
    try:
        async with database.transaction(write=False) as uow:
            rows = await uow.connection.execute(select(review_tasks))
            tasks = [task_store.task_from_row(row) for row in rows]
            by_sql = await uow.connection.execute(
                select(review_tasks.c.id).where(task_store.visible(scope))
            )
            return {str(i) for i in by_sql.scalars()}, {str(t.id) for t in tasks if scope.admits(t)}
    finally:
        await database.dispose()


def test_the_sql_visibility_is_the_python_rule(server: LiveServer, database_url: str) -> None:
    bots = [server.new_client("producer", name) for name in ("bot-1", "bot-2")]
    for bot in bots:
        for group in (None, "a", "b"):
            _task(bot, group)
    for scope in (
        Visibility(),
        Visibility(producer_id="bot-1"),
        Visibility(groups=()),
        Visibility(groups=("a",)),
        Visibility(groups=("a", "b")),
        Visibility(producer_id="bot-2", groups=("b",)),
    ):
        by_sql, by_rule = asyncio.run(_admitted(database_url, scope))
        assert by_sql == by_rule, scope
