"""Fixtures: every integration test runs once on SQLite and once on PostgreSQL.

PostgreSQL: ``SIGNOFF_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``)
names a server where a throw-away database ``signoff_test_<pid>`` is created for the
session; each test starts from empty tables. A PostgreSQL that is down fails the tests
(it is never skipped): ``scripts/test`` starts it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from hypothesis import settings

from signoff.domain.clock import ManualClock
from signoff.settings import Settings
from signoff.store.runtime.database import Database, create_engine
from signoff.store.runtime.migrate import upgrade
from signoff.store.tables import metadata
from tests.pgcluster import Cluster, own_cluster
from tests.support import ADMIN_KEY, LiveServer, live_server

# CI explores the same generated examples on every run (a red CI must mean a change broke
# something); developers' runs explore new ones each time (docs/testing.md).
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

POSTGRES_URL = os.environ.get(
    "SIGNOFF_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
ENGINES = ["sqlite", "postgresql"]
TEST_ENCRYPTION_KEY = "I-CYXlLA4nYXSgfTkkDkZ5bGeV5WZsbGvUWTF9Yc0r8="


def _server_url(database: str) -> str:
    base, _, _ = POSTGRES_URL.rpartition("/")
    return f"{base}/{database}"


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, migrated once."""
    name = f"signoff_test_{os.getpid()}"

    async def admin(statement: str) -> None:
        connection = await asyncpg.connect(POSTGRES_URL)
        try:
            await connection.execute(statement)
        finally:
            await connection.close()

    asyncio.run(admin(f'DROP DATABASE IF EXISTS "{name}"'))
    asyncio.run(admin(f'CREATE DATABASE "{name}"'))
    url = _server_url(name)

    async def migrate() -> None:
        database = Database(create_engine(Settings(database_url=url)))
        await upgrade(database.engine)
        await database.dispose()

    asyncio.run(migrate())
    yield url
    asyncio.run(admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


#: Every table emptied and every sequence restarted in one transaction. ``DELETE``, not
#: ``TRUNCATE``: a test leaves a few rows, and ``TRUNCATE`` of every table (new files for
#: each, and a checkpoint's worth of catalog work) took 0.1-0.4 s per test where this takes
#: 0.02 s. With ``session_replication_role = replica`` no trigger or foreign key fires, so
#: the order does not matter and no trigger of the schema's can refuse the reset.
RESET_POSTGRES = (
    "SET LOCAL session_replication_role = replica;"
    + "".join(f"DELETE FROM {table.name};" for table in metadata.sorted_tables)
    + "SELECT setval(format('%I.%I', schemaname, sequencename)::regclass, 1, false)"
    " FROM pg_sequences WHERE schemaname = current_schema();"
)


def reset_postgres(url: str) -> None:
    async def reset() -> None:
        connection = await asyncpg.connect(url)
        try:
            async with connection.transaction():
                await connection.execute(RESET_POSTGRES)
        finally:
            await connection.close()

    asyncio.run(reset())


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty SQLite database migrated once per test process, copied for each test:
    the migrations' many schema commits each wait for the disk."""
    path = tmp_path_factory.mktemp("template") / "signoff.db"

    async def migrate() -> None:
        database = Database(create_engine(Settings(database_url=f"sqlite:///{path}")))
        await upgrade(database.engine)
        await database.dispose()

    asyncio.run(migrate())
    return path


@pytest.fixture
def database_url(engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """An empty, migrated database of the parametrised engine."""
    if engine == "sqlite":
        target = tmp_path / "signoff.db"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), target)
        target.chmod(0o600)
        return f"sqlite:///{target}"
    url: str = request.getfixturevalue("postgres_database")
    reset_postgres(url)
    return url


@pytest.fixture
def make_settings(database_url: str):  # type: ignore[no-untyped-def]
    def make(**overrides: object) -> Settings:
        values: dict[str, object] = {
            "database_url": database_url,
            "bootstrap_admin_key": ADMIN_KEY,
            # A fixed key, so no test writes a key file into the working directory.
            "encryption_keys": TEST_ENCRYPTION_KEY,
        }
        values.update(overrides)
        return Settings(**values)  # type: ignore[arg-type]

    return make


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def server(make_settings, clock: ManualClock) -> Iterator[LiveServer]:  # type: ignore[no-untyped-def]
    with live_server(make_settings(), clock) as live:
        yield live


# A PostgreSQL cluster of the session's own (faults: restarts, outages) ------------------


@pytest.fixture(scope="session")
def own_postgres() -> Iterator[Cluster]:
    """A throw-away PostgreSQL cluster on its own port, which tests may stop, restart or
    crash (never the shared server). Each test makes its own database in it."""
    with own_cluster() as cluster:
        yield cluster


@pytest.fixture
def own_postgres_database(own_postgres: Cluster) -> str:
    """An empty, migrated database in :func:`own_postgres` (started if a test left it
    stopped)."""
    if not own_postgres.running():
        own_postgres.start()
    url = own_postgres.create_database(f"signoff_{uuid.uuid4().hex[:12]}")

    async def migrate() -> None:
        database = Database(create_engine(Settings(database_url=url)))
        await upgrade(database.engine)
        await database.dispose()

    asyncio.run(migrate())
    return url


@pytest.fixture(scope="session", autouse=True)
def cheap_password_hashes() -> Iterator[None]:
    """Argon2id at argon2-cffi's cheapest parameters for the servers tests run in this
    process: at its defaults each hash and each sign-in costs about 0.2 s of CPU, and
    hundreds of tests create users and sign in. Verification reads the parameters from the
    stored hash, so the code under test is the same; servers in subprocesses keep the
    defaults."""
    from argon2 import PasswordHasher, profiles

    from signoff.services import passwords

    cheap = PasswordHasher.from_parameters(profiles.CHEAPEST)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(passwords, "_hasher", lambda: cheap)
        patch.setattr(passwords, "_dummy_hash", None)
        yield


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Browser tests run last: Playwright's synchronous API drives an event loop on the
    main thread, and ``asyncio.run`` (which the other tests' fixtures use) refuses to start
    while one is running."""
    browser = [item for item in items if "tests/browser/" in item.nodeid]
    others = [item for item in items if "tests/browser/" not in item.nodeid]
    items[:] = others + browser
