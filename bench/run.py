"""The speed harness: one command, every workload, ratios measured in the same run.

    python -m bench.run                      # all workloads, 10 s each
    python -m bench.run --seconds 20 --only w1 w2

It drives the real ``signoff serve`` (a subprocess on a free loopback port) with **wrk**
(a compiled load generator; Lua scripts in ``bench/wrk/`` build distinct valid
escalations) and runs **pgbench** on the same database, against the same tables, in the
same run, so the ratios survive a noisy machine. The load average is recorded next to
every figure. Benchmarks only: nothing here runs from the test suite.

Workloads (docs/benchmarks.md states the targets):

* ``w1``: escalations/s at 16 connections against pgbench inserting the same task row at
  16 clients; then the latency at about half that rate (wrk's per-request ``delay``).
* ``w2``: claim-next → resolve cycles/s (outbox included) against a pgbench script of the
  same two statements (``FOR UPDATE SKIP LOCKED`` claim, then the resolve update).
* ``w3``: the storm (70 % new, 20 % replays, 10 % new keys for an entity already queued):
  rate against W1's, 5xx count, and tasks in the table against 201s created.
* ``sqlite``: escalations/s at 4 connections on the embedded default.

Results: ``--out`` (JSON) and a Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import (
    Service,
    fresh_pg_database,
    machine,
    pg_url,
    pgbouncer,
    psql,
    signoff_serve,
)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "tests" / "data" / "example-escalation.json"


def load() -> float:
    return round(os.getloadavg()[0], 2)


def wrk(
    base_url: str,
    script: str,
    *args: str,
    connections: int,
    seconds: int,
    threads: int = 2,
) -> dict[str, Any]:
    """Run wrk with a Lua script from bench/wrk; returns the JSON its ``done()`` prints,
    with ``rate_per_s`` (requests) and the load average before and after."""
    before = load()
    command = [
        "wrk",
        f"-t{min(threads, connections)}",
        f"-c{connections}",
        f"-d{seconds}s",
        "--timeout",
        "30s",
        "-s",
        str(ROOT / "bench" / "wrk" / script),
        base_url,
        "--",
        *args,
    ]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=True)
    line = next(x for x in result.stdout.splitlines() if x.startswith("WRK_JSON "))
    figures: dict[str, Any] = json.loads(line.removeprefix("WRK_JSON "))
    figures["rate_per_s"] = round(figures["requests"] / (figures["duration_us"] / 1e6), 1)
    figures["load"] = [before, load()]
    if result.stderr.strip():
        figures["stderr"] = result.stderr.strip()[:500]
    return figures


def pgbench(database: str, script: str, *, clients: int, seconds: int) -> dict[str, Any]:
    """``pgbench -f script -c clients -T seconds``: transactions/s and p50/p99 (ms)."""
    before = load()
    with tempfile.TemporaryDirectory() as workdir:
        path = Path(workdir) / "script.sql"
        path.write_text(script)
        command = [
            "pgbench",
            "-n",
            "-f",
            str(path),
            "-c",
            str(clients),
            "-j",
            str(min(clients, 2)),
            "-T",
            str(seconds),
            "-l",
            "--log-prefix",
            str(Path(workdir) / "log"),
            pg_url(database),
        ]
        result = subprocess.run(command, capture_output=True, text=True, check=True)
        latencies = sorted(
            int(line.split()[2]) / 1000
            for log in Path(workdir).glob("log*")
            for line in log.read_text().splitlines()
        )
    tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", result.stdout)
    assert tps, result.stdout

    def pct(q: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 3)

    return {
        "rate_per_s": round(float(tps.group(1)), 1),
        "transactions": len(latencies),
        "p50_ms": pct(0.5),
        "p99_ms": pct(0.99),
        "load": [before, load()],
    }


def _bundle() -> tuple[str, str]:
    template = json.loads(EXAMPLE.read_text())
    return json.dumps(template["diagnostic_bundle"], separators=(",", ":")), str(
        template["precheck_hash"]
    )


def pgbench_insert_row() -> str:
    """The task row an escalation writes, as one INSERT (same columns, same JSON text)."""
    bundle, precheck = _bundle()
    return (
        "SELECT gen_random_uuid() AS tid \\gset\n"
        "INSERT INTO review_tasks (id, status, entity_type, entity_id, reason_code,"
        " precheck_hash, diagnostic_bundle, producer_id, idempotency_key, version,"
        " created_at, updated_at, escalation_level)"
        " VALUES (':tid', 'PENDING_REVIEW', 'transaction', 'txn_:tid',"
        f" 'AML_RULE_FAILED', '{precheck}', '{bundle}', 'bench-bot',"
        " 'pgbench-:tid', 1, now(), now(), 0);\n"
    )


def seed_tasks(database: str, count: int, producer: str) -> None:
    """``count`` pending tasks, oldest first, in one statement."""
    bundle, precheck = _bundle()
    psql(
        database,
        "INSERT INTO review_tasks (id, status, entity_type, entity_id, reason_code,"
        " precheck_hash, diagnostic_bundle, producer_id, idempotency_key, version,"
        " created_at, updated_at, escalation_level)"
        " SELECT gen_random_uuid(), 'PENDING_REVIEW', 'transaction', 'seed_' || g,"
        f" 'AML_RULE_FAILED', '{precheck}', '{bundle}', '{producer}', 'seed-' || g, 1,"
        " now() - interval '1 hour' + g * interval '1 microsecond',"
        " now(), 0 FROM generate_series(1, " + str(count) + ") AS g",
    )


PGBENCH_CYCLE = (
    "UPDATE review_tasks SET status = 'CLAIMED', claimed_by = 'pgbench',"
    " lease_token_hash = md5(random()::text), lease_expires_at = now() + interval '15 minutes',"
    " version = version + 1, updated_at = now()"
    " WHERE id = (SELECT id FROM review_tasks WHERE status IN ('PENDING_REVIEW', 'CLAIMED')"
    " AND (status = 'PENDING_REVIEW' OR lease_expires_at <= now())"
    " ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)"
    " RETURNING id AS tid, lease_token_hash AS th \\gset\n"
    "UPDATE review_tasks SET status = 'RESOLVED', decision = 'APPROVED', notes = 'bench',"
    " operator_id = 'pgbench', resolved_at = now(), version = version + 1, updated_at = now()"
    " WHERE id = ':tid' AND status = 'CLAIMED' AND lease_token_hash = ':th'"
    " AND claimed_by = 'pgbench' AND lease_expires_at > now();\n"
)


def count(database: str, sql: str) -> int:
    return int(psql(database, sql))


def run_pg(args: argparse.Namespace, results: dict[str, Any]) -> None:
    with contextlib.ExitStack() as stack:
        db = stack.enter_context(fresh_pg_database("signoff_bench_run"))
        env: dict[str, str] = {}
        url_for_service = pg_url(db)
        if args.pgbouncer:
            url_for_service = stack.enter_context(pgbouncer(db))
            env = {"SIGNOFF_PGBOUNCER": "true", "SIGNOFF_LISTEN_DATABASE_URL": pg_url(db)}
        if args.redis:
            env["SIGNOFF_REDIS_URL"] = args.redis
        env |= dict(pair.split("=", 1) for pair in args.env)
        service = stack.enter_context(signoff_serve(url_for_service, env=env))
        _run_pg_workloads(args, results, db, service)


def _run_pg_workloads(
    args: argparse.Namespace, results: dict[str, Any], db: str, service: Service
) -> None:
    seconds, wanted = args.seconds, set(args.only)
    producer = service.key("producer", "bench-bot")
    reviewers = [
        f"bench-reviewer-{n}={service.key('reviewer', f'bench-reviewer-{n}')}" for n in range(16)
    ]
    url = service.base_url
    wrk(url, "escalate.lua", producer, "new", connections=4, seconds=2)  # warm-up
    if "w1" in wanted or "w3" in wanted:
        profiler = None
        if args.profile:
            py_spy = str(Path(sys.executable).parent / "py-spy")
            profiler = subprocess.Popen(
                [
                    py_spy,
                    "record",
                    "--subprocesses",
                    "--pid",
                    str(service.process.pid),
                    "--rate",
                    "100",
                    "--duration",
                    str(seconds),
                    "--format",
                    "raw",
                    "--output",
                    str(args.profile),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        w1 = wrk(url, "escalate.lua", producer, "new", connections=16, seconds=seconds)
        if profiler is not None:
            profiler.wait(timeout=120)
            results["profile"] = profile_summary(args.profile)
        row = pgbench(db, pgbench_insert_row(), clients=16, seconds=seconds)
        results["w1"] = {"http": w1, "pgbench_row": row}
        results["w1"]["ratio"] = round(w1["rate_per_s"] / row["rate_per_s"], 3)
        half = w1["rate_per_s"] / 2
        delay = max(1, int(16 * 1000 / half - w1["p50_ms"]))
        results["w1"]["half_load"] = wrk(
            url, "escalate.lua", producer, "new", str(delay), connections=16, seconds=seconds
        )
        print(json.dumps({"w1": results["w1"]}), flush=True)
    if "w3" in wanted:
        tasks = "SELECT count(*) FROM review_tasks"
        keys = "SELECT count(*) FROM idempotency_keys"
        before = count(db, tasks), count(db, keys)
        w3 = wrk(url, "escalate.lua", producer, "storm", connections=16, seconds=seconds)
        w3["tasks_added"] = count(db, tasks) - before[0]
        # Every task has exactly one idempotency key; replays and refused escalations
        # add none. (wrk stops counting responses at the deadline, so ``created`` may
        # miss the last in-flight requests: compare with keys, not with it.)
        w3["extra_tasks"] = w3["tasks_added"] - (count(db, keys) - before[1])
        w3["ratio_to_w1"] = round(w3["rate_per_s"] / results["w1"]["http"]["rate_per_s"], 3)
        results["w3"] = w3
        print(json.dumps({"w3": w3}), flush=True)
    if "w2" in wanted:
        psql(db, "UPDATE review_tasks SET status = 'RESOLVED' WHERE status <> 'RESOLVED'")
        seed_tasks(db, args.cycle_tasks, "bench-bot")
        cycle = wrk(url, "cycle.lua", *reviewers, connections=16, seconds=seconds)
        doubles = count(
            db,
            "SELECT count(*) FROM (SELECT task_id FROM task_events WHERE"
            " event_type = 'task.claimed' GROUP BY task_id HAVING count(*) > 1) AS d",
        )
        cycle["double_claims"] = doubles
        cycle["cycles_per_s"] = round(cycle["resolves"] / (cycle["duration_us"] / 1e6), 1)
        psql(db, "UPDATE review_tasks SET status = 'RESOLVED' WHERE status <> 'RESOLVED'")
        seed_tasks(db, args.cycle_tasks * 4, "bench-bot")
        bench = pgbench(db, PGBENCH_CYCLE, clients=16, seconds=seconds)
        results["w2"] = {
            "http": cycle,
            "pgbench_cycle": bench,
            "ratio": round(cycle["cycles_per_s"] / bench["rate_per_s"], 3),
        }
        print(json.dumps({"w2": results["w2"]}), flush=True)


def run_sqlite(args: argparse.Namespace, results: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp, signoff_serve(f"sqlite:///{tmp}/b.db") as service:
        producer = service.key("producer", "bench-bot")
        wrk(service.base_url, "escalate.lua", producer, "new", connections=2, seconds=2)
        results["sqlite"] = wrk(
            service.base_url, "escalate.lua", producer, "new", connections=4, seconds=args.seconds
        )
        print(json.dumps({"sqlite": results["sqlite"]}), flush=True)


#: Where a sample's running frame (the leaf) belongs, first match wins.
CATEGORIES = [
    ("asyncpg", ("asyncpg",)),
    ("SQLAlchemy", ("sqlalchemy",)),
    ("uvicorn / httptools / uvloop", ("uvicorn", "httptools", "uvloop")),
    ("FastAPI / Starlette / pydantic", ("fastapi", "starlette", "pydantic")),
    ("jsonschema (contract)", ("jsonschema", "referencing", "rfc3339_validator")),
    ("rfc8785 (hashes)", ("rfc8785",)),
    ("JSON (json, orjson)", ("json/", "orjson")),
    ("logging (structlog)", ("structlog", "logging/")),
    ("prometheus_client", ("prometheus_client",)),
    ("Signoff", ("signoff/",)),
    ("asyncio", ("asyncio/",)),
]


#: Leaf frames of a process or thread that waits (the event loop's poll, the uvicorn
#: supervisor, executor threads): not busy.
IDLE = (
    "select (",
    "epoll",
    "_run_once",
    "poll (",
    "Condition.wait",
    "Connection._recv",
    "Runner.run",
    "spawn_main",
)


def profile_summary(path: Path) -> dict[str, Any]:
    """Share of busy samples by the module of the frame actually running, from py-spy's
    raw (collapsed) output; idle samples (the event loop waiting) are left out."""
    leaf: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    busy = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        frames = stack.split(";")
        if any(idle in frames[-1] for idle in IDLE):
            continue
        busy += int(n)
        name = next((c for c, keys in CATEGORIES if any(k in frames[-1] for k in keys)), "other")
        leaf[name] = leaf.get(name, 0) + int(n)
        for c, keys in CATEGORIES:
            if any(any(k in f for k in keys) for f in frames):
                inclusive[c] = inclusive.get(c, 0) + int(n)
    return {
        "busy_samples": busy,
        "leaf_share": {k: round(v / busy, 3) for k, v in sorted(leaf.items(), key=lambda x: -x[1])},
        "inclusive_share": {
            k: round(v / busy, 3) for k, v in sorted(inclusive.items(), key=lambda x: -x[1])
        },
    }


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "| workload | Signoff | reference (same run) | ratio | target | load |",
        "|---|---|---|---|---|---|",
    ]
    if "w1" in results:
        w1 = results["w1"]
        lines.append(
            f"| W1 escalate, 16 conn | {w1['http']['rate_per_s']}/s (p99 {w1['http']['p99_ms']} ms)"
            f" | pgbench row {w1['pgbench_row']['rate_per_s']}/s | **{w1['ratio']}×** | ≥ 0.3×"
            f" | {w1['http']['load']} / {w1['pgbench_row']['load']} |"
        )
        half = w1["half_load"]
        lines.append(
            f"| W1 at ~half load | {half['rate_per_s']}/s, p50 {half['p50_ms']} ms,"
            f" p99 {half['p99_ms']} ms | | | p99 ≤ 50 ms | {half['load']} |"
        )
    if "w2" in results:
        w2 = results["w2"]
        lines.append(
            f"| W2 claim-next → resolve | {w2['http']['cycles_per_s']} cycles/s"
            f" (double claims {w2['http']['double_claims']}) | pgbench"
            f" {w2['pgbench_cycle']['rate_per_s']}/s | **{w2['ratio']}×** | ≥ 0.3×"
            f" | {w2['http']['load']} / {w2['pgbench_cycle']['load']} |"
        )
    if "w3" in results:
        w3 = results["w3"]
        lines.append(
            f"| W3 storm | {w3['rate_per_s']}/s, 5xx {w3['server_errors']}, extra tasks"
            f" {w3['extra_tasks']} | W1 | **{w3['ratio_to_w1']}×** | ≥ 0.9× | {w3['load']} |"
        )
    if "sqlite" in results:
        s = results["sqlite"]
        lines.append(
            f"| SQLite escalate, 4 conn | {s['rate_per_s']}/s (p99 {s['p99_ms']} ms) | | |"
            f" ≥ 1,000/s | {s['load']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--only", nargs="+", default=["w1", "w2", "w3", "sqlite"])
    parser.add_argument("--cycle-tasks", type=int, default=60_000)
    parser.add_argument("--pgbouncer", action="store_true", help="serve through PgBouncer")
    parser.add_argument("--redis", help="SIGNOFF_REDIS_URL for the service (storm shield)")
    parser.add_argument("--profile", type=Path, help="py-spy (raw) of the server during W1")
    parser.add_argument(
        "--env", nargs="*", default=[], help="SIGNOFF_X=value settings for the service"
    )
    parser.add_argument("--out", type=Path, default=Path("/tmp/signoff-bench/run.json"))
    args = parser.parse_args()
    results: dict[str, Any] = {
        "meta": machine()
        | {
            "workers": os.environ.get("BENCH_WORKERS"),
            "pgbouncer": args.pgbouncer,
            "redis": args.redis,
        }
    }
    started = time.monotonic()
    if set(args.only) & {"w1", "w2", "w3"}:
        run_pg(args, results)
    if "sqlite" in args.only:
        run_sqlite(args, results)
    results["meta"]["wall_seconds"] = round(time.monotonic() - started, 1)
    results["meta"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(markdown(results))


if __name__ == "__main__":
    main()
