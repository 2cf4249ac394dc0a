"""Verified API keys are cached per process; a revocation still takes effect at once on
every replica. Two real ``signoff serve`` processes on one PostgreSQL database: a key is
used (and cached) on B, revoked through A, and refused by B on the very next request."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from tests.conftest import TEST_ENCRYPTION_KEY, reset_postgres
from tests.support import ADMIN_KEY

pytestmark = pytest.mark.postgres


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    env |= {
        "SIGNOFF_DATABASE_URL": database_url,
        "SIGNOFF_BOOTSTRAP_ADMIN_KEY": ADMIN_KEY,
        "SIGNOFF_WORKERS": "1",
        "SIGNOFF_LOG_LEVEL": "warning",
        # Replicas share one encryption key: each would otherwise make its own in its
        # folder, and could not open the receipts' signing key the first one made.
        "SIGNOFF_ENCRYPTION_KEYS": TEST_ENCRYPTION_KEY,
    }
    command = [sys.executable, "-m", "signoff", "serve", "--port", str(port)]
    process = subprocess.Popen(
        command,
        cwd=tmp_path_factory.mktemp("serve"),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, "signoff serve exited"
            assert time.monotonic() < deadline, "signoff serve did not start"
            try:
                if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)  # waiting for a subprocess to listen, not standing in for a clock
        yield base_url
    finally:
        process.terminate()
        process.wait(timeout=60)


def _cache_hits(base_url: str) -> float:
    metrics = httpx.get(f"{base_url}/metrics", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    for line in metrics.text.splitlines():
        if line.startswith('signoff_api_key_cache_total{result="hit"}'):
            return float(line.split()[-1])
    return 0.0


def test_a_revocation_reaches_every_replica_at_once(
    postgres_database: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    reset_postgres(postgres_database)
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with (
        serve(postgres_database, tmp_path_factory) as a,
        serve(postgres_database, tmp_path_factory) as b,
    ):
        # B caches once its LISTEN connection is up (until then it asks the database).
        for _ in range(200):
            hits = _cache_hits(b)
            if _cache_hits(b) > hits:
                break
            time.sleep(0.05)  # waiting for a subprocess, not standing in for a clock
        else:
            raise AssertionError("B never enabled its key cache")
        hits = _cache_hits(b)
        for n in range(5):
            created = httpx.post(
                f"{a}/api-keys", headers=admin, json={"role": "reviewer", "principal_id": f"r{n}"}
            )
            assert created.status_code == 201, created.text
            key = {"Authorization": f"Bearer {created.json()['key']}"}
            for _ in range(3):  # used, hence cached, on B
                assert httpx.get(f"{b}/tasks", headers=key).status_code == 200
            assert _cache_hits(b) > hits
            hits = _cache_hits(b)
            revoked = httpx.delete(f"{a}/api-keys/{created.json()['id']}", headers=admin)
            assert revoked.status_code == 204
            refused = httpx.get(f"{b}/tasks", headers=key)
            assert refused.status_code == 401
            assert refused.json()["error_code"] == "ERR_UNAUTHENTICATED"
            assert httpx.get(f"{a}/tasks", headers=key).status_code == 401
