"""``signoff serve`` and ``signoff worker`` as real processes, for tests that kill them,
stop them or take their database away. Each keeps its log (JSON lines) in a file and is
always reaped: use them as context managers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from tests.pgcluster import free_port


def wait_for(condition: Callable[[], object], *, seconds: float = 90, what: str = "") -> None:
    """Poll ``condition`` until true; fail after ``seconds`` (a bound, not a clock)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what or condition}"
        time.sleep(0.05)


class Process:
    """One ``python -m signoff <args>`` with ``env`` (on top of a clean environment)."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.args = args
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")} | env
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as sink:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "signoff", *self.args],
                env=self.env,
                stdout=sink,
                stderr=sink,
                start_new_session=True,  # a signal to the test's group must not reach it
            )

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing runs after it."""
        if self.alive():
            assert self.process is not None
            os.killpg(self.process.pid, signal.SIGKILL)  # uvicorn's workers too
            self.process.wait(timeout=30)

    def terminate(self, *, seconds: float = 60) -> int:
        """SIGTERM, then wait for the drain; returns the exit code."""
        assert self.process is not None
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=seconds)

    def events(self) -> list[dict[str, Any]]:
        """The structured log lines written so far."""
        lines = []
        for line in self.log.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    lines.append(json.loads(line))
                except ValueError:
                    continue
        return lines

    def __enter__(self) -> Process:
        self.start()
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        if _type is not None and self.log.exists():  # shown with the failure
            tail = self.log.read_text(errors="replace").splitlines()[-40:]
            print(
                f"--- signoff {' '.join(self.args)}: last lines of {self.log} ---", *tail, sep="\n"
            )
        if self.alive():
            assert self.process is not None
            with_group = self.process.pid
            try:
                self.terminate(seconds=20)
            except subprocess.TimeoutExpired:
                os.killpg(with_group, signal.SIGKILL)
                self.process.wait(timeout=20)


class Server(Process):
    """``signoff serve`` on a fixed loopback port (kept across restarts)."""

    def __init__(self, env: dict[str, str], log: Path, *, port: int | None = None) -> None:
        self.port = port or free_port()
        super().__init__(["serve", "--host", "127.0.0.1", "--port", str(self.port)], env, log)
        self.base_url = f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        super().start()
        wait_for(self._answers, seconds=60, what="signoff serve to answer /healthz")

    def _answers(self) -> bool:
        assert self.alive(), f"signoff serve exited: {self.log.read_text()[-2000:]}"
        try:
            return httpx.get(f"{self.base_url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False


def worker(env: dict[str, str], log: Path) -> Process:
    return Process(["worker"], env, log)
