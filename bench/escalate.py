"""Escalations per second through HTTP, against pgbench inserting the same rows.

For each concurrency N: a fresh PostgreSQL database, a real ``signoff serve``
subprocess, N concurrent HTTP clients (asyncio + httpx, one process) each sending its
share of ``--requests`` distinct valid escalations; then, on the same database and table,
``pgbench -f`` with N clients inserting the same row shape into ``review_tasks``:

* ``pgbench-row``: one ``INSERT`` of the task row (what the issue asks to compare with);
* ``pgbench-txn``: what one escalation really writes in one transaction — the idempotency
  key, the task row, its audit event and its outbox event.

Then the same HTTP load on SQLite (absolute figure). Results: ``--out`` (JSON).

    python -m bench.escalate --concurrency 1 4 16 --requests 2000
    python -m bench.escalate --profile escalate.prof   # cProfile of the server, N=16
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import hashlib
import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import rfc8785
from bench.common import (
    Figures,
    fresh_pg_database,
    machine,
    pg_url,
    pgbench,
    psql,
    signoff_serve,
    write_results,
)

EXAMPLE = Path(__file__).resolve().parents[1] / "tests" / "data" / "example-escalation.json"


def bodies(count: int) -> list[dict[str, Any]]:
    """``count`` distinct valid escalations shaped like the contract example."""
    template = json.loads(EXAMPLE.read_text())
    actions = template["diagnostic_bundle"]["attempted_actions"]
    template["precheck_hash"] = hashlib.sha256(rfc8785.dumps(actions)).hexdigest()
    out = []
    for _ in range(count):
        body = copy.deepcopy(template)
        body["escalation_id"] = str(uuid.uuid4())
        body["idempotency_key"] = f"bench-{uuid.uuid4().hex}"
        body["entity_id"] = f"txn_{uuid.uuid4().hex}"
        out.append(body)
    return out


async def _load(base_url: str, key: str, concurrency: int, work: list[dict[str, Any]]) -> Figures:
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for body in work:
        queue.put_nowait(body)
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(
        base_url=base_url, headers=headers, limits=limits, timeout=60
    ) as client:

        async def worker() -> None:
            while not queue.empty():
                body = queue.get_nowait()
                started = time.perf_counter()
                response = await client.post("/tasks/escalate", json=body)
                latencies.append((time.perf_counter() - started) * 1000)
                if response.status_code != 201:
                    raise RuntimeError(f"{response.status_code} {response.text}")

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        seconds = time.perf_counter() - started
    return Figures("http", concurrency, len(work), seconds, latencies)


async def _ceiling(base_url: str, concurrency: int, requests: int) -> Figures:
    """The load generator's own ceiling on this machine: ``GET /healthz`` (no database,
    no auth) with the same client and concurrency."""
    latencies: list[float] = []
    remaining = [requests]
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:

        async def worker() -> None:
            while remaining[0] > 0:
                remaining[0] -= 1
                started = time.perf_counter()
                (await client.get("/healthz")).raise_for_status()
                latencies.append((time.perf_counter() - started) * 1000)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        seconds = time.perf_counter() - started
    return Figures("healthz", concurrency, requests, seconds, latencies)


def http_run(base_url: str, key: str, concurrency: int, requests: int, label: str) -> Figures:
    work = bodies(requests)
    asyncio.run(_load(base_url, key, concurrency, bodies(min(50, requests))))  # warm-up
    figures = asyncio.run(_load(base_url, key, concurrency, work))
    figures.label = label
    return figures


def pgbench_scripts() -> dict[str, str]:
    """pgbench scripts writing what the service writes (same JSON text, same columns).
    pgbench substitutes ``:tid`` everywhere, quotes included."""
    template = json.loads(EXAMPLE.read_text())
    bundle = json.dumps(template["diagnostic_bundle"], separators=(",", ":"))
    new_id = "SELECT gen_random_uuid() AS tid \\gset\n"
    task = (
        "INSERT INTO review_tasks (id, status, entity_type, entity_id, reason_code,"
        " precheck_hash, diagnostic_bundle, producer_id, idempotency_key, version,"
        " created_at, updated_at, escalation_level)"
        " VALUES (':tid', 'PENDING_REVIEW', 'transaction', 'txn_:tid',"
        f" 'AML_RULE_FAILED', '{template['precheck_hash']}', '{bundle}', 'bench-bot',"
        " 'pgbench-:tid', 1, now(), now(), 0);\n"
    )
    key = (
        "INSERT INTO idempotency_keys (producer_id, idempotency_key, request_fingerprint,"
        " task_id, response_status, response_body, created_at, expires_at)"
        f" VALUES ('bench-bot', 'pgbench-:tid', '{'0' * 64}', ':tid', 201, '{bundle}',"
        " now(), now() + interval '1 day');\n"
    )
    events = (
        "INSERT INTO task_events (task_id, event_type, action, status, version, actor_id,"
        " actor_role, details, created_at) VALUES (':tid', 'task.created', 'escalate',"
        " 'PENDING_REVIEW', 1, 'bench-bot', 'producer', '{}', now());\n"
        # As the service writes it with no webhook endpoint enabled: fanned out.
        "INSERT INTO outbox_events (id, event_type, task_id, payload, task_version,"
        " created_at, fanned_out_at) VALUES (gen_random_uuid(), 'task.created', ':tid',"
        f" '{bundle}', 1, now(), now());\n"
    )
    return {
        "pgbench-row": new_id + task,
        "pgbench-txn": new_id + "BEGIN;\n" + key + task + events + "COMMIT;\n",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 32])
    parser.add_argument("--requests", type=int, default=2000, help="per concurrency level")
    parser.add_argument("--out", type=Path, default=Path("/tmp/signoff-bench/escalate.json"))
    parser.add_argument("--profile", type=Path, help="cProfile the server at N=16 instead")
    parser.add_argument("--ceiling", action="store_true", help="measure GET /healthz instead")
    parser.add_argument(
        "--chain-off-too",
        action="store_true",
        help="PostgreSQL at the first --concurrency only: turns with the trail's hash-chain "
        "trigger on and off on one server and database, and their ratio",
    )
    parser.add_argument("--turns", type=int, default=3, help="turns of each, with --chain-off-too")
    args = parser.parse_args()
    meta = machine() | {"requests_per_level": args.requests}
    results: list[Figures] = []

    if args.ceiling:
        with tempfile.TemporaryDirectory() as tmp, signoff_serve(f"sqlite:///{tmp}/x.db") as s:
            for n in args.concurrency:
                print(asyncio.run(_ceiling(s.base_url, n, args.requests)).as_dict(), flush=True)
        return
    if args.chain_off_too:
        n = args.concurrency[0]
        rates: dict[str, list[float]] = {"chain": [], "no_chain": []}
        with (
            fresh_pg_database("signoff_bench_escalate") as db,
            signoff_serve(pg_url(db)) as service,
        ):
            key = service.key("producer", "bench-bot")
            for _ in range(args.turns):
                for mode, switch in (("chain", "ENABLE"), ("no_chain", "DISABLE")):
                    psql(db, f"ALTER TABLE task_events {switch} TRIGGER task_events_link")
                    figures = http_run(service.base_url, key, n, args.requests, mode)
                    rates[mode].append(round(figures.rate, 1))
        means = {mode: sum(r) / len(r) for mode, r in rates.items()}
        ratio = round(means["chain"] / means["no_chain"], 3)
        print(json.dumps({"concurrency": n, "per_s": rates, "chain_over_no_chain": ratio}))
        return
    if args.profile:
        with (
            fresh_pg_database("signoff_bench_escalate") as db,
            signoff_serve(pg_url(db), profile=args.profile) as service,
        ):
            key = service.key("producer", "bench-bot")
            print(http_run(service.base_url, key, 16, args.requests, "http-pg").as_dict())
        return

    for n in args.concurrency:
        with fresh_pg_database("signoff_bench_escalate") as db:
            with signoff_serve(pg_url(db)) as service:
                key = service.key("producer", "bench-bot")
                results.append(http_run(service.base_url, key, n, args.requests, "http-pg"))
            for label, script in pgbench_scripts().items():
                results.append(
                    pgbench(db, script, clients=n, transactions=args.requests * 2, label=label)
                )
        for r in results[-3:]:
            print(r.as_dict(), flush=True)
    for n in args.concurrency:
        with (
            tempfile.TemporaryDirectory() as tmp,
            signoff_serve(f"sqlite:///{tmp}/bench.db") as service,
        ):
            key = service.key("producer", "bench-bot")
            results.append(http_run(service.base_url, key, n, args.requests, "http-sqlite"))
        print(results[-1].as_dict(), flush=True)
    write_results(args.out, results, meta)


if __name__ == "__main__":
    main()
