"""The group function of escalations (signoff.store.runtime.grouped) is created by a migration and
is what the escalation statement makes now; a process that cannot call it says so (the
``group_commit.unavailable`` log line, the ``signoff_group_commit_enabled`` gauge at 0),
at start-up or when a group first finds it gone, and writes each escalation alone."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest
from fastapi.testclient import TestClient
from structlog.testing import capture_logs

from signoff.api.app import create_app
from signoff.metrics import REGISTRY
from signoff.settings import Settings
from signoff.store.runtime import grouped
from signoff.store.runtime.database import Database, create_engine
from signoff.store.runtime.migrate import downgrade, upgrade
from tests.conftest import TEST_ENCRYPTION_KEY
from tests.integration.test_grouped import (
    MIGRATION,
    Recorder,
    _admin,
    _context,
    _is_group_call,
    _together,
    emptied,
)
from tests.support import escalation

pytestmark = pytest.mark.postgres

FUNCTION = f"{grouped.FUNCTION}{grouped.SIGNATURE}"

DRIFT = (
    "The group function the migrations create is not what signoff.store.runtime.grouped makes of"
    " oneshot.ESCALATE now: add a migration that creates grouped.definition() under a"
    " name of its own, and point grouped.FUNCTION at it."
)


@pytest.fixture
def url(postgres_database: str) -> Iterator[str]:
    yield from emptied(postgres_database)


def _enabled() -> float | None:
    return REGISTRY.get_sample_value("signoff_group_commit_enabled")


def _said(logs: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    return [entry for entry in logs if entry["event"] == event]


async def _exists(url: str) -> bool:
    rows = await _admin(url, f"SELECT to_regprocedure('{FUNCTION}') IS NOT NULL AS found")
    return bool(rows[0]["found"])


def test_the_migration_creates_the_group_function_and_its_downgrade_drops_it(url: str) -> None:
    async def run() -> list[bool]:
        database = Database(create_engine(Settings(database_url=url)))
        seen = [await _exists(url)]
        try:
            await downgrade(database.engine, f"{int(MIGRATION) - 1:04d}")
            seen.append(await _exists(url))
            await upgrade(database.engine)
            seen.append(await _exists(url))
        finally:
            await upgrade(database.engine)
            await database.dispose()
        return seen

    assert asyncio.run(run()) == [True, False, True]


def test_the_migrated_group_function_is_what_the_escalation_statement_makes_now(
    url: str,
) -> None:
    """Both definitions as PostgreSQL reads them back: the migrated function's, and the
    generator's created beside it in a schema of its own (rolled back)."""
    generated_name = f"signoff_drift.{grouped.FUNCTION}"

    async def run() -> tuple[str | None, str]:
        connection = await asyncpg.connect(url)
        transaction = connection.transaction()
        await transaction.start()
        try:
            migrated = await connection.fetchval(
                "SELECT pg_get_functiondef(to_regprocedure($1))", FUNCTION
            )
            await connection.execute("CREATE SCHEMA signoff_drift")
            await connection.execute(grouped.definition(generated_name))
            generated = await connection.fetchval(
                "SELECT pg_get_functiondef(to_regprocedure($1))",
                f"{generated_name}{grouped.SIGNATURE}",
            )
        finally:
            await transaction.rollback()
            await connection.close()
        return migrated, generated.replace(f"{generated_name}(", f"public.{grouped.FUNCTION}(")

    migrated, generated = asyncio.run(run())
    assert migrated == generated, DRIFT


@contextlib.asynccontextmanager
async def _role(url: str, *, may_create: bool = False) -> AsyncIterator[tuple[str, str]]:
    """A fresh login role that may read and write the tables (and create in the schema
    if ``may_create``) but owns nothing: its name and its database URL. Dropped
    afterwards, with what it came to own."""
    role = f"signoff_role_{uuid.uuid4().hex[:8]}"
    database_name = url.rsplit("/", 1)[1]
    await _admin(url, f"CREATE ROLE {role} LOGIN")
    try:
        await _admin(
            url,
            f'GRANT CONNECT ON DATABASE "{database_name}" TO {role};'
            f" GRANT USAGE ON SCHEMA public TO {role};"
            " REVOKE CREATE ON SCHEMA public FROM PUBLIC;"
            + (f" GRANT CREATE ON SCHEMA public TO {role};" if may_create else "")
            + f" GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role};"
            f" GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role}",
        )
        yield role, url.replace("postgres@", f"{role}@", 1)
    finally:
        await _admin(url, f"DROP OWNED BY {role}; DROP ROLE {role}")


