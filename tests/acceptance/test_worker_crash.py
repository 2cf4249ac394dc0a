"""A dispatcher killed with SIGKILL mid-delivery loses nothing: once its attempt lease
lapses another dispatcher sends the same event again, with the same webhook-id."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from signoff.domain.clock import ManualClock
from signoff.settings import Settings
from tests.conftest import TEST_ENCRYPTION_KEY
from tests.receiver import Answer, Receiver
from tests.support import ADMIN_KEY, escalation, live_server


def _worker(env: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")} | env
    return subprocess.Popen(
        [sys.executable, "-m", "signoff", "worker"],
        cwd=cwd,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_for(condition, seconds: float = 30) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def test_sigkill_mid_delivery_then_another_worker_delivers_the_same_event(
    postgres_database: str, tmp_path: Path
) -> None:
    from tests.conftest import reset_postgres

    reset_postgres(postgres_database)
    settings = Settings(
        database_url=postgres_database,
        bootstrap_admin_key=ADMIN_KEY,
        run_workers=False,
        webhook_allow_private_networks=True,
        encryption_keys=TEST_ENCRYPTION_KEY,
    )
    env = {
        "SIGNOFF_DATABASE_URL": postgres_database,
        "SIGNOFF_ENCRYPTION_KEYS": TEST_ENCRYPTION_KEY,  # the worker reads the same secrets
        "SIGNOFF_WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
        "SIGNOFF_WEBHOOK_ATTEMPT_LEASE_SECONDS": "2",
        "SIGNOFF_WEBHOOK_TIMEOUT_SECONDS": "60",
        "SIGNOFF_DISPATCHER_POLL_SECONDS": "0.1",
    }
    with Receiver() as receiver, live_server(settings, ManualClock(datetime.now(UTC))) as server:
        receiver.answer(Answer(200, delay_seconds=60))  # the first attempt hangs
        with server.admin() as admin:
            created = admin.post(
                "/webhook-endpoints", json={"url": receiver.url, "event_types": ["task.created"]}
            )
            assert created.status_code == 201, created.text
        with server.new_client("producer") as producer:
            producer.escalate(escalation())
        first = _worker(env, tmp_path)
        try:
            _wait_for(lambda: len(receiver.received) == 1)
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
        second = _worker(env, tmp_path)
        try:
            _wait_for(lambda: len(receiver.received) == 2)
            _wait_for(lambda: server.rows("webhook_deliveries")[0]["status"] == "SUCCEEDED")
        finally:
            second.send_signal(signal.SIGTERM)
            assert second.wait(timeout=30) in (0, -signal.SIGTERM)
    first_id, second_id = receiver.ids()
    assert first_id == second_id


def test_sigterm_drains_the_attempt_in_flight(postgres_database: str, tmp_path: Path) -> None:
    from tests.conftest import reset_postgres

    reset_postgres(postgres_database)
    settings = Settings(
        database_url=postgres_database,
        bootstrap_admin_key=ADMIN_KEY,
        run_workers=False,
        webhook_allow_private_networks=True,
        encryption_keys=TEST_ENCRYPTION_KEY,
    )
    env = {
        "SIGNOFF_DATABASE_URL": postgres_database,
        "SIGNOFF_ENCRYPTION_KEYS": TEST_ENCRYPTION_KEY,  # the worker reads the same secrets
        "SIGNOFF_WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
        "SIGNOFF_DISPATCHER_POLL_SECONDS": "0.1",
    }
    with Receiver() as receiver, live_server(settings, ManualClock(datetime.now(UTC))) as server:
        receiver.answer(Answer(200, delay_seconds=2))
        with server.admin() as admin:
            created = admin.post(
                "/webhook-endpoints", json={"url": receiver.url, "event_types": ["task.created"]}
            )
            assert created.status_code == 201
        with server.new_client("producer") as producer:
            producer.escalate(escalation())
        worker = _worker(env, tmp_path)
        _wait_for(lambda: len(receiver.received) == 1)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
        (delivery,) = server.rows("webhook_deliveries")
    assert delivery["status"] == "SUCCEEDED"
    assert delivery["attempt_count"] == 1
