"""The speed harness: one command, every workload, ratios measured in the same run.

    python -m bench.run                      # all workloads, 10 s each
    python -m bench.run --seconds 20 --only w1 w2
    python -m bench.run --only w1 w2 w3 sqlite   # without W4 and growth (~3 min less)

It drives the real ``signoff serve`` (a subprocess on a free loopback port) with **wrk**
(a compiled load generator; Lua scripts in ``bench/wrk/`` build distinct valid
escalations) and runs **pgbench** on the same database, against the same tables, in the
same run, so the ratios survive a noisy machine. The load average is recorded next to
every figure. Benchmarks only: nothing here runs from the test suite.

Workloads (docs/benchmarks.md states the targets):

* ``w1``: escalations/s at 16 connections against pgbench inserting the same task row at
  16 clients, taking turns three times (half of ``--seconds`` each; the headline ratio is
  the median of the turns', the ratio of the mean rates beside it); in each turn also
  pgbench writing **every row an escalation writes** in one statement
  (``bench/writes.py``): the ceiling the database sets for W1, reported against the row
  and W1 against it; then the latency at about half W1's rate (wrk's per-request
  ``delay``).
* ``w2``: claim-next → resolve cycles/s (outbox included) against a pgbench script of the
  same two statements (``FOR UPDATE SKIP LOCKED`` claim, then the resolve update); then,
  side by side (``bench/peers.py``, unless ``--no-peers``), pgqueuer and procrastinate
  doing enqueue → dequeue → ack of a job the size of Signoff's task with 16 workers,
  each as a ratio to the same pgbench figure.
* ``w3``: the storm (70 % new, 20 % replays, 10 % new keys for an entity already queued),
  in W1's turns (after each W1 run):
  rate against W1's, 5xx count, and tasks in the table against 201s created.
* ``w4``: webhook callbacks (bench/webhooks.py's receiver in its own process, on
  127.0.0.1, subscribed to ``task.resolved``; each workload on a database of its own).
  First the latency: ``100 × --seconds`` tasks escalated and claimed (untimed), then
  resolved **paced at 100 resolves/s** (one started every 10 ms, several in flight), each
  task's time from its resolve response to its arrival at the receiver
  (``time.monotonic``): p50/p99/max against p50 ≤ 50 ms, p99 ≤ 500 ms. Then the scaling:
  with ``SIGNOFF_RUN_WORKERS=false`` a backlog of ``--w4-backlog`` resolves piles up in
  the outbox and one ``signoff worker`` drains it into a receiver that takes 100 ms, once
  per ``SIGNOFF_DISPATCHER_BATCH_SIZE`` in ``--w4-concurrency`` (a fresh backlog each):
  deliveries/s over first-to-last arrival (bench/webhooks.py's drain mode) against the
  ``batch size × 10/s`` the setting allows, and the most requests the receiver held at
  once.
* ``growth``: claim-next (→ resolve, ``cycle.lua --timed``: claim-next and resolve
  timed apart) and escalate latency p50/p99 at a moderate fixed load (4 connections, each
  20 ms between requests) with 10,000 pending tasks in ``review_tasks``, then again after
  the table grew to ``--growth-rows`` (default 1,000,000: the queue topped up to 10,000
  pending, the rest bulk-loaded resolved history, ``VACUUM ANALYZE``); the ratios
  large/small against ≤ 1.2×. The bulk load takes ~20 s of heavy I/O.
* ``sqlite``: escalations/s at 4 connections on the embedded default.
* ``startup``: ``signoff --help``, and ``signoff serve`` to its first 200 on ``/readyz`` on
  SQLite and on PostgreSQL (``--workers 2`` and the default), three starts each
  (``bench/startup.py``; about a minute on a quiet machine).

``w4`` and ``growth`` are in the default ``--only`` list: together they add about three
and a half minutes at ``--seconds 10`` (W4 ~2 min, most of it setting up the three
backlogs of 1,000 resolves; growth ~1.5 min, of it ~25 s loading and vacuuming 1M rows).

Results: ``--out`` (JSON) and a Markdown table on stdout, ending with the time of the last
whole ``./scripts/test`` run on this checkout (``.cache/test-run.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from bench.common import (
    ADMIN_KEY,
    Service,
    _service_env,
    fresh_pg_database,
    machine,
    percentile,
    pg_url,
    pgbouncer,
    psql,
    signoff_serve,
)
from bench.writes import WRITES_OPTIONS, escalation_writes_script

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
    timed = [x for x in result.stdout.splitlines() if x.startswith("WRK_TIMED ")]
    if timed:  # cycle.lua --timed: claim-next and resolve apart
        figures["timed"] = json.loads(timed[0].removeprefix("WRK_TIMED "))
    if result.stderr.strip():
        figures["stderr"] = result.stderr.strip()[:500]
    return figures


def pgbench(
    database: str, script: str, *, clients: int, seconds: int, options: str = ""
) -> dict[str, Any]:
    """``pgbench -f script -c clients -T seconds``: transactions/s and p50/p99 (ms);
    ``options`` are server settings for its sessions (``PGOPTIONS``)."""
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
        env = os.environ | ({"PGOPTIONS": options} if options else {})
        result = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
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


def settle(database: str) -> None:
    """``VACUUM ANALYZE`` of the tables an escalation writes, then a checkpoint."""
    psql(database, "VACUUM ANALYZE review_tasks, task_events, idempotency_keys, outbox_events")
    psql(database, "CHECKPOINT")


def seed_tasks(database: str, count: int, producer: str) -> None:
    """``count`` pending tasks, oldest first, in one statement; then ``VACUUM ANALYZE``, so
    Signoff and pgbench both start from a steady table, not from a bulk load that
    autovacuum is about to visit mid-measurement."""
    bundle, precheck = _bundle()
    psql(
        database,
        "INSERT INTO review_tasks (id, status, entity_type, entity_id, reason_code,"
        " precheck_hash, diagnostic_bundle, producer_id, idempotency_key, version,"
        " created_at, updated_at, escalation_level)"
        " SELECT gen_random_uuid(), 'PENDING_REVIEW', 'transaction', 'seed_' || g,"
        f" 'AML_RULE_FAILED', '{precheck}', '{bundle}', '{producer}', 'bulk-' || g, 1,"
        " now() - interval '1 hour' + g * interval '1 microsecond',"
        " now(), 0 FROM generate_series(1, " + str(count) + ") AS g",
    )
    psql(database, "VACUUM ANALYZE review_tasks")


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


#: How many times W1, W3 and pgbench take turns (see ``_run_pg_workloads``).
W1_PAIRS = 3


def _ratio(ours: dict[str, Any], reference: dict[str, Any]) -> float:
    return round(ours["rate_per_s"] / reference["rate_per_s"], 3)


def _merged(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Runs of equal length as one: the mean rate, counters summed, percentiles the
    median of the runs' (labelled as such), the load before the first and after the last."""
    merged: dict[str, Any] = dict(runs[0])
    merged["rate_per_s"] = round(sum(r["rate_per_s"] for r in runs) / len(runs), 1)
    for name, value in runs[0].items():
        if name.endswith("_ms"):
            merged[name] = sorted(r[name] for r in runs)[len(runs) // 2]
        elif isinstance(value, int):  # counts, and wrk's duration
            merged[name] = sum(r[name] for r in runs)
    merged["load"] = [runs[0]["load"][0], runs[-1]["load"][1]]
    merged["percentiles"] = f"median of {len(runs)} runs"
    return merged


def _py_spy(service: Service, path: Path | None, seconds: int) -> subprocess.Popen[bytes] | None:
    """py-spy recording the server for ``seconds`` into ``path`` (raw), or ``None``."""
    if path is None:
        return None
    py_spy = str(Path(sys.executable).parent / "py-spy")
    return subprocess.Popen(
        [
            py_spy,
            "record",
            # Only samples that hold the GIL: on two cores shared with PostgreSQL
            # and wrk a thread preempted in a socket write is still "running" to
            # py-spy, which made asyncpg's send look like a fifth of the CPU.
            "--gil",
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
            str(path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _storm(db: str, url: str, producer: str, seconds: int) -> dict[str, Any]:
    """One W3 run: the storm's figures, the tasks it added and how many of them had no
    idempotency key of their own (``extra_tasks``: must be 0)."""
    # Both counts in one snapshot: escalations still in flight when wrk stops commit
    # between two separate counts and showed as keys without tasks.
    both = (
        "SELECT (SELECT count(*) FROM review_tasks) || ' '"
        " || (SELECT count(*) FROM idempotency_keys)"
    )

    def counts() -> tuple[int, int]:
        tasks, keys = psql(db, both).split()
        return int(tasks), int(keys)

    before = counts()
    storm = wrk(url, "escalate.lua", producer, "storm", connections=16, seconds=seconds)
    after = counts()
    storm["tasks_added"] = after[0] - before[0]
    # Every task has exactly one idempotency key; replays and refused escalations add
    # none. (wrk stops counting responses at the deadline, so ``created`` may miss the
    # last in-flight requests: compare with keys, not with it.)
    storm["extra_tasks"] = storm["tasks_added"] - (after[1] - before[1])
    return storm


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
        if args.slack:
            env |= stack.enter_context(slack_on())
        env |= dict(pair.split("=", 1) for pair in args.env)
        service = stack.enter_context(signoff_serve(url_for_service, env=env))
        _run_pg_workloads(args, results, db, service)


@contextlib.contextmanager
def slack_on() -> Iterator[dict[str, str]]:
    """The Slack door on, against the tests' local fake of Slack (in this process): every
    escalation becomes a card to post, every change a redraw, as in a deployment."""
    from tests.slackfake import BOT_TOKEN, SIGNING_SECRET, slack_fake

    with slack_fake() as fake:
        yield {
            "SIGNOFF_SLACK_BOT_TOKEN": BOT_TOKEN,
            "SIGNOFF_SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SIGNOFF_SLACK_API_URL": fake.api_url,
            "SIGNOFF_SLACK_DEFAULT_CHANNEL": "C_BENCH",
        }
        calls = len(fake.calls)
    print(f"slack fake: {calls} Web API calls", flush=True)


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
        # W1, W3 (when asked) and pgbench take turns, W1_PAIRS times, each for half of
        # --seconds: on a shared host the machine's speed drifts within a minute, and one
        # run against another a few seconds later measured that drift as much as Signoff.
        segment = max(2, round(seconds / 2))
        pairs, storms, ceilings = [], [], []
        writes = escalation_writes_script(db)
        for turn in range(W1_PAIRS):
            profiler = _py_spy(service, args.profile, segment) if turn == 0 else None
            http = wrk(url, "escalate.lua", producer, "new", connections=16, seconds=segment)
            if profiler is not None:
                profiler.wait(timeout=120)
                results["profile"] = profile_summary(args.profile)
            if "w3" in wanted:
                storms.append(_storm(db, url, producer, segment))
            pairs.append((http, pgbench(db, pgbench_insert_row(), clients=16, seconds=segment)))
            ceilings.append(
                pgbench(db, writes, clients=16, seconds=segment, options=WRITES_OPTIONS)
            )
            # The turns wrote tens of thousands of rows of every table an escalation
            # writes: settle them (untimed) as seed_tasks does, or autovacuum and the
            # search index's pending list are worked off during the next turn.
            settle(db)
        w1, row = _merged([h for h, _ in pairs]), _merged([r for _, r in pairs])
        results["w1"] = {"http": w1, "pgbench_row": row, "pgbench_writes": _merged(ceilings)}
        results["w1"]["ratio"] = round(w1["rate_per_s"] / row["rate_per_s"], 3)
        results["w1"]["pairs"] = [
            {
                "http": h["rate_per_s"],
                "pgbench_row": r["rate_per_s"],
                "pgbench_writes": c["rate_per_s"],
                "ratio": _ratio(h, r),
                "writes_ratio": _ratio(c, r),
                "ratio_to_writes": _ratio(h, c),
            }
            for (h, r), c in zip(pairs, ceilings, strict=True)
        ]
        for name in ("ratio", "writes_ratio", "ratio_to_writes"):
            turns = [pair[name] for pair in results["w1"]["pairs"]]
            results["w1"][f"median_{name}"] = statistics.median(turns)
        half = w1["rate_per_s"] / 2
        delay = max(1, int(16 * 1000 / half - w1["p50_ms"]))
        results["w1"]["half_load"] = wrk(
            url, "escalate.lua", producer, "new", str(delay), connections=16, seconds=seconds
        )
        print(json.dumps({"w1": results["w1"]}), flush=True)
        if storms:
            w3 = _merged(storms)
            w3["ratio_to_w1"] = round(w3["rate_per_s"] / w1["rate_per_s"], 3)
            w3["turns"] = [_ratio(storm, h) for storm, (h, _) in zip(storms, pairs, strict=True)]
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
        if not args.no_peers:
            results["w2"]["peers"] = w2_peers(seconds, cycle, bench)
            print(json.dumps({"w2_peers": results["w2"]["peers"]}), flush=True)


def w2_peers(seconds: int, cycle: dict[str, Any], bench: dict[str, Any]) -> dict[str, Any]:
    """pgqueuer and procrastinate (bench/peers.py: enqueue → dequeue → ack, 16 workers,
    each on a database of its own) right after W2, with each one's jobs/s as a ratio to
    the same run's pgbench cycle figure and Signoff's cycles/s as a multiple of it."""
    from bench.peers import run_peers  # the bench extra's peer libraries, only when used

    peers = run_peers(seconds)
    for peer in peers.values():
        peer["ratio"] = round(peer["jobs_per_s"] / bench["rate_per_s"], 3)
        jobs_per_s = peer["jobs_per_s"] or float("nan")  # a peer that finished nothing
        peer["signoff_over_peer"] = round(cycle["cycles_per_s"] / jobs_per_s, 3)
    return peers


def run_sqlite(args: argparse.Namespace, results: dict[str, Any]) -> None:
    env = dict(pair.split("=", 1) for pair in args.env)
    with (
        tempfile.TemporaryDirectory() as tmp,
        signoff_serve(f"sqlite:///{tmp}/b.db", env=env) as service,
    ):
        producer = service.key("producer", "bench-bot")
        wrk(service.base_url, "escalate.lua", producer, "new", connections=2, seconds=2)
        results["sqlite"] = wrk(
            service.base_url, "escalate.lua", producer, "new", connections=4, seconds=args.seconds
        )
        print(json.dumps({"sqlite": results["sqlite"]}), flush=True)


# --- W4: callbacks ------------------------------------------------------------------------
#: The issue's load for the latency target, resolves per second.
W4_RATE = 100
#: Signoff's default SIGNOFF_MAX_LEASES_PER_PRINCIPAL: one reviewer key per this many
#: pre-claimed tasks, so the server runs with its defaults.
LEASES_PER_REVIEWER = 10


def _w4_keys(service: Service, hook_url: str, tasks: int) -> tuple[str, list[str]]:
    """A producer key, enough reviewer keys to hold ``tasks`` leases, and the receiver
    registered (as the admin) for ``task.resolved``."""
    httpx.post(
        f"{service.base_url}/webhook-endpoints",
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        json={"url": hook_url, "event_types": ["task.resolved"]},
    ).raise_for_status()
    reviewers = -(-tasks // LEASES_PER_REVIEWER)
    return service.key("producer", "bench-bot"), [
        service.key("reviewer", f"bench-reviewer-{n}") for n in range(reviewers)
    ]


async def _escalate_and_claim(
    base_url: str, producer: str, reviewers: list[str], tasks: int
) -> list[tuple[str, str, str]]:
    """Escalate ``tasks`` tasks and claim each (untimed); returns (task id, lease token,
    reviewer key) for each, at most LEASES_PER_REVIEWER per reviewer."""
    from bench.webhooks import escalation, gather_bounded

    async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:

        async def escalate() -> str:
            response = await client.post(
                "/tasks/escalate",
                json=escalation(),
                headers={"Authorization": f"Bearer {producer}"},
            )
            response.raise_for_status()
            return str(response.json()["id"])

        async def claim(n: int, task_id: str) -> tuple[str, str, str]:
            key = reviewers[n // LEASES_PER_REVIEWER]
            response = await client.post(
                f"/tasks/{task_id}/claim", headers={"Authorization": f"Bearer {key}"}
            )
            response.raise_for_status()
            return task_id, str(response.json()["lease_token"]), key

        ids = await gather_bounded(8, [escalate() for _ in range(tasks)])
        return await gather_bounded(8, [claim(n, i) for n, i in enumerate(ids)])


async def _resolve(client: httpx.AsyncClient, lease: tuple[str, str, str]) -> tuple[float, int]:
    """Resolve one claimed task; returns when its response arrived (monotonic) and the
    status code."""
    task_id, token, key = lease
    response = await client.post(
        f"/tasks/{task_id}/resolve",
        headers={"Authorization": f"Bearer {key}", "X-Lease-Token": token},
        json={"decision": "APPROVED"},
    )
    return time.monotonic(), response.status_code


async def _paced_resolves(
    base_url: str, leases: list[tuple[str, str, str]], rate: float
) -> tuple[dict[str, tuple[float, float, float, int]], int]:
    """Start one resolve every 1/``rate`` s (several may be in flight); returns task id →
    (scheduled, sent, answered, status), monotonic seconds, and the most in flight."""
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    out: dict[str, tuple[float, float, float, int]] = {}
    in_flight = [0, 0]  # now, most

    async with httpx.AsyncClient(base_url=base_url, timeout=30, limits=limits) as client:

        async def one(lease: tuple[str, str, str], scheduled: float) -> None:
            in_flight[0] += 1
            in_flight[1] = max(in_flight)
            sent = time.monotonic()
            answered, status = await _resolve(client, lease)
            in_flight[0] -= 1
            out[lease[0]] = (scheduled, sent, answered, status)

        start = time.monotonic() + 0.05
        started = []
        for n, lease in enumerate(leases):
            scheduled = start + n / rate
            pause = scheduled - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
            started.append(asyncio.create_task(one(lease, scheduled)))
        await asyncio.gather(*started)
    return out, in_flight[1]


async def _resolve_all(base_url: str, leases: list[tuple[str, str, str]]) -> list[int]:
    from bench.webhooks import gather_bounded

    async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:
        done = await gather_bounded(8, [_resolve(client, lease) for lease in leases])
    return [status for _, status in done]


def _deliveries(db: str) -> dict[str, int]:
    """Webhook deliveries by status, and attempts made (more than deliveries: retries);
    after up to 3 s for the attempts still being recorded (sent and answered already)."""
    for _ in range(15):
        if not count(db, "SELECT count(*) FROM webhook_deliveries WHERE status = 'PENDING'"):
            break
        time.sleep(0.2)
    rows = psql(db, "SELECT status, count(*) FROM webhook_deliveries GROUP BY status")
    by_status = {s: int(n) for s, n in (line.split("|") for line in rows.splitlines() if line)}
    return by_status | {"attempts": count(db, "SELECT count(*) FROM delivery_attempts")}


def _ms(values: list[float], q: float) -> float | None:
    return round(percentile(values, q), 1) if values else None


def run_w4(args: argparse.Namespace, results: dict[str, Any]) -> None:
    """W4: resolve → delivered latency at 100 resolves/s, then the dispatcher's drain rate
    with a 100 ms receiver at each SIGNOFF_DISPATCHER_BATCH_SIZE of ``--w4-concurrency``."""
    started = time.monotonic()
    results["w4"] = {"paced": _w4_paced(args)}
    results["w4"]["paced"]["wall_seconds"] = round(time.monotonic() - started, 1)
    results["w4"]["scaling"] = _w4_scaling(args)
    results["w4"]["wall_seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps({"w4": results["w4"]}), flush=True)


def _w4_paced(args: argparse.Namespace) -> dict[str, Any]:
    from bench.webhooks import collect, receiver

    tasks = W4_RATE * args.seconds
    env = {"SIGNOFF_WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true"}  # the receiver is on loopback
    env |= dict(pair.split("=", 1) for pair in args.env)
    with (
        fresh_pg_database("signoff_bench_w4") as db,
        receiver(0) as (hook_url, arrivals),
        signoff_serve(pg_url(db), env=env) as service,
    ):
        producer, reviewers = _w4_keys(service, hook_url, tasks)
        leases = asyncio.run(_escalate_and_claim(service.base_url, producer, reviewers, tasks))
        before = load()
        resolved, most_in_flight = asyncio.run(_paced_resolves(service.base_url, leases, W4_RATE))
        ok = {t for t, (*_, status) in resolved.items() if status == 200}
        arrived = {t: at for t, at in collect(arrivals, ok, 30).items() if t in ok}
        after = load()
        deliveries = _deliveries(db)
    latencies = [(at - resolved[t][2]) * 1000 for t, at in arrived.items()]
    sent = sorted(s for _, s, _, _ in resolved.values())
    answer_ms = [(a - s) * 1000 for _, s, a, _ in resolved.values()]
    return {
        "tasks": tasks,
        "target_rate_per_s": W4_RATE,
        "resolves_per_s": round((len(sent) - 1) / (sent[-1] - sent[0]), 1),
        "resolve_errors": len(resolved) - len(ok),
        "resolve_p50_ms": _ms(answer_ms, 0.5),
        "resolve_p99_ms": _ms(answer_ms, 0.99),
        "most_resolves_in_flight": most_in_flight,
        "schedule_lag_max_ms": round(max(s - sch for sch, s, _, _ in resolved.values()) * 1000, 1),
        "arrived": len(arrived),
        "min_ms": _ms(latencies, 0),
        "p50_ms": _ms(latencies, 0.5),
        "p99_ms": _ms(latencies, 0.99),
        "max_ms": round(max(latencies), 1) if latencies else None,
        "deliveries": deliveries,
        "target": "p50 ≤ 50 ms, p99 ≤ 500 ms",
        "load": [before, after],
    }


def _w4_scaling(args: argparse.Namespace) -> dict[str, Any]:
    """Backlogs drained by one ``signoff worker`` per setting (bench/webhooks.py's drain
    mode): deliveries/s over first-to-last arrival, against the 100 ms receiver's bound of
    setting × 10/s."""
    from bench.webhooks import collect, process, receiver

    backlog = args.w4_backlog
    runs: dict[str, Any] = {}
    # migrate, serve and the worker run in different directories: they share the
    # database's one key file (bench/common.py), or the worker could not decrypt the
    # endpoint's signing secret.
    shared = {"SIGNOFF_WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true"}
    env = shared | {"SIGNOFF_RUN_WORKERS": "false"}
    with (
        fresh_pg_database("signoff_bench_w4_drain") as db,
        receiver(100) as (hook_url, arrivals),
        signoff_serve(pg_url(db), env=env) as service,
        tempfile.TemporaryDirectory() as cwd,
    ):
        producer, reviewers = _w4_keys(service, hook_url, backlog)
        for setting in args.w4_concurrency:
            leases = asyncio.run(
                _escalate_and_claim(service.base_url, producer, reviewers, backlog)
            )
            statuses = asyncio.run(_resolve_all(service.base_url, leases))
            ids = {t for (t, _, _), status in zip(leases, statuses, strict=True) if status == 200}
            worker_env = _service_env(
                pg_url(db), **shared, SIGNOFF_DISPATCHER_BATCH_SIZE=str(setting)
            )
            before = load()
            spawned = time.monotonic()
            bound = setting * 10  # deliveries/s a 100 ms receiver allows at this concurrency
            with process([sys.executable, "-m", "signoff", "worker"], worker_env, cwd):
                arrived = collect(arrivals, ids, min(180, 30 + 4 * len(ids) / bound))
            times = sorted(at for t, at in arrived.items() if t in ids)
            rate = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else float("nan")
            runs[str(setting)] = {
                "batch_size": setting,
                "backlog": backlog,
                "resolve_errors": backlog - len(ids),
                "delivered": len(times),
                "deliveries_per_s": round(rate, 1),
                "bound_per_s": bound,
                "of_bound": round(rate / bound, 3),
                # Requests the receiver held at once: arrivals within one 100 ms sleep.
                "most_in_flight": max(
                    (bisect.bisect_right(times, t + 0.1) - n for n, t in enumerate(times)),
                    default=0,
                ),
                "first_arrival_s": round(times[0] - spawned, 2) if times else None,
                "load": [before, load()],
            }
            print(json.dumps({"w4_scaling": runs[str(setting)]}), flush=True)
        runs["deliveries"] = _deliveries(db)
    settings = [str(s) for s in args.w4_concurrency]
    if len(settings) > 1:
        low, high = runs[settings[0]], runs[settings[-1]]
        runs["speedup"] = round(high["deliveries_per_s"] / low["deliveries_per_s"], 2)
        runs["ideal_speedup"] = round(high["batch_size"] / low["batch_size"], 2)
    return runs


# --- growth: claim-next and escalate from 10k to 1M rows -----------------------------------
GROWTH_SMALL = 10_000  # pending tasks at the start, and the queue kept at the large size
GROWTH_CONNECTIONS = 4
GROWTH_DELAY_MS = 20  # per connection between requests: a moderate, fixed offered load


def grow_table(database: str, rows: int, pending: int) -> dict[str, float]:
    """Make the table ``rows`` rows with ``pending`` of them waiting: the tasks still
    claimed are resolved, the queue is topped up to ``pending`` and resolved history
    (older than everything else) fills the rest; then VACUUM ANALYZE. Returns seconds."""
    bundle, precheck = _bundle()
    started = time.monotonic()
    psql(
        database,
        "UPDATE review_tasks SET status = 'RESOLVED', decision = 'APPROVED',"
        " operator_id = claimed_by, resolved_at = now(), version = version + 1"
        " WHERE status = 'CLAIMED'",
    )
    waiting = count(database, "SELECT count(*) FROM review_tasks WHERE status = 'PENDING_REVIEW'")
    columns = (
        "INSERT INTO review_tasks (id, status, entity_type, entity_id, reason_code,"
        " precheck_hash, diagnostic_bundle, producer_id, idempotency_key, version,"
        " created_at, updated_at, escalation_level, claimed_by, decision, operator_id,"
        " resolved_at)"
    )
    fixed = f"'AML_RULE_FAILED', '{precheck}', '{bundle}', 'bench-bot'"
    if pending > waiting:
        psql(
            database,
            f"{columns} SELECT gen_random_uuid(), 'PENDING_REVIEW', 'transaction', 'top_' || g,"
            f" {fixed}, 'top-' || g, 1, now() - interval '1 hour' + g * interval '1 microsecond',"
            f" now(), 0, NULL, NULL, NULL, NULL FROM generate_series(1, {pending - waiting}) AS g",
        )
    history = rows - count(database, "SELECT count(*) FROM review_tasks")
    if history > 0:
        psql(
            database,
            f"{columns} SELECT gen_random_uuid(), 'RESOLVED', 'transaction', 'old_' || g,"
            f" {fixed}, 'old-' || g, 3, now() - interval '30 days' + g * interval '1 ms',"
            " now() - interval '30 days' + g * interval '1 ms', 0, 'bench-reviewer-0',"
            " 'APPROVED', 'bench-reviewer-0', now() - interval '30 days' + g * interval '1 ms'"
            f" FROM generate_series(1, {history}) AS g",
        )
    loaded = time.monotonic()
    psql(database, "VACUUM ANALYZE")
    vacuumed = time.monotonic()
    # The load wrote about 1.5 GB of WAL: PostgreSQL starts a checkpoint for it and
    # spreads its writes over the next half minute, right over the measurement (seen in
    # its log: "checkpoint starting: wal", write=21.3 s; claim-next's p50 1.45×, p99
    # 2.3× in that run). The small phase has no such checkpoint behind it; finish this
    # one before measuring, so the ratio is of table sizes, not of the load's aftermath.
    psql(database, "CHECKPOINT")
    return {
        "load_seconds": round(loaded - started, 1),
        "vacuum_seconds": round(vacuumed - loaded, 1),
        "checkpoint_seconds": round(time.monotonic() - vacuumed, 1),
    }


def _growth_phase(
    db: str, url: str, producer: str, reviewers: list[str], seconds: int
) -> dict[str, Any]:
    phase: dict[str, Any] = {
        "rows": count(db, "SELECT count(*) FROM review_tasks"),
        "pending": count(db, "SELECT count(*) FROM review_tasks WHERE status = 'PENDING_REVIEW'"),
    }
    n = GROWTH_CONNECTIONS
    delay = f"--delay={GROWTH_DELAY_MS}"
    # One connection per wrk thread, so cycle.lua can time claim-next and resolve apart.
    phase["cycle"] = wrk(
        url, "cycle.lua", delay, "--timed", *reviewers, connections=n, threads=n, seconds=seconds
    )
    phase["escalate"] = wrk(
        url, "escalate.lua", producer, "new", str(GROWTH_DELAY_MS), connections=n, seconds=seconds
    )
    return phase


def run_growth(args: argparse.Namespace, results: dict[str, Any]) -> None:
    """claim-next (→ resolve) and escalate latency at a moderate fixed load with 10k rows
    in review_tasks, then with ``--growth-rows`` (the same queue of pending tasks, the
    rest resolved history); the ratios large/small against the 1.2× target."""
    started = time.monotonic()
    growth: dict[str, Any] = {
        "connections": GROWTH_CONNECTIONS,
        "delay_ms": GROWTH_DELAY_MS,
        "target": "≤ 1.2×",
    }
    with fresh_pg_database("signoff_bench_growth") as db:
        seed_tasks(db, GROWTH_SMALL, "bench-bot")
        psql(db, "VACUUM ANALYZE")
        psql(db, "CHECKPOINT")  # as after growing: no checkpoint behind either phase
        with signoff_serve(pg_url(db)) as service:
            url = service.base_url
            producer = service.key("producer", "bench-bot")
            reviewers = [
                f"bench-reviewer-{n}={service.key('reviewer', f'bench-reviewer-{n}')}"
                for n in range(16)
            ]
            n, delay = GROWTH_CONNECTIONS, f"--delay={GROWTH_DELAY_MS}"
            wrk(url, "cycle.lua", delay, *reviewers, connections=n, threads=n, seconds=2)
            wrk(
                url, "escalate.lua", producer, "new", str(GROWTH_DELAY_MS), connections=n, seconds=2
            )
            growth["small"] = _growth_phase(db, url, producer, reviewers, args.seconds)
            print(json.dumps({"growth_small": growth["small"]}), flush=True)
            growth["small"]["wall_seconds"] = round(time.monotonic() - started, 1)
            growth["grow"] = grow_table(db, args.growth_rows, GROWTH_SMALL)
            growth["large"] = _growth_phase(db, url, producer, reviewers, args.seconds)
            print(json.dumps({"growth_large": growth["large"]}), flush=True)
    small, large = growth["small"], growth["large"]
    ratios: dict[str, float | None] = {}
    for name, kind, key in [
        ("claim_next", "cycle", "claim"),
        ("resolve", "cycle", "resolve"),
        ("cycle", "cycle", "cycle"),
    ]:
        for q in ("p50", "p99"):
            a = small[kind].get("timed", {}).get(f"{key}_{q}_ms", -1)
            b = large[kind].get("timed", {}).get(f"{key}_{q}_ms", -1)
            ratios[f"{name}_{q}"] = round(b / a, 3) if a > 0 and b >= 0 else None
    for q in ("p50", "p99"):
        ratios[f"escalate_{q}"] = round(
            large["escalate"][f"{q}_ms"] / small["escalate"][f"{q}_ms"], 3
        )
    growth["ratios"] = ratios
    growth["wall_seconds"] = round(time.monotonic() - started, 1)
    results["growth"] = growth
    print(json.dumps({"growth": {"ratios": ratios, "grow": growth["grow"]}}), flush=True)


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


def peer_row(peer: dict[str, Any], bench: dict[str, Any]) -> str:
    """One W2 peer's Markdown row: its life-cycle jobs/s against the pgbench cycle."""
    drained = " (queue drained: a floor)" if peer["cycle"]["drained"] else ""
    return (
        f"| W2 peer: {peer['library']} {peer['version']} enqueue → dequeue → ack,"
        f" {peer['workers']} workers | {peer['jobs_per_s']} jobs/s{drained}, enqueue"
        f" {peer['enqueue_per_s']}/s (Signoff {peer['signoff_over_peer']}× its jobs/s)"
        f" | pgbench cycle {bench['rate_per_s']}/s | **{peer['ratio']}×** | side by side"
        f" | {peer['cycle']['load']} |"
    )


def w4_rows(w4: dict[str, Any]) -> list[str]:
    paced = w4["paced"]
    lines = [
        f"| W4 resolve → delivered at {paced['target_rate_per_s']} resolves/s"
        f" | p50 {paced['p50_ms']} ms, p99 {paced['p99_ms']} ms, max {paced['max_ms']} ms"
        f" ({paced['arrived']}/{paced['tasks']} arrived, {paced['resolves_per_s']} resolves/s)"
        f" | | | p50 ≤ 50 ms, p99 ≤ 500 ms | {paced['load']} |"
    ]
    for run in w4["scaling"].values():
        if not isinstance(run, dict) or "batch_size" not in run:
            continue
        lines.append(
            f"| W4 drain, 100 ms receiver, batch size {run['batch_size']}"
            f" | {run['deliveries_per_s']} deliveries/s ({run['delivered']}/{run['backlog']},"
            f" {run['most_in_flight']} in flight) | bound {run['bound_per_s']}/s"
            f" | **{run['of_bound']}×** | ∝ batch size | {run['load']} |"
        )
    if "speedup" in w4["scaling"]:
        lines.append(
            f"| W4 drain speedup | {w4['scaling']['speedup']}× | ideal"
            f" {w4['scaling']['ideal_speedup']}× | | ∝ batch size until CPU bound | |"
        )
    return lines


def growth_rows(growth: dict[str, Any]) -> list[str]:
    small, large, ratios = growth["small"], growth["large"], growth["ratios"]
    load = f"{small['cycle']['load']} / {large['cycle']['load']}"
    lines = []
    timed_small, timed_large = small["cycle"].get("timed", {}), large["cycle"].get("timed", {})
    for name, key, ratio in [
        ("claim-next", "claim", "claim_next"),
        ("claim-next → resolve cycle", "cycle", "cycle"),
    ]:
        lines.append(
            f"| Growth {name}, {growth['connections']} conn, {growth['delay_ms']} ms apart"
            f" | {large['rows']:,} rows: p50 {timed_large.get(f'{key}_p50_ms')} ms,"
            f" p99 {timed_large.get(f'{key}_p99_ms')} ms | {small['rows']:,} rows:"
            f" p50 {timed_small.get(f'{key}_p50_ms')} ms, p99 {timed_small.get(f'{key}_p99_ms')} ms"
            f" | **p50 {ratios[f'{ratio}_p50']}×**, p99 {ratios[f'{ratio}_p99']}× | ≤ 1.2×"
            f" | {load} |"
        )
    a, b = small["escalate"], large["escalate"]
    lines.append(
        f"| Growth escalate, {growth['connections']} conn, {growth['delay_ms']} ms apart"
        f" | {large['rows']:,} rows: p50 {b['p50_ms']} ms, p99 {b['p99_ms']} ms"
        f" | {small['rows']:,} rows: p50 {a['p50_ms']} ms, p99 {a['p99_ms']} ms"
        f" | **p50 {ratios['escalate_p50']}×**, p99 {ratios['escalate_p99']}× | ≤ 1.2×"
        f" | {a['load']} / {b['load']} |"
    )
    return lines


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "| workload | Signoff | reference (same run) | ratio | target | load |",
        "|---|---|---|---|---|---|",
    ]
    if "w1" in results:
        w1 = results["w1"]
        lines.append(
            f"| W1 escalate, 16 conn | {w1['http']['rate_per_s']}/s (p99 {w1['http']['p99_ms']} ms)"
            f" | pgbench row {w1['pgbench_row']['rate_per_s']}/s | **{w1['median_ratio']}×**"
            f" (median of turns; {w1['ratio']}× of the means) | ≥ 0.45×"
            f" | {w1['http']['load']} / {w1['pgbench_row']['load']} |"
        )
        turns = ", ".join(f"{p['ratio']}×" for p in w1.get("pairs", []))
        lines.append(f"| W1, each turn | {turns} | | | | |")
        ceiling = w1["pgbench_writes"]
        lines.append(
            f"| pgbench writing an escalation's rows, 16 clients | {ceiling['rate_per_s']}/s"
            f" | pgbench row | **{w1['median_writes_ratio']}×** | (W1's ceiling) |"
            f" {ceiling['load']} |"
        )
        lines.append(f"| W1 against that ceiling | | | **{w1['median_ratio_to_writes']}×** | | |")
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
        lines += [peer_row(peer, w2["pgbench_cycle"]) for peer in w2.get("peers", {}).values()]
    if "w3" in results:
        w3 = results["w3"]
        lines.append(
            f"| W3 storm | {w3['rate_per_s']}/s, 5xx {w3['server_errors']}, extra tasks"
            f" {w3['extra_tasks']} | W1 | **{w3['ratio_to_w1']}×** | ≥ 0.9× | {w3['load']} |"
        )
        turns = ", ".join(f"{ratio}×" for ratio in w3.get("turns", []))
        lines.append(f"| W3, each turn | {turns} | | | | |")
    if "w4" in results:
        lines += w4_rows(results["w4"])
    if "growth" in results:
        lines += growth_rows(results["growth"])
    if "sqlite" in results:
        s = results["sqlite"]
        lines.append(
            f"| SQLite escalate, 4 conn | {s['rate_per_s']}/s (p99 {s['p99_ms']} ms) | | |"
            f" ≥ 1,000/s | {s['load']} |"
        )
    if "startup" in results:
        from bench.startup import rows

        lines += rows(results["startup"])
    if results.get("test_run"):
        run = results["test_run"]
        outcome = "passed" if run["status"] == 0 else f"failed (status {run['status']})"
        lines.append(
            f"| the test run (`./scripts/test`, {run['processes']} processes; last whole run,"
            f" {run['finished']}) | {run['seconds'] // 60} min {run['seconds'] % 60} s,"
            f" {outcome} | | | < 25 min | {run['load']} |"
        )
    return "\n".join(lines)


def last_test_run() -> dict[str, Any] | None:
    """The last whole ``./scripts/test`` run on this checkout (it writes
    ``.cache/test-run.json``), or ``None``."""
    path = ROOT / ".cache" / "test-run.json"
    return json.loads(path.read_text()) if path.exists() else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument(
        "--only", nargs="+", default=["w1", "w2", "w3", "w4", "growth", "sqlite", "startup"]
    )
    parser.add_argument("--cycle-tasks", type=int, default=60_000)
    parser.add_argument(
        "--growth-rows", type=int, default=1_000_000, help="review_tasks rows at growth's end"
    )
    parser.add_argument(
        "--w4-backlog", type=int, default=1000, help="deliveries per W4 drain (one per setting)"
    )
    parser.add_argument(
        "--w4-concurrency",
        type=int,
        nargs="+",
        default=[10, 50, 100],
        help="SIGNOFF_DISPATCHER_BATCH_SIZE values for W4's drains",
    )
    parser.add_argument("--pgbouncer", action="store_true", help="serve through PgBouncer")
    parser.add_argument("--redis", help="SIGNOFF_REDIS_URL for the service (storm shield)")
    parser.add_argument(
        "--slack", action="store_true", help="the Slack door on, against a local fake of Slack"
    )
    parser.add_argument("--profile", type=Path, help="py-spy (raw) of the server during W1")
    parser.add_argument(
        "--no-peers", action="store_true", help="skip pgqueuer and procrastinate after W2"
    )
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
            "slack": args.slack,
        }
    }
    started = time.monotonic()
    if set(args.only) & {"w1", "w2", "w3"}:
        run_pg(args, results)
    if "w4" in args.only:
        run_w4(args, results)
    if "growth" in args.only:
        run_growth(args, results)
    if "sqlite" in args.only:
        run_sqlite(args, results)
    if "startup" in args.only:
        from bench.startup import measure

        results["startup"] = measure(repeat=3)
    results["test_run"] = last_test_run()
    results["meta"]["wall_seconds"] = round(time.monotonic() - started, 1)
    results["meta"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(markdown(results))


if __name__ == "__main__":
    main()
