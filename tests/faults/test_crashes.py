"""kill -9 of ``signoff serve`` and of ``signoff worker`` under escalate, claim/resolve and
delivery load: no acknowledged write lost, nothing duplicated, every audited change
delivered in per-task order (see :mod:`tests.faults.harness`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.harness import audit, running_load, service_env, setup_service
from tests.processes import Server, wait_for, worker
from tests.receiver import Answer, Receiver

pytestmark = pytest.mark.slow

#: Acknowledged escalations before the crash, and again after the restart.
BEFORE, AFTER = 20, 20


def test_kill_9_of_serve_under_load_loses_and_duplicates_nothing(
    database_url: str, tmp_path: Path
) -> None:
    """The service runs its own dispatcher; it is killed while producers escalate,
    reviewers claim and resolve, and webhooks are being sent, then started again."""
    with Receiver() as receiver:
        server = Server(service_env(database_url), tmp_path / "serve.log")
        with server:
            keys = setup_service(server.base_url, receiver)
            with running_load(server.base_url, keys) as load:
                wait_for(lambda: load.acknowledged() >= BEFORE, what="load before the crash")
                wait_for(lambda: len(receiver.received) >= 5, what="deliveries under way")
                server.kill()
                server.start()  # same port: clients retry the same requests
                wait_for(
                    lambda: load.acknowledged() >= BEFORE + AFTER, what="load after the restart"
                )
            counts = audit(database_url, load.ledger, receiver)
    assert load.ledger.resolutions, "no resolution was acknowledged"
    print(counts, dict(load.ledger.answers))


def test_kill_9_of_a_worker_mid_delivery_with_two_workers(
    postgres_database: str, tmp_path: Path
) -> None:
    """Two ``signoff worker`` processes dispatch (per-task order must hold between
    them); one is killed with attempts in flight and the other carries on: the killed
    one's attempts are made again once their leases lapse, with the same webhook-id."""
    from tests.conftest import reset_postgres

    reset_postgres(postgres_database)
    env = service_env(postgres_database)
    with Receiver() as receiver:
        receiver.answer(*[Answer(200, delay_seconds=0.02) for _ in range(2000)])
        server = Server(env | {"SIGNOFF_RUN_WORKERS": "false"}, tmp_path / "serve.log")
        first = worker(env, tmp_path / "worker-1.log")
        second = worker(env, tmp_path / "worker-2.log")
        with server, first, second:
            keys = setup_service(server.base_url, receiver)
            with running_load(server.base_url, keys) as load:
                wait_for(lambda: load.acknowledged() >= BEFORE, what="load before the crash")
                wait_for(lambda: len(receiver.received) >= 20, what="deliveries under way")
                first.kill()
                wait_for(lambda: load.acknowledged() >= BEFORE + AFTER, what="load after the crash")
            counts = audit(postgres_database, load.ledger, receiver)
    print(counts, dict(load.ledger.answers))