async def _escalate_as(url: str, *groups: list[dict[str, Any]]) -> tuple[list[Any], Recorder, bool]:
    """Through a fresh process's connection to ``url``: its start-up look for the
    function, then each of ``groups`` escalated together, one group after the other. All
    outcomes, what was run, and whether the look found groups on."""
    context, recorder = _context(url)
    try:
        on = await context.database.escalations.check()
        outcomes = [o for group in groups for o in await _together(context, group)]
    finally:
        await context.database.dispose()
    return outcomes, recorder, on


def test_the_role_that_owns_the_function_writes_in_groups_and_says_so(url: str) -> None:
    with capture_logs() as logs:
        outcomes, recorder, on = asyncio.run(_escalate_as(url, [escalation(), escalation()]))
    assert on
    assert _enabled() == 1
    assert [entry["function"] for entry in _said(logs, "group_commit.enabled")] == [
        grouped.FUNCTION
    ]
    assert [o.status_code for o in outcomes] == [201, 201]
    assert recorder.groups() == [2]


def test_a_role_that_does_not_own_the_function_says_so_and_writes_each_alone(url: str) -> None:
    async def run() -> tuple[list[Any], Recorder, bool, float | None]:
        await _escalate_as(url)  # the owner's process: the gauge at 1
        owner_enabled = _enabled()
        async with _role(url) as (_, plain_url):
            bodies = [escalation() for _ in range(5)]
            outcomes, recorder, on = await _escalate_as(plain_url, bodies[:3], bodies[3:])
        return outcomes, recorder, on, owner_enabled

    with capture_logs() as logs:
        outcomes, recorder, on, owner_enabled = asyncio.run(run())
    assert (owner_enabled, on, _enabled()) == (1, False, 0)
    [said] = _said(logs, "group_commit.unavailable")
    assert (said["reason"], said["function"], said["log_level"]) == (
        "not_owner",
        grouped.FUNCTION,
        "warning",
    )
    assert "postgres" in said["detail"]  # who owns it
    assert [o.status_code for o in outcomes] == [201] * 5
    assert recorder.groups() == []
    assert recorder.alone() == 5
    assert recorder.calls.count((grouped.FIND_FUNCTION, 1)) == 1  # looked for once


def test_at_start_up_the_service_says_when_escalations_go_alone(url: str) -> None:
    async def settled(app: Any) -> bool:
        checking = app.state.context.database.escalations.checking
        assert checking is not None  # started with the service
        return bool(await checking)

    async def as_role(body: Any) -> None:
        async with _role(url) as (_, plain_url):
            settings = Settings(
                database_url=plain_url, encryption_keys=TEST_ENCRYPTION_KEY, run_workers=False
            )
            app = create_app(settings)
            await asyncio.to_thread(body, app)

    found: list[bool] = []

    def start(app: Any) -> None:
        with TestClient(app) as client:
            found.append(client.portal.call(settled, app))

    with capture_logs() as logs:
        asyncio.run(as_role(start))
    assert found == [False]
    assert [entry["reason"] for entry in _said(logs, "group_commit.unavailable")] == ["not_owner"]
    assert _enabled() == 0


def test_a_function_of_that_name_owned_by_another_role_is_never_called(url: str) -> None:
    """Where PUBLIC may create in the schema, another role could create the function
    first (its name is in the source): Signoff calls only a function its own role owns."""
    planted = (
        f"CREATE FUNCTION public.{grouped.FUNCTION}(items jsonb, joined text)"
        f" RETURNS TABLE ({grouped._OUT}) LANGUAGE sql AS"
        " 'SELECT 0, 1::bigint, NULL::varchar, NULL::uuid, NULL::int, NULL::text,"
        " NULL::timestamptz, false, NULL::uuid, NULL::text, NULL::boolean, false"
        " FROM jsonb_array_elements(items)'"
    )

    async def run() -> tuple[list[Any], Recorder, int]:
        await _admin(url, f"DROP FUNCTION {FUNCTION}")
        async with _role(url, may_create=True) as (_, other_url):
            await _admin(other_url, planted)
            outcomes, recorder, _ = await _escalate_as(url, [escalation() for _ in range(3)])
            stored = await _admin(url, "SELECT count(*) AS n FROM review_tasks")
        return outcomes, recorder, stored[0]["n"]

    with capture_logs() as logs:
        outcomes, recorder, stored = asyncio.run(run())
    assert [o.status_code for o in outcomes] == [201] * 3
    assert recorder.groups() == []  # never called: each was written alone
    assert recorder.alone() == stored == 3
    assert [entry["reason"] for entry in _said(logs, "group_commit.unavailable")] == ["not_owner"]


