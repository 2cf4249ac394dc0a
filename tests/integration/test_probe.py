"""``python -m signoff.probe``: the image's health check and the readiness probe ask a
live server, on the port ``SIGNOFF_PORT`` names, with the key the environment holds."""

from __future__ import annotations

import subprocess
import sys

from signoff import probe
from tests.support import ADMIN_KEY, LiveServer


def run_probe(path: str, env: dict[str, str]) -> int:
    return subprocess.run(
        [sys.executable, "-m", "signoff.probe", path], env=env, timeout=60, check=False
    ).returncode


def test_the_probe_passes_when_the_server_answers_and_fails_when_it_refuses(
    server: LiveServer,
) -> None:
    base = {"PATH": "/usr/bin:/bin", "SIGNOFF_PORT": str(server.port)}
    assert run_probe("/healthz", base) == 0
    # /readyz needs a key: without one the server answers 401 and the probe fails.
    assert run_probe("/readyz", base) == 1
    assert run_probe("/readyz", base | {probe.KEY_VARIABLE: ADMIN_KEY}) == 0
    assert run_probe("/readyz", base | {probe.KEY_VARIABLE: "not-a-key-at-all"}) == 1
    # Nothing listening: a failure, not a traceback.
    server.stop()
    assert run_probe("/healthz", base) == 1
