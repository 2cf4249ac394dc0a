"""The claim-next → resolve statements alone, through asyncpg (no HTTP, no service): how
fast the database runs Signoff's single statements, and what the claim limit costs.
Benchmarks only, never run by the tests. (Writing transactions no longer notify —
migration 0009 — so the first round's ``--no-notify`` has nothing left to switch off.)

    python -m bench.statements                 # as shipped
    python -m bench.statements --no-limit      # claim-limit count stubbed out
    python -m bench.statements --chain-off-too # turns with the trail's hash chain off
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import time
import uuid

import asyncpg
from bench.common import fresh_pg_database, pg_url, psql
from bench.run import seed_tasks

from signoff.store import oneshot

UTC = datetime.UTC


async def _reviewer(pool: asyncpg.Pool, n: int, stop: float, done: list[int]) -> None:
    while time.monotonic() < stop:
        now = datetime.datetime.now(UTC)
        common = {
            "actor": f"reviewer-{n}",
            "actor_role": "reviewer",
            "now": now,
            "now_text": now.isoformat(),
            "token_hash": uuid.uuid4().hex,
            "lease_expires_at": now + datetime.timedelta(minutes=15),
        }
        claim = common | {
            "event_id": uuid.uuid4(),
            "limit": 10,
            "groups": [],  # a reviewer in no group, as the HTTP workload's
            "entity_type": None,
            "reason_code": None,
        }
        statement = oneshot.claim_next_statement(entity_type=None, reason_code=None, groups=[])
        async with pool.acquire() as connection:
            task = await connection.fetchrow(statement.sql, *statement.args(claim))
        resolve = common | {
            "event_id": uuid.uuid4(),
            "task_id": task["id"],
            "decision": "APPROVED",
            "notes": "bench",
            "payload": None,
            "key_id": uuid.uuid4(),
            "default_ttl": None,
            "revision": None,
            "digest": None,
        }
        async with pool.acquire() as connection:
            await connection.fetchrow(oneshot.RESOLVE.sql, *oneshot.RESOLVE.args(resolve))
        done[0] += 1


async def _run(database: str, clients: int, seconds: float) -> float:
    pool = await asyncpg.create_pool(pg_url(database), min_size=clients, max_size=clients)
    done = [0]
    stop = time.monotonic() + seconds
    await asyncio.gather(*(_reviewer(pool, n, stop, done) for n in range(clients)))
    await pool.close()
    return done[0] / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--no-limit", action="store_true")
    parser.add_argument(
        "--chain-off-too",
        action="store_true",
        help="alternate turns with the trail's hash-chain trigger on and off (same database, "
        "same run) and report both rates and their ratio",
    )
    parser.add_argument("--turns", type=int, default=2, help="turns of each, with --chain-off-too")
    args = parser.parse_args()
    with fresh_pg_database("signoff_bench_statements") as db:
        seed_tasks(db, 60_000, "bench-bot")
        if args.no_limit:
            psql(
                db,
                "CREATE OR REPLACE FUNCTION signoff_live_leases(principal text,"
                " at timestamptz, exclude uuid) RETURNS bigint LANGUAGE sql"
                " AS $$ SELECT 0::bigint $$",
            )
        if args.chain_off_too:
            rates: dict[str, list[float]] = {"chain": [], "no_chain": []}
            for _ in range(args.turns):
                for mode, switch in (("chain", "ENABLE"), ("no_chain", "DISABLE")):
                    psql(db, f"ALTER TABLE task_events {switch} TRIGGER task_events_link")
                    rates[mode].append(round(asyncio.run(_run(db, args.clients, args.seconds)), 1))
            means = {mode: sum(r) / len(r) for mode, r in rates.items()}
            print(
                json.dumps(
                    {
                        "cycles_per_s": rates,
                        "chain_over_no_chain": round(means["chain"] / means["no_chain"], 3),
                        "load": round(os.getloadavg()[0], 2),
                    }
                )
            )
            return
        load = os.getloadavg()[0]
        rate = asyncio.run(_run(db, args.clients, args.seconds))
    print(
        json.dumps(
            {
                "cycles_per_s": round(rate, 1),
                "no_limit": args.no_limit,
                "load": [round(load, 2), round(os.getloadavg()[0], 2)],
            }
        )
    )


if __name__ == "__main__":
    main()
