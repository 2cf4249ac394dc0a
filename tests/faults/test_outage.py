"""A database outage on a PostgreSQL cluster of the test's own (never the shared one):
while it is down every request is answered 503 ``ERR_NOT_READY`` (a problem document,
no stack trace), the service and its workers keep running, and once it is back they
serve, listen and deliver again — no acknowledged write lost, nothing duplicated, every
audited change delivered in per-task order."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.faults.harness import audit, running_load, service_env, setup_service
from tests.pgcluster import Cluster
from tests.processes import Process, Server, wait_for, worker
from tests.receiver import Receiver
from tests.support import ADMIN_KEY, escalation

pytestmark = pytest.mark.slow

#: Fast restarts of PostgreSQL in the restart trial.
RESTARTS = 6


def _ready(base_url: str) -> bool:
    try:
        response = httpx.get(
            f"{base_url}/readyz", headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=5
        )
    except httpx.HTTPError:
        return False
    return response.status_code == 200


def _logged(process: Process, event: str) -> bool:
    return any(e["event"] == event for e in process.events())


def test_a_database_outage_answers_503_then_everything_recovers(
    own_postgres: Cluster, own_postgres_database: str, tmp_path: Path
) -> None:
    url = own_postgres_database
    env = service_env(url)
    with Receiver() as receiver:
        server = Server(env, tmp_path / "serve.log")
        other = worker(env, tmp_path / "worker.log")
        with server, other:
            keys = setup_service(server.base_url, receiver)
            with running_load(server.base_url, keys) as load:
                wait_for(lambda: load.acknowledged() >= 15, what="load before the outage")
                wait_for(lambda: len(receiver.received) >= 5, what="deliveries under way")
                for process in (server, other):
                    wait_for(lambda p=process: _logged(p, "listen.started"), what="LISTEN")
                own_postgres.stop("immediate")  # as abrupt as a crash
                during = []
                with httpx.Client(
                    base_url=server.base_url,
                    headers={"Authorization": f"Bearer {keys['bot']}"},
                    timeout=30,
                ) as probe:
                    for _ in range(5):
                        during.append(probe.post("/tasks/escalate", json=escalation()))
                        during.append(probe.get("/tasks"))
                acknowledged_during = load.acknowledged()
                own_postgres.start()
                back = time.monotonic()
                wait_for(lambda: _ready(server.base_url), what="readiness after the outage")
                recovered_in = time.monotonic() - back
                wait_for(
                    lambda: load.acknowledged() >= acknowledged_during + 15,
                    what="load after the outage",
                )
            counts = audit(url, load.ledger, receiver)
        for process in (server, other):
            logged = {e["event"] for e in process.events()}
            assert {"listen.lost", "listen.restored"} <= logged, process.args
            assert {"database.unavailable", "database.available"} <= logged, process.args
    for answer in during:
        assert answer.status_code == 503, answer.text
        assert answer.headers["content-type"].startswith("application/problem+json")
        assert answer.json()["error_code"] == "ERR_NOT_READY"
    assert load.ledger.answers["503"] > 0
    print(counts, dict(load.ledger.answers), f"ready again {recovered_in:.2f} s after start")


def test_fast_restarts_under_load_answer_successes_or_503_problems(
    own_postgres: Cluster, own_postgres_database: str, tmp_path: Path
) -> None:
    """PostgreSQL restarted quickly (``pg_ctl stop -m fast``, then start), again and
    again, under load: every answer is a success or a 503 problem document with
    ``Retry-After`` (the ledger names any other server error), nothing is lost."""
    url = own_postgres_database
    with Receiver() as receiver:
        server = Server(service_env(url), tmp_path / "serve.log")
        with server:
            keys = setup_service(server.base_url, receiver)
            with running_load(server.base_url, keys) as load:
                for restart in range(RESTARTS):
                    wait_for(
                        lambda n=restart: load.acknowledged() >= 10 * (n + 1),
                        what=f"load before restart {restart + 1}",
                    )
                    own_postgres.stop("fast")  # disconnects every client at once
                    own_postgres.start()
                wait_for(lambda: load.acknowledged() >= 10 * (RESTARTS + 1), what="load after")
            counts = audit(url, load.ledger, receiver)
        # One line per failure, with its cause: no driver's or server's stack trace.
        assert "Traceback" not in server.log.read_text(errors="replace")
        causes = {e.get("cause") for e in server.events() if e["event"] == "database.unavailable"}
        assert causes, "no outage was seen"
        assert None not in causes, causes
    failures = {a for a in load.ledger.answers if a.startswith("5") and a != "503"}
    assert not failures, failures
    print(counts, dict(load.ledger.answers))
