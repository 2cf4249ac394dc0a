"""claim-next → resolve cycles per second, over a queue of 10k and of 1M tasks.

For each queue size: a fresh PostgreSQL database, bulk-loaded with SQL
(``INSERT … SELECT … FROM generate_series``, not through HTTP) with pending tasks shaped
like the contract example; a real ``signoff serve`` subprocess; N concurrent reviewers
(asyncio + httpx, one API key each) doing ``POST /tasks/claim-next`` then
``POST /tasks/{id}/resolve`` with the lease token, ``--cycles`` times in total; then, on
the same table, ``pgbench -f`` with N clients running the same two statements the
service runs (``pgbench-claim``: the ``FOR UPDATE SKIP LOCKED`` claim in one transaction,
the resolve in another) and the same plus the audit and outbox rows the service writes
with each (``pgbench-claim-txn``). Between runs the resolved tasks go back to the queue.

    python -m bench.claim --sizes 10000 1000000 --concurrency 1 4 16 --cycles 1000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import httpx
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
ACTIVE = "status IN ('PENDING_REVIEW', 'CLAIMED')"  # as the partial indexes spell it


def bulk_load(database: str, size: int) -> float:
    """Insert ``size`` pending tasks, oldest first; returns the seconds it took."""
    example = json.loads(EXAMPLE.read_text())
    bundle = json.dumps(example["diagnostic_bundle"], separators=(",", ":"))
    started = time.perf_counter()
    psql(
        database,
        "INSERT INTO review_tasks (id, status, entity_type, entity_id, reason_code,"
        " precheck_hash, diagnostic_bundle, producer_id, idempotency_key, version,"
        " created_at, updated_at, escalation_level)"
        " SELECT gen_random_uuid(), 'PENDING_REVIEW', 'transaction', 'txn_' || g,"
        f" 'AML_RULE_FAILED', '{example['precheck_hash']}', '{bundle}', 'bench-bot',"
        f" 'bulk-' || g, 1, now() - ({size} - g) * interval '1 ms',"
        f" now() - ({size} - g) * interval '1 ms', 0 FROM generate_series(1, {size}) AS g",
    )
    psql(database, "VACUUM ANALYZE review_tasks")
    return time.perf_counter() - started


def requeue(database: str) -> None:
    """Put every task a run claimed or resolved back in the queue."""
    psql(
        database,
        "UPDATE review_tasks SET status = 'PENDING_REVIEW', claimed_by = NULL,"
        " lease_token_hash = NULL, lease_expires_at = NULL, decision = NULL,"
        " operator_id = NULL, resolved_at = NULL WHERE status <> 'PENDING_REVIEW'",
    )
    psql(database, "VACUUM ANALYZE review_tasks")


async def _cycles(base_url: str, keys: list[str], cycles: int) -> Figures:
    remaining = [cycles]
    latencies: list[float] = []

    async def reviewer(key: str) -> None:
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=60) as client:
            while remaining[0] > 0:
                remaining[0] -= 1
                started = time.perf_counter()
                claimed = await client.post("/tasks/claim-next")
                if claimed.status_code != 200:
                    raise RuntimeError(f"claim-next: {claimed.status_code} {claimed.text}")
                task = claimed.json()
                resolved = await client.post(
                    f"/tasks/{task['id']}/resolve",
                    headers={"X-Lease-Token": task["lease_token"]},
                    json={"decision": "APPROVED"},
                )
                if resolved.status_code != 200:
                    raise RuntimeError(f"resolve: {resolved.status_code} {resolved.text}")
                latencies.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(reviewer(key) for key in keys))
    return Figures("http", len(keys), len(latencies), time.perf_counter() - started, latencies)


def pgbench_scripts() -> dict[str, str]:
    claim = (
        "BEGIN;\n"
        "UPDATE review_tasks SET status = 'CLAIMED', claimed_by = 'pgbench',"
        " lease_token_hash = md5(random()::text), lease_expires_at = now() + interval"
        " '15 minutes', version = version + 1, updated_at = now() WHERE id = (SELECT id"
        f" FROM review_tasks WHERE {ACTIVE} AND (status = 'PENDING_REVIEW' OR"
        " lease_expires_at <= now()) ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)"
        " RETURNING id AS tid \\gset\n"
    )
    resolve = (
        "UPDATE review_tasks SET status = 'RESOLVED', decision = 'APPROVED',"
        " operator_id = 'pgbench', resolved_at = now(), version = version + 1,"
        " updated_at = now() WHERE id = ':tid' AND status = 'CLAIMED';\n"
    )

    def trail(event: str, status: str) -> str:
        return (
            "INSERT INTO task_events (task_id, event_type, action, status, version, actor_id,"
            f" actor_role, details, created_at) VALUES (':tid', 'task.{event}', '{event}',"
            f" '{status}', 2, 'pgbench', 'reviewer', '{{}}', now());\n"
            # As the service writes it with no webhook endpoint enabled: fanned out.
            "INSERT INTO outbox_events (id, event_type, task_id, payload, task_version,"
            f" created_at, fanned_out_at) VALUES (gen_random_uuid(), 'task.{event}', ':tid',"
            " '{}', 2, now(), now());\n"
        )

    return {
        "pgbench-claim": claim + "COMMIT;\n" + resolve,
        "pgbench-claim-txn": claim
        + trail("claimed", "CLAIMED")
        + "COMMIT;\nBEGIN;\n"
        + resolve
        + trail("resolved", "RESOLVED")
        + "COMMIT;\n",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--cycles", type=int, default=1000, help="HTTP cycles per level")
    parser.add_argument("--pgbench-cycles", type=int, default=4000)
    parser.add_argument("--out", type=Path, default=Path("/tmp/signoff-bench/claim.json"))
    args = parser.parse_args()
    meta = machine() | {"cycles_per_level": args.cycles, "load_seconds": {}}
    results: list[Figures] = []
    for size in args.sizes:
        with fresh_pg_database("signoff_bench_claim") as db:
            meta["load_seconds"][str(size)] = round(bulk_load(db, size), 1)  # type: ignore[index]
            print(f"loaded {size} tasks in {meta['load_seconds'][str(size)]} s", flush=True)  # type: ignore[index]
            with signoff_serve(pg_url(db)) as service:
                for n in args.concurrency:
                    keys = [service.key("reviewer", f"bench-reviewer-{i}") for i in range(n)]
                    asyncio.run(_cycles(service.base_url, keys, 20))  # warm-up
                    figures = asyncio.run(_cycles(service.base_url, keys, args.cycles))
                    figures.label = f"http-{size}"
                    results.append(figures)
                    print(figures.as_dict(), flush=True)
                    requeue(db)
            for n in args.concurrency:
                for label, script in pgbench_scripts().items():
                    figures = pgbench(
                        db, script, clients=n, transactions=args.pgbench_cycles, label=label
                    )
                    figures.label = f"{label}-{size}"
                    results.append(figures)
                    print(figures.as_dict(), flush=True)
                    requeue(db)
    write_results(args.out, results, meta)


if __name__ == "__main__":
    main()
