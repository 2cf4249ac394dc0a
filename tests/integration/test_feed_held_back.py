"""What holds the catch-up read back on PostgreSQL: one write transaction left open
anywhere on the server keeps every producer's newer events unreadable (so that none is
ever skipped). It is measured (``signoff_catchup_held_back_seconds``) and, past a few
seconds, logged with the transaction that holds it. A cluster of the test's own, so no
other session's transactions are on the server."""

from __future__ import annotations

import asyncio

import asyncpg
from structlog.testing import capture_logs

from signoff.domain.clock import ManualClock
from signoff.metrics import REGISTRY
from signoff.services import catchup
from signoff.services.context import ServiceContext
from signoff.settings import Settings
from signoff.store.runtime.database import open_database
from signoff.workers.sweeper import Sweeper
from tests.conftest import TEST_ENCRYPTION_KEY
from tests.integration.test_catchup import new_task, read, settled
from tests.support import ADMIN_KEY, live_server


def held_seconds() -> float | None:
    return REGISTRY.get_sample_value("signoff_catchup_held_back_seconds")


def test_an_open_transaction_holding_the_feed_back_is_measured_and_named(
    own_postgres_database: str, clock: ManualClock
) -> None:
    settings = Settings(
        database_url=own_postgres_database,
        bootstrap_admin_key=ADMIN_KEY,
        encryption_keys=TEST_ENCRYPTION_KEY,
        run_workers=False,
    )
    with live_server(settings, clock) as server:
        producer = server.new_client("producer", "feeder")
        new_task(producer)
        settled(producer, None, 1)
        cursor = read(producer)["next_cursor"]

        async def scenario() -> None:
            database = open_database(settings)
            context = ServiceContext(database=database, settings=settings, clock=clock)
            other = await asyncpg.connect(
                own_postgres_database, server_settings={"application_name": "stuck-batch-job"}
            )
            try:
                await Sweeper(context).sweep_once()
                assert held_seconds() == 0  # nothing waits

                stuck = other.transaction()
                await stuck.start()
                await other.execute("SELECT pg_current_xact_id()")  # an id, as a write takes
                later = await asyncio.to_thread(new_task, producer)
                page = await asyncio.to_thread(read, producer, cursor)
                assert page["items"] == []  # held back behind the open transaction

                clock.advance(2)
                with capture_logs() as short:
                    await Sweeper(context).sweep_once()
                assert held_seconds() == 2
                assert not [e for e in short if e["event"] == "catchup.held_back"]

                clock.advance(10)
                with capture_logs() as logged:
                    await Sweeper(context).sweep_once()
                assert held_seconds() == 12
                assert REGISTRY.get_sample_value("signoff_catchup_held_back_events") == 1
                lines = [e for e in logged if e["event"] == "catchup.held_back"]
                assert len(lines) == 1, logged
                line = lines[0]
                assert line["log_level"] == "warning"
                assert line["held_seconds"] == 12
                assert line["events"] == 1
                assert line["transaction_pid"] == other.get_server_pid()
                assert line["transaction_application_name"] == "stuck-batch-job"
                assert line["transaction_state"] == "idle in transaction"
                assert line["transaction_seconds"] >= 0

                await stuck.rollback()
                page = await asyncio.to_thread(read, producer, cursor)
                assert [e["data"]["id"] for e in page["items"]] == [later]
                with capture_logs() as after:
                    await catchup.watch_held_back(context)
                assert held_seconds() == 0
                assert not [e for e in after if e["event"] == "catchup.held_back"]
            finally:
                await other.close()
                await database.dispose()

        asyncio.run(scenario())