def test_a_function_dropped_while_running_turns_groups_off_loudly(url: str) -> None:
    async def run() -> tuple[Recorder, list[float | None]]:
        context, recorder = _context(url)
        gauge = []
        try:
            outcomes = await _together(context, [escalation(), escalation()])
            assert [o.status_code for o in outcomes] == [201, 201]
            gauge.append(_enabled())
            # The function vanishes (an operator cleaned the schema): the next group fails,
            # and each of its escalations is written alone; so is every one after.
            await _admin(url, f"DROP FUNCTION {FUNCTION}")
            outcomes = await _together(context, [escalation(), escalation(), escalation()])
            assert [o.status_code for o in outcomes] == [201, 201, 201]
            gauge.append(_enabled())
            outcomes = await _together(context, [escalation(), escalation()])
            assert [o.status_code for o in outcomes] == [201, 201]
        finally:
            await context.database.dispose()
        tasks = await _admin(url, "SELECT count(*) AS n FROM review_tasks")
        assert tasks[0]["n"] == 7
        _, _, on_after = await _escalate_as(url)  # a process started since
        assert not on_after
        return recorder, gauge

    with capture_logs() as logs:
        recorder, gauge = asyncio.run(run())
    assert gauge == [1, 0]
    assert recorder.groups() == [2, 3]  # the third group was never tried
    assert recorder.alone() == 5
    said = _said(logs, "group_commit.unavailable")
    assert [entry["reason"] for entry in said] == ["missing", "missing"]  # running, started
    assert _said(logs, "group_commit.failed") == []


def test_when_the_function_may_not_be_executed_groups_turn_off_loudly(url: str) -> None:
    async def run() -> tuple[Recorder, list[Any], bool]:
        async with _role(url) as (role, plain_url):
            await _admin(url, f"ALTER FUNCTION {FUNCTION} OWNER TO {role}")
            context, recorder = _context(plain_url)
            try:
                outcomes = await _together(context, [escalation(), escalation()])
                await _admin(url, f"REVOKE EXECUTE ON FUNCTION {FUNCTION} FROM PUBLIC, {role}")
                outcomes += await _together(context, [escalation(), escalation()])
                outcomes += await _together(context, [escalation(), escalation()])
            finally:
                await context.database.dispose()
            _, _, on_after = await _escalate_as(plain_url)  # a process started since
        return recorder, outcomes, on_after

    with capture_logs() as logs:
        recorder, outcomes, on_after = asyncio.run(run())
    assert [o.status_code for o in outcomes] == [201] * 6
    assert recorder.groups() == [2, 2]  # tried once more, refused: off from then on
    assert recorder.alone() == 4
    assert not on_after
    assert _enabled() == 0
    reasons = [entry["reason"] for entry in _said(logs, "group_commit.unavailable")]
    assert reasons == ["not_executable", "not_executable"]  # the first process, the second


def test_a_kind_of_group_failure_is_logged_once_until_a_group_is_written_again(
    url: str,
) -> None:
    """Groups whose answers are lost (the connection broke after the commit) are written
    again alone, answered from their keys; the failure is logged once for all of them,
    and once more only after a group was written in between."""
    lose = [True, True, False, True]

    async def run() -> list[Any]:
        context, recorder = _context(url)

        async def losing(sql: str, *args: Any) -> list[asyncpg.Record]:
            rows = await recorder(sql, *args)
            if _is_group_call(sql) and lose.pop(0):
                raise asyncpg.ConnectionDoesNotExistError("connection was closed")
            return rows

        context.database.escalations = grouped.EscalationGroups(losing, lanes=1)
        try:
            outcomes = []
            for _ in range(4):
                outcomes += await _together(context, [escalation(), escalation()])
            return outcomes
        finally:
            await context.database.dispose()

    with capture_logs() as logs:
        outcomes = asyncio.run(run())
    assert [o.status_code for o in outcomes] == [201] * 8
    assert [o.replayed for o in outcomes] == [True] * 4 + [False] * 2 + [True] * 2
    failed = _said(logs, "group_commit.failed")
    assert [(entry["error"], entry["escalations"]) for entry in failed] == [
        ("ConnectionDoesNotExistError", 2),
        ("ConnectionDoesNotExistError", 2),
    ]
    assert _said(logs, "group_commit.unavailable") == []


def test_a_process_set_to_write_each_escalation_alone_says_so_without_looking(url: str) -> None:
    async def run() -> tuple[bool, Recorder, list[Any]]:
        context, recorder = _context(url)
        context.database.escalations = grouped.EscalationGroups(recorder, size=1)
        try:
            on = await context.database.escalations.check()
            outcomes = await _together(context, [escalation(), escalation()])
        finally:
            await context.database.dispose()
        return on, recorder, outcomes

    with capture_logs() as logs:
        on, recorder, outcomes = asyncio.run(run())
    assert not on
    assert _enabled() == 0
    [said] = _said(logs, "group_commit.unavailable")
    assert (said["reason"], said["log_level"]) == ("group_size_1", "info")
    assert [o.status_code for o in outcomes] == [201, 201]
    assert recorder.calls.count((grouped.FIND_FUNCTION, 1)) == 0
    assert recorder.alone() == 2
