"""Signoff behind PgBouncer in transaction pooling mode (Debian's pgbouncer 1.18, which
cannot route named prepared statements): the test starts its own pgbouncer on a free
port in front of the local PostgreSQL and runs escalate → claim → resolve through it."""

from __future__ import annotations

import asyncio
import configparser
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from signoff.domain.clock import ManualClock
from signoff.services import tasks as task_service
from signoff.services.context import ServiceContext
from signoff.settings import Settings
from signoff.store.runtime import grouped
from signoff.store.runtime.database import Database, create_engine
from tests.conftest import reset_postgres
from tests.faults.harness import audit, running_load, service_env, setup_service
from tests.integration.test_grouped import PRODUCER as GROUP_PRODUCER
from tests.integration.test_grouped import Recorder
from tests.processes import Server, wait_for, worker
from tests.receiver import Receiver
from tests.support import ADMIN_KEY, escalation, example_resolve, live_server

pytestmark = pytest.mark.postgres

DEPLOY_DOC = Path(__file__).parents[2] / "docs" / "deploy.md"
#: What the test's pgbouncer takes from the example in docs/deploy.md (its sizes are its own).
FROM_THE_DOCS = ("pool_mode", "server_login_retry", "ignore_startup_parameters")


def documented_settings() -> dict[str, str]:
    """The ``[pgbouncer]`` section of the example configuration in docs/deploy.md."""
    block = re.search(r"```ini\n(.*?)```", DEPLOY_DOC.read_text(), re.DOTALL)
    assert block, "docs/deploy.md has no ini example"
    parser = configparser.ConfigParser(inline_comment_prefixes=(";",))
    parser.read_string(block.group(1))
    return dict(parser["pgbouncer"])


def test_the_documented_pgbouncer_logs_in_again_within_a_second_after_a_restart() -> None:
    documented = documented_settings()
    assert documented["pool_mode"] == "transaction"
    # PgBouncer waits server_login_retry seconds (15 by default) before it tries a
    # database that refused a login again: every request waits for it after a restart.
    assert float(documented.get("server_login_retry", "15")) <= 1


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def pgbouncer(postgres_database: str, tmp_path: Path) -> Iterator[str]:
    """A pgbouncer (transaction pooling) on a free port; yields the database URL through it."""
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    assert Path(binary).exists(), "pgbouncer is not installed (.ci/run installs it)"
    target = urlsplit(postgres_database)
    documented = documented_settings()
    port = _free_port()
    workdir = tmp_path / "pgbouncer"
    workdir.mkdir()
    (workdir / "users.txt").write_text(f'"{target.username}" ""\n')
    (workdir / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={target.hostname} port={target.port or 5432}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {workdir / 'users.txt'}\n"
        f"admin_users = {target.username}\n"
        "max_client_conn = 200\ndefault_pool_size = 8\n"
        + "".join(f"{name} = {documented[name]}\n" for name in FROM_THE_DOCS)
    )
    command = [binary, str(workdir / "pgbouncer.ini")]
    if os.geteuid() == 0:  # pgbouncer refuses to run as root
        command[1:1] = ["-u", "nobody"]
    log = (workdir / "pgbouncer.log").open("w")
    process = subprocess.Popen(command, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 20
        while True:
            assert process.poll() is None, (workdir / "pgbouncer.log").read_text()
            assert time.monotonic() < deadline, "pgbouncer did not start"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)  # waiting for a subprocess to listen, not a clock
        yield f"postgresql://{target.username}@127.0.0.1:{port}{target.path}"
    finally:
        process.terminate()
        process.wait(timeout=20)
        log.close()


def test_escalate_claim_resolve_through_pgbouncer(
    pgbouncer: str, postgres_database: str, clock: ManualClock
) -> None:
    reset_postgres(postgres_database)
    settings = Settings(
        database_url=pgbouncer,
        bootstrap_admin_key=ADMIN_KEY,
        pgbouncer=True,
        listen_database_url=postgres_database,  # LISTEN does not pass a transaction pooler
    )
    with live_server(settings, clock) as server:
        with server.new_client("producer", "bot-1") as producer:
            bodies = [escalation() for _ in range(5)]
            created = [producer.escalate(body) for body in bodies]
            assert [r.status_code for r in created] == [201] * 5
            replay = producer.escalate(bodies[0])
            assert replay.headers.get("Idempotent-Replayed") == "true"
            duplicate = producer.escalate(escalation(bodies[1]["entity_id"]))
            assert duplicate.status_code == 409
        with server.new_client("reviewer", "alice") as alice:
            for _ in range(5):
                grant = alice.post("/tasks/claim-next")
                assert grant.status_code == 200, grant.text
                task_id, token = grant.json()["id"], grant.json()["lease_token"]
                assert alice.renew(task_id, token).status_code == 200
                body = example_resolve() | {"operator_id": "alice"}
                resolved = alice.resolve(task_id, token, body)
                assert resolved.status_code == 200, resolved.text
            assert alice.post("/tasks/claim-next").status_code == 204
        assert server.count("review_tasks", status="RESOLVED") == 5
        assert server.count("outbox_events") == 15  # created, claimed, resolved


