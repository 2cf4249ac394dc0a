"""Webhook delivery benchmark: resolve-to-delivered latency and deliveries per second.

For each receiver delay (0 ms and 100 ms by default) and on a fresh database each time:

* **latency run** — a real ``signoff serve`` (workers on) and a real receiver on
  127.0.0.1 that timestamps each arrival. N tasks are escalated and claimed (not timed),
  then resolved by ``--concurrency`` clients; for each task the latency is from the
  moment its resolve response arrived to the moment its ``task.resolved`` arrived at the
  receiver (``time.monotonic``, one system-wide clock, receiver in its own process).
  "Deliveries/s" here is N over the time from the first resolve response to the last
  arrival, so it is capped by how fast the resolves themselves go (also printed).
* **drain run** — the same N resolves with ``SIGNOFF_RUN_WORKERS=false``, so the
  deliveries pile up in the outbox; then one ``signoff worker`` starts and delivers the
  backlog. Deliveries/s is (N − 1) over first-to-last arrival: the dispatcher's capacity.

The endpoint subscribes to ``task.resolved`` only. The receiver does not verify
signatures. Everything is on loopback; every wait is bounded. Not run by the test suite.

    python -m bench.webhooks                     # SQLite, 300 tasks, receivers 0 and 100 ms
    python -m bench.webhooks --postgres          # a fresh PostgreSQL database per run
    python -m bench.webhooks --tasks 200 --concurrency 1 --modes latency
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import multiprocessing
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import rfc8785
from bench.common import percentile

ADMIN_KEY = "bench-webhooks-admin-key-0123456789"
PG = ["-h", "127.0.0.1", "-U", "postgres"]


# --- the receiver (its own process) -------------------------------------------------------
def receiver_main(port_out: Any, arrivals: Any, delay_seconds: float) -> None:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a production receiver would
        # The answer goes out as two writes (headers, then body): without TCP_NODELAY,
        # Nagle's algorithm holds the body for the sender's delayed ACK (~40 ms), which
        # a production HTTP server does not do.
        disable_nagle_algorithm = True

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            arrived = time.monotonic()
            event = json.loads(body)
            arrivals.put((event["type"], event["data"]["id"], event["id"], arrived))
            if delay_seconds:
                time.sleep(delay_seconds)
            self.send_response(200)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *_args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        request_queue_size = 512
        daemon_threads = True

    server = Server(("127.0.0.1", 0), Handler)
    port_out.put(server.server_address[1])
    server.serve_forever()


@contextmanager
def receiver(delay_ms: float) -> Iterator[tuple[str, Any]]:
    context = multiprocessing.get_context("spawn")
    port_out, arrivals = context.Queue(), context.Queue()
    process = context.Process(
        target=receiver_main, args=(port_out, arrivals, delay_ms / 1000), daemon=True
    )
    process.start()
    try:
        yield f"http://127.0.0.1:{port_out.get(timeout=30)}/hook", arrivals
    finally:
        process.terminate()
        process.join(timeout=10)


# --- Signoff processes --------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def service_env(database_url: str, run_workers: bool, poll_seconds: float | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    env |= {
        "SIGNOFF_DATABASE_URL": database_url,
        "SIGNOFF_BOOTSTRAP_ADMIN_KEY": ADMIN_KEY,
        "SIGNOFF_WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",  # the receiver is on loopback
        "SIGNOFF_RUN_WORKERS": "true" if run_workers else "false",
    }
    if poll_seconds is not None:
        env["SIGNOFF_DISPATCHER_POLL_SECONDS"] = str(poll_seconds)
    return env


@contextmanager
def process(command: list[str], env: dict[str, str], cwd: str) -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        yield child
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(timeout=10)


@contextmanager
def signoff_serve(env: dict[str, str], cwd: str) -> Iterator[str]:
    port = free_port()
    command = [sys.executable, "-m", "signoff", "serve", "--host", "127.0.0.1"]
    with process([*command, "--port", str(port)], env, cwd) as child:
        base_url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            if child.poll() is not None:
                raise RuntimeError(f"signoff serve exited with {child.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError("signoff serve did not start within 60 s")
            try:
                if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        yield base_url


@contextmanager
def database(postgres: bool, label: str, workdir: str) -> Iterator[str]:
    if not postgres:
        yield f"sqlite:///{workdir}/signoff-{label}.db"
        return
    name = f"bench_hooks_{label}_{os.getpid()}"
    subprocess.run(["dropdb", *PG, "--if-exists", "--force", name], check=True)
    subprocess.run(["createdb", *PG, name], check=True)
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        subprocess.run(["dropdb", *PG, "--if-exists", "--force", name], check=True)


# --- driving tasks ------------------------------------------------------------------------
def escalation() -> dict[str, Any]:
    actions = [{"action": "rerun_rules", "executed_at": "2026-11-30T08:00:00Z", "result": "failed"}]
    return {
        "escalation_id": str(uuid.uuid4()),
        "idempotency_key": f"bench-{uuid.uuid4().hex}",
        "entity_type": "bench",
        "entity_id": f"b_{uuid.uuid4().hex[:16]}",
        "reason_code": "BENCH",
        "precheck_hash": hashlib.sha256(rfc8785.dumps(actions)).hexdigest(),
        "diagnostic_bundle": {
            "trace_id": uuid.uuid4().hex,
            "attempted_actions": actions,
            "input_snapshot": {"amount": "100.00"},
            "evaluator_verdict": {"confidence_score": 0.4, "threshold": 0.9},
        },
    }


async def gather_bounded(concurrency: int, coroutines: list[Any]) -> list[Any]:
    gate = asyncio.Semaphore(concurrency)

    async def one(coroutine: Any) -> Any:
        async with gate:
            return await coroutine

    return await asyncio.gather(*(one(c) for c in coroutines))


def setup(base_url: str, hook_url: str) -> tuple[str, str]:
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    keys = []
    for role in ("producer", "reviewer"):
        created = httpx.post(
            f"{base_url}/api-keys", headers=admin, json={"role": role, "principal_id": role}
        )
        created.raise_for_status()
        keys.append(created.json()["key"])
    httpx.post(
        f"{base_url}/webhook-endpoints",
        headers=admin,
        json={"url": hook_url, "event_types": ["task.resolved"]},
    ).raise_for_status()
    return keys[0], keys[1]


async def prepare_and_resolve(
    base_url: str, producer: str, reviewer: str, tasks: int, concurrency: int
) -> dict[str, tuple[float, float]]:
    """Escalate and claim ``tasks`` tasks (untimed), then resolve them all; returns
    task id → (resolve sent, resolve answered), monotonic seconds."""
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, timeout=60, limits=limits) as client:
        as_producer = {"Authorization": f"Bearer {producer}"}
        as_reviewer = {"Authorization": f"Bearer {reviewer}"}

        async def escalate() -> str:
            response = await client.post("/tasks/escalate", json=escalation(), headers=as_producer)
            response.raise_for_status()
            return str(response.json()["id"])

        async def claim(task_id: str) -> tuple[str, str]:
            response = await client.post(f"/tasks/{task_id}/claim", headers=as_reviewer)
            response.raise_for_status()
            return task_id, str(response.json()["lease_token"])

        async def resolve(task_id: str, token: str) -> tuple[str, tuple[float, float]]:
            sent = time.monotonic()
            response = await client.post(
                f"/tasks/{task_id}/resolve",
                headers=as_reviewer | {"X-Lease-Token": token},
                json={"decision": "APPROVED"},
            )
            answered = time.monotonic()
            response.raise_for_status()
            return task_id, (sent, answered)

        ids = await gather_bounded(concurrency, [escalate() for _ in range(tasks)])
        leases = await gather_bounded(concurrency, [claim(i) for i in ids])
        resolved = await gather_bounded(concurrency, [resolve(i, t) for i, t in leases])
    return dict(resolved)


def collect(arrivals: Any, expected: set[str], timeout: float) -> dict[str, float]:
    """First arrival of ``task.resolved`` per task, waiting at most ``timeout`` seconds."""
    seen: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while not expected <= seen.keys():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            event_type, task_id, _event_id, arrived = arrivals.get(timeout=min(remaining, 1))
        except queue.Empty:
            continue
        if event_type == "task.resolved" and task_id not in seen:
            seen[task_id] = arrived
    return seen


@dataclass
class Result:
    mode: str
    delay_ms: float
    tasks: int
    delivered: int
    resolves_per_s: float
    deliveries_per_s: float
    min_ms: float | None
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    latencies_ms: list[float] | None = None  # every task's, in the JSON output only

    def row(self) -> str:
        def ms(value: float | None) -> str:
            return "-" if value is None else f"{value:.0f}"

        return (
            f"| {self.mode} | {self.delay_ms:.0f} ms | {self.delivered}/{self.tasks} | "
            f"{self.resolves_per_s:.0f} | {self.deliveries_per_s:.0f} | {ms(self.min_ms)} | "
            f"{ms(self.p50_ms)} | "
            f"{ms(self.p99_ms)} | {ms(self.max_ms)} |"
        )


def run_latency(args: argparse.Namespace, delay_ms: float, workdir: str) -> Result:
    label = f"lat{int(delay_ms)}"
    with (
        database(args.postgres, label, workdir) as url,
        receiver(delay_ms) as (hook_url, arrivals),
        signoff_serve(service_env(url, True, args.poll_seconds), workdir) as base_url,
    ):
        producer, reviewer = setup(base_url, hook_url)
        resolved = asyncio.run(
            prepare_and_resolve(base_url, producer, reviewer, args.tasks, args.concurrency)
        )
        arrived = collect(arrivals, set(resolved), args.timeout)
    latencies = [
        (arrived[t] - answered) * 1000 for t, (_, answered) in resolved.items() if t in arrived
    ]
    first_sent = min(sent for sent, _ in resolved.values())
    last_answer = max(answered for _, answered in resolved.values())
    first_answer = min(answered for _, answered in resolved.values())
    span = (max(arrived.values()) - first_answer) if arrived else float("nan")
    return Result(
        "latency",
        delay_ms,
        args.tasks,
        len(arrived),
        args.tasks / (last_answer - first_sent),
        len(arrived) / span,
        min(latencies, default=float("nan")),
        percentile(latencies, 0.5),
        percentile(latencies, 0.99),
        max(latencies, default=float("nan")),
        [round(x, 2) for x in latencies],
    )


def run_drain(args: argparse.Namespace, delay_ms: float, workdir: str) -> Result:
    label = f"drain{int(delay_ms)}"
    with (
        database(args.postgres, label, workdir) as url,
        receiver(delay_ms) as (hook_url, arrivals),
    ):
        with signoff_serve(service_env(url, False, args.poll_seconds), workdir) as base_url:
            producer, reviewer = setup(base_url, hook_url)
            resolved = asyncio.run(
                prepare_and_resolve(base_url, producer, reviewer, args.tasks, args.concurrency)
            )
        first_sent = min(sent for sent, _ in resolved.values())
        last_answer = max(answered for _, answered in resolved.values())
        worker = [sys.executable, "-m", "signoff", "worker"]
        with process(worker, service_env(url, True, args.poll_seconds), workdir):
            arrived = collect(arrivals, set(resolved), args.timeout)
    times = sorted(arrived.values())
    rate = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else float("nan")
    return Result(
        "drain",
        delay_ms,
        args.tasks,
        len(arrived),
        args.tasks / (last_answer - first_sent),
        rate,
        None,
        None,
        None,
        None,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=8, help="concurrent API clients")
    parser.add_argument("--delays-ms", type=float, nargs="+", default=[0, 100])
    parser.add_argument("--postgres", action="store_true", help="fresh PostgreSQL databases")
    parser.add_argument(
        "--poll-seconds", type=float, help="SIGNOFF_DISPATCHER_POLL_SECONDS (default: Signoff's)"
    )
    parser.add_argument("--modes", nargs="+", default=["latency", "drain"])
    parser.add_argument("--timeout", type=float, default=180, help="longest wait for arrivals")
    parser.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args()

    meta = {
        "database": "postgresql" if args.postgres else "sqlite",
        "tasks": args.tasks,
        "concurrency": args.concurrency,
        "poll_seconds": args.poll_seconds,
        "cpus": os.cpu_count(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "python": sys.version.split()[0],
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    print(json.dumps(meta))
    print(
        "| run | receiver | delivered | resolves/s | deliveries/s "
        "| min ms | p50 ms | p99 ms | max ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    results = []
    with tempfile.TemporaryDirectory() as workdir:
        for delay_ms in args.delays_ms:
            for mode in args.modes:
                run = run_latency if mode == "latency" else run_drain
                result = run(args, delay_ms, workdir)
                results.append(result)
                print(result.row(), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"meta": meta, "runs": [r.__dict__ for r in results]}))


if __name__ == "__main__":
    main()
