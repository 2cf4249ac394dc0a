"""The README's round trip, run as written against a real ``signoff serve``.

The bash blocks of "A first round trip" run in order: a block starting ``# terminal 2``
is a long-running command (started in the background and left running), the others run
in one bash session with ``set -euo pipefail``. Only the ports (8000, 9000) are changed,
to free ones, and ``ADMIN=signoff_...`` gets the key the server printed. Then the
receiver must have printed the decision, and a second run of the blocks must work too
(the quick start is re-runnable), also after ``serve --demo``.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.acceptance.test_cli import free_port, serve

ROOT = Path(__file__).resolve().parents[2]


def round_trip_blocks() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## A first round trip", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.DOTALL)
    assert len(blocks) >= 2, "the round trip has a receiver block and a client block"
    return blocks


def as_run_here(block: str, *, admin_key: str, port: int, receiver_port: int) -> str:
    text = block.replace(":8000", f":{port}").replace("--port 9000", f"--port {receiver_port}")
    text = re.sub(r"^ADMIN=signoff_\.\.\..*$", f"ADMIN={admin_key}", text, flags=re.MULTILINE)
    if not (ROOT / ".venv/bin/signoff").exists():
        text = text.replace(".venv/bin/signoff", str(Path(sys.executable).with_name("signoff")))
    return text


def wait_for_port(port: int, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, process.communicate()
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        assert time.monotonic() < deadline, "the receiver did not start"
        time.sleep(0.1)


def wait_for_line(path: Path, pattern: str, count: int) -> list[str]:
    deadline = time.monotonic() + 60
    while True:
        lines = [line for line in path.read_text().splitlines() if re.search(pattern, line)]
        if len(lines) >= count:
            return lines
        assert time.monotonic() < deadline, f"{pattern!r} x{count} not in {path.read_text()}"
        time.sleep(0.2)


@pytest.mark.parametrize("demo", [False, True], ids=["plain", "after-demo"])
def test_the_readme_round_trip_runs_as_written(tmp_path: Path, demo: bool) -> None:
    receiver_port = free_port()
    environment = {"SIGNOFF_WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true"}  # as ./scripts/serve
    with serve(tmp_path, *(["--demo"] if demo else []), env=environment) as served:
        served.output.append(served.process.stdout.readline())  # type: ignore[union-attr]
        admin_key = served.key("Admin API key")
        port = int(served.base_url.rsplit(":", 1)[1])
        receiver_block, *client_blocks = round_trip_blocks()
        assert receiver_block.startswith("# terminal 2")
        printed = tmp_path / "receiver.out"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
        with printed.open("w") as out:
            receiver = subprocess.Popen(
                [
                    "bash",
                    "-c",
                    as_run_here(
                        receiver_block, admin_key=admin_key, port=port, receiver_port=receiver_port
                    ),
                ],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        try:
            wait_for_port(receiver_port, receiver)
            script = "set -euo pipefail\n" + "\n".join(
                as_run_here(b, admin_key=admin_key, port=port, receiver_port=receiver_port)
                for b in client_blocks
            )
            for run in (1, 2):
                result = subprocess.run(
                    ["bash", "-c", script],
                    cwd=ROOT,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                assert result.returncode == 0, (run, result.stdout, result.stderr)
                assert "RESOLVED" in result.stdout
                assert "Traceback" not in result.stderr
                decided = wait_for_line(
                    printed, r"^task\.resolved .*decision REJECTED\s+by usr_op_771", run
                )
            assert "rejected a delivery" not in printed.read_text()
            assert len(decided) == 2
        finally:
            os.killpg(receiver.pid, signal.SIGTERM)
            receiver.wait(timeout=30)