def test_a_group_of_escalations_through_pgbouncer(pgbouncer: str, postgres_database: str) -> None:
    """Group commit (signoff.store.runtime.grouped) through the pooler: the function is looked
    for and called inside transactions, without prepared statements."""
    reset_postgres(postgres_database)
    settings = Settings(database_url=pgbouncer, pgbouncer=True, encryption_keys=None)

    async def run() -> None:
        database = Database(create_engine(settings))
        recorder = Recorder(database)
        database.escalations = grouped.EscalationGroups(recorder, lanes=1)
        context = ServiceContext(database=database, settings=settings, clock=ManualClock())
        try:
            bodies = [escalation() for _ in range(4)]
            outcomes = await asyncio.gather(
                *(task_service.escalate(context, GROUP_PRODUCER, body) for body in bodies)
            )
            assert [o.status_code for o in outcomes] == [201] * 4
            assert recorder.groups() == [4]
            assert recorder.alone() == 0
            again = await asyncio.gather(
                *(task_service.escalate(context, GROUP_PRODUCER, body) for body in bodies[:2])
            )
            assert [(o.status_code, o.replayed) for o in again] == [(201, True)] * 2
        finally:
            await database.dispose()

    asyncio.run(run())


def _pgbouncer_admin(pgbouncer_url: str, command: str) -> None:
    """``PAUSE`` or ``RESUME`` on the pooler's admin console (``PAUSE`` returns once every
    server connection is back in the pool)."""
    admin = pgbouncer_url.rsplit("/", 1)[0] + "/pgbouncer"
    subprocess.run(["psql", admin, "-c", command], check=True, capture_output=True, timeout=60)


@pytest.mark.slow
def test_a_worker_behind_pgbouncer_delivers_everything_once_through_a_pause(
    pgbouncer: str, postgres_database: str, tmp_path: Path
) -> None:
    """``signoff serve`` (no workers of its own) and a separate ``signoff worker``, both
    through a transaction-pooling PgBouncer, under escalate/claim/resolve load; the
    pooler is paused for a few seconds and resumed. Every event reaches the receiver
    exactly once."""
    reset_postgres(postgres_database)
    env = service_env(
        pgbouncer,
        SIGNOFF_PGBOUNCER="true",
        SIGNOFF_LISTEN_DATABASE_URL=postgres_database,
        # Longer than the pause: an attempt whose result waits for the pooler is not
        # taken back and sent again.
        SIGNOFF_WEBHOOK_ATTEMPT_LEASE_SECONDS="60",
        SIGNOFF_WEBHOOK_TIMEOUT_SECONDS="30",
    )
    with Receiver() as receiver:
        server = Server(env | {"SIGNOFF_RUN_WORKERS": "false"}, tmp_path / "serve.log")
        dispatcher = worker(env, tmp_path / "worker.log")
        with server, dispatcher:
            keys = setup_service(server.base_url, receiver)
            with running_load(server.base_url, keys) as load:
                wait_for(lambda: load.acknowledged() >= 30, what="load before the pause")
                wait_for(lambda: len(receiver.received) >= 30, what="deliveries before the pause")
                _pgbouncer_admin(pgbouncer, "PAUSE")
                time.sleep(3)  # the pause itself (no assertion is timed)
                _pgbouncer_admin(pgbouncer, "RESUME")
                before = load.acknowledged()
                wait_for(lambda: load.acknowledged() >= before + 30, what="load after the pause")
            counts = audit(postgres_database, load.ledger, receiver)
            assert dispatcher.alive()
    assert counts["received"] == counts["events"]
    assert counts["repeated"] == 0, counts
