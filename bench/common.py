"""Shared plumbing for the benchmarks: a throw-away PostgreSQL database, a real
``signoff serve`` subprocess, API keys, pgbench runs and latency percentiles.

Everything stays on loopback (127.0.0.1). Nothing here runs from the test suite.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

PG_SERVER = os.environ.get("BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
ADMIN_KEY = "bench-admin-key-0123456789abcdef"
#: The encryption key files of the runs' databases (private to this user).
KEYS = Path(tempfile.gettempdir()) / "signoff-bench-keys"


def _key_file(database_url: str) -> Path:
    KEYS.mkdir(mode=0o700, exist_ok=True)
    name = Path(database_url.rsplit("/", 1)[-1].split("?", 1)[0] or "database").name
    return KEYS / f"{name}.key"


def pg_url(database: str) -> str:
    return PG_SERVER.rsplit("/", 1)[0] + "/" + database


def psql(database: str, sql: str, *, quiet: bool = True) -> str:
    """Run SQL with psql against ``database``; returns stdout (unaligned, tuples only)."""
    command = ["psql", pg_url(database), "-v", "ON_ERROR_STOP=1", "-At", "-c", sql]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return result.stdout.strip()


@contextmanager
def fresh_pg_database(name: str) -> Iterator[str]:
    """A new, empty PostgreSQL database, migrated by ``signoff migrate``; dropped after."""
    psql("postgres", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    psql("postgres", f'CREATE DATABASE "{name}"')
    try:
        env = _service_env(pg_url(name))
        subprocess.run(
            [sys.executable, "-m", "signoff", "migrate"], env=env, check=True, capture_output=True
        )
        yield name
    finally:
        psql("postgres", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _service_env(database_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    env |= {
        "SIGNOFF_DATABASE_URL": database_url,
        # One key file per database for every process of a run (`migrate` and each
        # `serve` start in different folders; the default is the working folder's).
        "SIGNOFF_KEY_FILE": str(_key_file(database_url)),
        "SIGNOFF_BOOTSTRAP_ADMIN_KEY": ADMIN_KEY,
        "SIGNOFF_LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "info"),  # the default
        **(
            {"SIGNOFF_WORKERS": os.environ["BENCH_WORKERS"]}
            if "BENCH_WORKERS" in os.environ
            else {}
        ),
    }
    return env | extra


@dataclass
class Service:
    """A running ``signoff serve``: its base URL and process."""

    base_url: str
    process: subprocess.Popen[bytes]

    def key(self, role: str, principal_id: str) -> str:
        created = httpx.post(
            f"{self.base_url}/api-keys",
            headers={"Authorization": f"Bearer {ADMIN_KEY}"},
            json={"role": role, "principal_id": principal_id},
        )
        created.raise_for_status()
        return str(created.json()["key"])


@contextmanager
def signoff_serve(
    database_url: str, *, profile: Path | None = None, env: dict[str, str] | None = None
) -> Iterator[Service]:
    """Start ``python -m signoff serve`` on a free loopback port (optionally under
    cProfile, written to ``profile`` on exit); stop it with SIGTERM afterwards."""
    port = free_port()
    command = [sys.executable]
    if profile is not None:
        command += ["-m", "cProfile", "-o", str(profile)]
    command += ["-m", "signoff", "serve", "--host", "127.0.0.1", "--port", str(port)]
    with tempfile.TemporaryDirectory() as cwd:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=_service_env(database_url, **(env or {})),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        base_url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"signoff serve exited with {process.returncode}")
                if time.monotonic() > deadline:
                    raise RuntimeError("signoff serve did not start")
                try:
                    if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.1)
            yield Service(base_url, process)
        finally:
            process.send_signal(signal.SIGINT if profile is not None else signal.SIGTERM)
            process.wait(timeout=60)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0–1) of ``values`` by nearest rank."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


@dataclass
class Figures:
    """One measured run: ``rate`` operations per second; latencies in milliseconds."""

    label: str
    concurrency: int
    operations: int
    seconds: float
    latencies_ms: list[float]

    @property
    def rate(self) -> float:
        return self.operations / self.seconds

    def as_dict(self) -> dict[str, object]:
        return {
            "label": self.label,
            "concurrency": self.concurrency,
            "operations": self.operations,
            "seconds": round(self.seconds, 3),
            "rate_per_s": round(self.rate, 1),
            "p50_ms": round(percentile(self.latencies_ms, 0.5), 2),
            "p99_ms": round(percentile(self.latencies_ms, 0.99), 2),
        }


def pgbench(database: str, script: str, *, clients: int, transactions: int, label: str) -> Figures:
    """Run ``pgbench -f script`` with ``clients`` connections for ``transactions`` script
    runs in total (bounded), logging every transaction to compute p50/p99."""
    per_client = max(1, transactions // clients)
    with tempfile.TemporaryDirectory() as workdir:
        script_path = Path(workdir) / "script.sql"
        script_path.write_text(script)
        command = [
            "pgbench",
            "-n",
            "-f",
            str(script_path),
            "-c",
            str(clients),
            "-j",
            str(min(clients, 2)),
            "-t",
            str(per_client),
            "-l",
            "--log-prefix",
            str(Path(workdir) / "log"),
            pg_url(database),
        ]
        result = subprocess.run(command, capture_output=True, text=True, check=True)
        latencies = []
        for log in Path(workdir).glob("log*"):
            for line in log.read_text().splitlines():
                latencies.append(int(line.split()[2]) / 1000)  # µs → ms
    tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", result.stdout)
    assert tps, result.stdout
    done = clients * per_client
    return Figures(label, clients, done, done / float(tps.group(1)), latencies)


def write_results(path: Path, results: list[Figures], meta: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": meta, "runs": [r.as_dict() for r in results]}, indent=2))


def machine() -> dict[str, object]:
    """What the figures were measured on (the box is shared with other work)."""
    load = os.getloadavg()
    return {
        "cpus": os.cpu_count(),
        "loadavg_at_start": [round(x, 2) for x in load],
        "python": sys.version.split()[0],
        "postgres": psql("postgres", "SHOW server_version"),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


@contextmanager
def pgbouncer(database: str, *, pool_size: int = 20) -> Iterator[str]:
    """PgBouncer (transaction pooling) on a free port in front of the benchmark server;
    yields the database URL through it."""
    port = free_port()
    with tempfile.TemporaryDirectory() as workdir:
        os.chmod(workdir, 0o755)
        (Path(workdir) / "users.txt").write_text('"postgres" ""\n')
        ini = Path(workdir) / "pgbouncer.ini"
        ini.write_text(
            "[databases]\n* = host=127.0.0.1 port=5432\n[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {workdir}/users.txt\npool_mode = transaction\n"
            f"max_client_conn = 1000\ndefault_pool_size = {pool_size}\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
        )
        command = ["pgbouncer", str(ini)]
        if os.geteuid() == 0:
            command[1:1] = ["-u", "nobody"]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(200):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.05)
            yield f"postgresql://postgres@127.0.0.1:{port}/{database}"
        finally:
            process.terminate()
            process.wait(timeout=20)
