"""A full disk under SQLite: ``signoff serve`` runs on a small file system of its own (a
``tmpfs`` mounted in a user and mount namespace of the process, no privileges needed)
that a filler file has all but filled. Writes answer 503 saying the disk is full, with
one warning line naming the cause; ``/readyz`` says not ready; once the filler is
removed (through ``/proc/<pid>/root``) both recover by themselves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.pgcluster import free_port
from tests.processes import wait_for
from tests.support import ADMIN_KEY, escalation

pytestmark = pytest.mark.slow

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
#: The file system's size, and the room the filler leaves (a few escalations' worth).
DISK = "8m"
ROOM_KIB = 160


class Served:
    def __init__(self, process: subprocess.Popen[bytes], port: int) -> None:
        self.process = process
        self.base_url = f"http://127.0.0.1:{port}"
        self.lines: list[str] = []
        # The log goes to a pipe: a file would meet the size limit too.
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            self.lines.append(raw.decode(errors="replace"))

    def events(self, name: str) -> list[dict[str, Any]]:
        """The log's ``name`` events, once one has come through the pipe (the server
        may write its log line after the answer it gave)."""
        wait_for(
            lambda: any(f'"{name}"' in line for line in list(self.lines)),
            seconds=10,
            what=f"the log line {name}",
        )
        found = []
        for line in list(self.lines):
            if line.startswith("{") and f'"{name}"' in line:
                event = json.loads(line)
                if event.get("event") == name:
                    found.append(event)
        return found


@contextmanager
def serve_on_a_small_disk(folder: Path) -> Iterator[Served]:
    port = free_port()
    database = folder / "signoff.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")} | {
        "SIGNOFF_DATABASE_URL": f"sqlite:///{database}",
        "SIGNOFF_BOOTSTRAP_ADMIN_KEY": ADMIN_KEY,
        "SIGNOFF_RUN_WORKERS": "false",  # only the requests write
    }
    signoff = f"{sys.executable} -m signoff"
    script = (
        f"mount -t tmpfs -o size={DISK} tmpfs {folder} && {signoff} migrate >/dev/null && "
        f"(dd if=/dev/zero of={folder}/filler bs=64k 2>/dev/null; true) && "
        f"truncate -s -{ROOM_KIB}K {folder}/filler && "
        f"exec {signoff} serve --port {port}"
    )
    process = subprocess.Popen(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    served = Served(process, port)
    try:
        wait_for(lambda: _answers(served), seconds=60, what="signoff serve to start")
        yield served
    finally:
        process.terminate()
        process.wait(timeout=30)


def _answers(served: Served) -> bool:
    assert served.process.poll() is None, "".join(served.lines)[-2000:]
    try:
        return httpx.get(f"{served.base_url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_full_disk_answers_503_says_why_and_readyz_follows(tmp_path: Path) -> None:
    with (
        serve_on_a_small_disk(tmp_path) as served,
        httpx.Client(base_url=served.base_url, headers=ADMIN, timeout=30) as admin,
    ):
        key = admin.post("/api-keys", json={"role": "producer", "principal_id": "bot"})
        producer = {"Authorization": f"Bearer {key.json()['key']}"}
        assert admin.get("/readyz").status_code == 200
        answers = []
        for _ in range(2000):
            answers.append(
                httpx.post(
                    f"{served.base_url}/tasks/escalate",
                    headers=producer,
                    json=escalation(),
                    timeout=30,
                )
            )
            if answers[-1].status_code == 503:
                break
        full = answers[-1]
        assert full.status_code == 503, [a.status_code for a in answers]
        assert full.headers["content-type"].startswith("application/problem+json")
        assert full.headers["retry-after"] == "1"
        assert full.json()["error_code"] == "ERR_NOT_READY"
        assert "disk is full" in full.json()["detail"]
        warnings = served.events("database.unavailable")
        assert [w["cause"] for w in warnings] == ["disk_full"]
        assert not any("Traceback" in line for line in served.lines)

        not_ready = admin.get("/readyz")
        assert not_ready.status_code == 503
        assert "disk is full" in not_ready.json()["detail"]

        # Room again: the filler, seen through the server's own mount namespace.
        (Path(f"/proc/{served.process.pid}/root") / tmp_path.relative_to("/") / "filler").unlink()
        assert admin.get("/readyz").status_code == 200
        again = httpx.post(f"{served.base_url}/tasks/escalate", headers=producer, json=escalation())
        assert again.status_code == 201, again.text
