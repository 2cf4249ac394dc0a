"""Start-up: how long ``signoff --help`` takes, and how long ``signoff serve`` takes from
its start to the first 200 on ``/readyz`` on SQLite and on PostgreSQL (``--workers 2``
and the default), each on a database already migrated (a restart, as a container or a
script does it).

    python -m bench.startup --repeat 5     # JSON on stdout, also /tmp/signoff-bench/startup.json

Targets (docs/benchmarks.md): ``--help`` ≤ 0.3 s; ready ≤ 1 s on SQLite, ≤ 2 s on
PostgreSQL. Each figure is the median of ``--repeat`` starts, with the fastest and the
slowest and the load average before and after, and the start of a bare
``python -c pass`` for the interpreter's own share.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from bench.common import ADMIN_KEY, _service_env, free_port, fresh_pg_database, pg_url

SIGNOFF = str(Path(sys.executable).with_name("signoff"))
#: How often the clock polls /readyz while a server starts.
POLL_SECONDS = 0.01


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _summary(samples: list[float], before: float) -> dict[str, Any]:
    return {
        "median_s": round(statistics.median(samples), 3),
        "min_s": round(min(samples), 3),
        "max_s": round(max(samples), 3),
        "samples": [round(x, 3) for x in samples],
        "load": [before, _load()],
    }


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a running process and its live descendants (Linux
    ``/proc``): what a start costs, which waiting for a loaded machine's cores does not
    inflate as it does the wall time."""
    ticks = os.sysconf("SC_CLK_TCK")
    total, pending = 0.0, [pid]
    while pending:
        current = pending.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rpartition(")")[2].split()
            total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(child) for child in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def command_seconds(command: list[str], repeat: int) -> dict[str, Any]:
    """Wall time of a command that exits (``signoff --help``), ``repeat`` times, and its
    CPU time."""
    before, samples, cpu = _load(), [], []
    for _ in range(repeat):
        started, used = time.perf_counter(), _children_cpu()
        subprocess.run(command, check=True, capture_output=True)
        samples.append(time.perf_counter() - started)
        cpu.append(_children_cpu() - used)
    return _summary(samples, before) | {"cpu_median_s": round(statistics.median(cpu), 3)}


def ready_seconds(database_url: str, *, workers: int | None, cwd: str) -> tuple[float, float]:
    """One start of ``signoff serve``: seconds from its start to the first 200 on /readyz,
    and the CPU seconds its processes had used by then."""
    port = free_port()
    command = [SIGNOFF, "serve", "--host", "127.0.0.1", "--port", str(port)]
    if workers is not None:
        command += ["--workers", str(workers)]
    url = f"http://127.0.0.1:{port}/readyz"
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    started = time.perf_counter()
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=_service_env(database_url),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with httpx.Client(timeout=1) as client:
            while time.perf_counter() - started < 120:
                if process.poll() is not None:
                    raise RuntimeError(f"signoff serve exited with {process.returncode}")
                try:
                    if client.get(url, headers=headers).status_code == 200:
                        return time.perf_counter() - started, cpu_seconds(process.pid)
                except httpx.TransportError:
                    pass
                time.sleep(POLL_SECONDS)
        raise RuntimeError("signoff serve was not ready within 120 s")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


def serve_seconds(
    database_url: str, *, workers: int | None, repeat: int, cwd: str
) -> dict[str, Any]:
    # The first start migrates (a fresh database) and is not counted.
    ready_seconds(database_url, workers=workers, cwd=cwd)
    before = _load()
    starts = [ready_seconds(database_url, workers=workers, cwd=cwd) for _ in range(repeat)]
    cpu = statistics.median(used for _, used in starts)
    return _summary([wall for wall, _ in starts], before) | {
        "workers": workers or "default",
        "cpu_median_s": round(cpu, 3),
    }


def compile_package() -> None:
    """Compile Signoff's modules as installing a wheel (or the Containerfile) does: an
    editable install under ``PYTHONDONTWRITEBYTECODE`` would otherwise compile them at every
    start, which no installed server does."""
    spec = importlib.util.find_spec("signoff")
    assert spec is not None
    assert spec.submodule_search_locations
    for folder in spec.submodule_search_locations:
        subprocess.run([sys.executable, "-m", "compileall", "-q", folder], check=True)


def measure(repeat: int) -> dict[str, Any]:
    compile_package()
    results: dict[str, Any] = {
        "python_c_pass": command_seconds([sys.executable, "-c", "pass"], repeat),
        "help": command_seconds([SIGNOFF, "--help"], repeat),
    }
    print(json.dumps({"help": results["help"]}), flush=True)
    with tempfile.TemporaryDirectory() as cwd:
        os.chmod(cwd, 0o700)
        results["sqlite"] = serve_seconds(
            f"sqlite:///{cwd}/startup.db", workers=None, repeat=repeat, cwd=cwd
        )
        print(json.dumps({"sqlite": results["sqlite"]}), flush=True)
        with fresh_pg_database("signoff_bench_startup") as db:
            for workers in (2, None):
                key = f"postgresql_workers_{workers or 'default'}"
                results[key] = serve_seconds(pg_url(db), workers=workers, repeat=repeat, cwd=cwd)
                print(json.dumps({key: results[key]}), flush=True)
    return results


def rows(startup: dict[str, Any]) -> list[str]:
    """The benchmark table's rows (bench/run.py's Markdown)."""
    lines = [
        f"| `signoff --help` | {startup['help']['median_s']} s, CPU"
        f" {startup['help'].get('cpu_median_s')} s (bare interpreter"
        f" {startup['python_c_pass']['median_s']} s) | | | ≤ 0.3 s | {startup['help']['load']} |"
    ]
    for key, label, target in (
        ("sqlite", "serve → /readyz 200, SQLite", "≤ 1 s"),
        ("postgresql_workers_2", "serve → /readyz 200, PostgreSQL --workers 2", "≤ 2 s"),
        ("postgresql_workers_default", "serve → /readyz 200, PostgreSQL default", "≤ 2 s"),
    ):
        if key in startup:
            figure = startup[key]
            lines.append(
                f"| {label} | {figure['median_s']} s (min {figure['min_s']}, max"
                f" {figure['max_s']}; CPU {figure.get('cpu_median_s')} s) | | | {target} |"
                f" {figure['load']} |"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("/tmp/signoff-bench/startup.json"))
    args = parser.parse_args()
    results = measure(args.repeat)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print("\n".join(rows(results)))


if __name__ == "__main__":
    main()
