"""Schemathesis against the service's own ``/openapi.json``, on SQLite and PostgreSQL.

Runs the schemathesis CLI (all phases: examples, coverage, fuzzing, and stateful, with
links it infers from the document) with a bounded number of examples per operation, one
API key per role, and every check except the deliberate exceptions listed and explained
in ``tests/property/schemathesis.toml``. The run must end with no failure: no 5xx, and
every response conforming to its documented status, content type, headers and schema.

CI covers **every** operation in the document: a new endpoint is fuzzed as soon as it
exists (its role's key is chosen in ``schemathesis.toml``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx

from tests.support import ADMIN_KEY, LiveServer, escalation

CONFIG = Path(__file__).with_name("schemathesis.toml")
EXAMPLES_PER_OPERATION = 10


def test_schemathesis_finds_no_failure(server: LiveServer, tmp_path: Path) -> None:
    document = httpx.get(f"{server.base_url}/openapi.json").json()
    operation_count = sum(len(methods) for methods in document["paths"].values())
    with server.new_client("producer", "st-producer") as p, server.new_client("reviewer") as r:
        keys = {"SIGNOFF_ST_PRODUCER_KEY": p.key, "SIGNOFF_ST_REVIEWER_KEY": r.key}
        task = p.escalate(escalation())
        assert task.status_code == 201, task.text
    environment = os.environ | keys
    environment |= {
        "SIGNOFF_ST_ADMIN_KEY": ADMIN_KEY,
        "SIGNOFF_ST_TASK_ID": task.json()["id"],
        "NO_COLOR": "1",
    }
    command = [
        str(Path(sys.executable).with_name("schemathesis")),
        "--config-file",
        str(CONFIG),
        "run",
        f"{server.base_url}/openapi.json",
        "--max-examples",
        str(EXAMPLES_PER_OPERATION),
        "--generation-database",
        "none",
        "--warnings",
        "off",
    ]
    if os.environ.get("CI"):
        command += ["--seed", "20261130"]  # CI explores the same cases every run
    result = subprocess.run(
        command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=600
    )
    summary = result.stdout[result.stdout.find("SUMMARY") :]
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr[-2000:]
    # It really exercised the API: every selected operation, and the stateful phase ran.
    selected = re.search(r"Selected: (\d+)/\d+", summary)
    tested = re.search(r"Tested: (\d+)", summary)
    assert selected, summary
    assert tested, summary
    assert int(tested.group(1)) == int(selected.group(1)) == operation_count
    assert re.search(r"✅ Stateful", summary), summary
