"""PostgreSQL refusing new connections ("too many clients"): requests that need one answer
503 saying so, with ``Retry-After``; never a 500, never "connection lost"."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx
import pytest

from signoff.domain.clock import ManualClock
from signoff.settings import Settings
from tests.conftest import TEST_ENCRYPTION_KEY, reset_postgres
from tests.support import ADMIN_KEY, live_server

pytestmark = pytest.mark.postgres


def _admin(url: str, *statements: str) -> None:
    async def run() -> None:
        connection = await asyncpg.connect(url)
        try:
            for statement in statements:
                await connection.execute(statement)
        finally:
            await connection.close()

    asyncio.run(run())


@pytest.fixture
def limited_role(postgres_database: str) -> Iterator[tuple[str, str]]:
    """A login role of its own with the rights Signoff needs; yields (name, its URL)."""
    reset_postgres(postgres_database)
    role = f"signoff_limited_{os.getpid()}"
    _admin(
        postgres_database,
        f"DROP ROLE IF EXISTS {role}",
        f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 100",
        f"GRANT ALL ON SCHEMA public TO {role}",
        f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}",
        f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}",
        f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO {role}",
    )
    parts = urlsplit(postgres_database)
    url = urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port or 5432}"))
    try:
        yield role, url
    finally:
        _admin(
            postgres_database,
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'",
            f"DROP OWNED BY {role}",
            f"DROP ROLE {role}",
        )


def test_too_many_clients_answers_503_that_says_so(
    limited_role: tuple[str, str], postgres_database: str
) -> None:
    role, url = limited_role
    settings = Settings(
        database_url=url, bootstrap_admin_key=ADMIN_KEY, encryption_keys=TEST_ENCRYPTION_KEY
    )
    with live_server(settings, ManualClock()) as server:
        with server.admin() as admin:
            assert admin.get("/readyz").status_code == 200
        _admin(postgres_database, f"ALTER ROLE {role} CONNECTION LIMIT 0")  # no new ones

        async def storm() -> list[httpx.Response]:
            headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
            async with httpx.AsyncClient(
                base_url=server.base_url, headers=headers, timeout=60
            ) as client:
                return await asyncio.gather(*(client.get("/tasks") for _ in range(40)))

        answers = asyncio.run(storm())
    assert {a.status_code for a in answers} <= {200, 503}
    refused = [a for a in answers if a.status_code == 503]
    assert refused, "every request found a pooled connection"
    for answer in refused:
        assert answer.headers["content-type"].startswith("application/problem+json")
        assert answer.headers["retry-after"] == "1"
        assert answer.json()["detail"] == "the database has no connection to spare; retry shortly"
