"""The console inbox's server time over 10,000 waiting tasks on PostgreSQL.

A fresh database, bulk-loaded with SQL (``INSERT … SELECT … FROM generate_series``):
``--tasks`` waiting tasks (a tenth of them in a group the reviewer is not in, a few with
an AI summary, every one with a deadline) and ``--decided`` decided ones (a history, a
tenth decided by the reviewer). Then, in this process, the inbox's own service calls,
each timed ``--repeat`` times after a warm-up, as a reviewer in one group:

- ``first page``: the Available view's first page with its count and position
  (:func:`signoff.services.inbox.page_of_view`);
- ``later page``: the same view 100 pages on (the page after a cursor);
- ``search id`` / ``search words``: an entity id, two words of an AI summary;
- ``counts``: every tab's count (:func:`signoff.services.inbox.count_views`);
- ``whole page``: what one inbox page asks (page, counts and the filter choices);

against a baseline measured on the same database in the same run through the same
connection pool: a plain ``SELECT * FROM review_tasks WHERE status IN (…) ORDER BY
created_at, id LIMIT 50``. Prints p50 and p99 in milliseconds and each p50 as a ratio to
the baseline's; writes ``/tmp/signoff-bench/console_inbox.json``.

    python -m bench.console_inbox --tasks 10000 --decided 10000 --repeat 50
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.common import fresh_pg_database, machine, percentile, pg_url, psql
from sqlalchemy import text

from signoff.domain.clock import SystemClock
from signoff.domain.states import Role
from signoff.domain.tasks import Principal
from signoff.services import inbox
from signoff.services.context import ServiceContext
from signoff.services.inbox import InboxFilters, View
from signoff.settings import Settings
from signoff.store.runtime.database import open_database

EXAMPLE = Path(__file__).resolve().parents[1] / "tests" / "data" / "example-escalation.json"
RESULTS = Path("/tmp/signoff-bench/console_inbox.json")
READER = Principal(
    key_id=uuid.uuid4(), principal_id="ann", role=Role.REVIEWER, groups=("payments",)
)


def bulk_load(database: str, tasks: int, decided: int) -> float:
    """Insert the waiting and the decided tasks; returns the seconds it took."""
    example = json.loads(EXAMPLE.read_text())
    bundle = json.dumps(example["diagnostic_bundle"], separators=(",", ":"))
    summary = json.dumps(
        {"recommendation": "REJECT", "rationale": "The payee is on a sanctioned list."}
    )
    started = time.perf_counter()
    common = (
        "INSERT INTO review_tasks (id, status, entity_type, entity_id, reason_code,"
        " precheck_hash, diagnostic_bundle, producer_id, idempotency_key, version,"
        " created_at, updated_at, escalation_level, deadline_at, due_at, assigned_group,"
        " summary, search_text, decision, operator_id, resolved_at)"
    )
    psql(
        database,
        common + " SELECT gen_random_uuid(), 'PENDING_REVIEW', 'invoice',"
        " 'bulk_' || lpad(g::text, 5, '0'),"
        " CASE WHEN g % 3 = 0 THEN 'LOW_CONFIDENCE' ELSE 'AML_RULE_FAILED' END,"
        f" '{example['precheck_hash']}', '{bundle}', 'bench-bot', 'bulk-' || g, 1,"
        f" now() - ({tasks} - g) * interval '1 s', now() - ({tasks} - g) * interval '1 s', 0,"
        " now() + (g - 500) * interval '1 min', now() + (g - 500) * interval '1 min',"
        " CASE WHEN g % 10 = 0 THEN 'aml' WHEN g % 10 = 1 THEN 'payments' END,"
        f" CASE WHEN g % 100 = 7 THEN '{summary}' END,"
        " 'invoice bulk_' || lpad(g::text, 5, '0') || CASE WHEN g % 3 = 0"
        " THEN ' low_confidence' ELSE ' aml_rule_failed' END"
        " || CASE WHEN g % 100 = 7 THEN ' reject the payee is on a sanctioned list.' ELSE ''"
        f" END, NULL, NULL, NULL FROM generate_series(1, {tasks}) AS g",
    )
    if decided:
        psql(
            database,
            common + " SELECT gen_random_uuid(), 'RESOLVED', 'invoice', 'old_' || g,"
            f" 'AML_RULE_FAILED', '{example['precheck_hash']}', '{bundle}', 'bench-bot',"
            " 'old-' || g, 3, now() - interval '30 days' + g * interval '1 s',"
            " now() - interval '29 days' + g * interval '1 s', 0, NULL, NULL, NULL, NULL,"
            " 'invoice old_' || g || ' aml_rule_failed', 'APPROVED',"
            " CASE WHEN g % 10 = 0 THEN 'ann' ELSE 'bob' END,"
            " now() - interval '29 days' + g * interval '1 s'"
            f" FROM generate_series(1, {decided}) AS g",
        )
    psql(database, "VACUUM ANALYZE review_tasks")
    return time.perf_counter() - started


async def _timed(call: Callable[[], Awaitable[Any]], repeat: int) -> list[float]:
    for _ in range(3):  # warm-up: plans, pool, caches
        await call()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    return times


async def measure(database: str, repeat: int) -> dict[str, list[float]]:
    settings = Settings(database_url=pg_url(database))
    db = open_database(settings)
    ctx = ServiceContext(database=db, settings=settings, clock=SystemClock())
    plain = InboxFilters()
    try:
        page = await inbox.page_of_view(ctx, READER, View.AVAILABLE, plain)
        for _ in range(99):
            assert page.next is not None
            page = await inbox.page_of_view(ctx, READER, View.AVAILABLE, plain, cursor=page.next)
        later = page.next
        found = await inbox.page_of_view(
            ctx, READER, View.AVAILABLE, InboxFilters(terms=("bulk_07341",))
        )
        assert found.total == 1, found.total

        async def baseline() -> None:
            async with db.transaction(write=False) as uow:
                statement = text(
                    "SELECT * FROM review_tasks WHERE status IN ('PENDING_REVIEW', 'CLAIMED')"
                    " ORDER BY created_at, id LIMIT 50"
                )
                (await uow.connection.execute(statement)).fetchall()

        async def whole_page() -> None:
            await inbox.page_of_view(ctx, READER, View.AVAILABLE, plain)
            await inbox.count_views(ctx, READER, plain)
            await inbox.facets(ctx, READER)

        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "baseline SELECT … LIMIT 50": baseline,
            "first page": lambda: inbox.page_of_view(ctx, READER, View.AVAILABLE, plain),
            "later page (page 101)": lambda: inbox.page_of_view(
                ctx, READER, View.AVAILABLE, plain, cursor=later
            ),
            "search id": lambda: inbox.page_of_view(
                ctx, READER, View.AVAILABLE, InboxFilters(terms=("bulk_07341",))
            ),
            "search words": lambda: inbox.page_of_view(
                ctx, READER, View.AVAILABLE, InboxFilters(terms=("sanctioned", "payee"))
            ),
            "counts (every tab)": lambda: inbox.count_views(ctx, READER, plain),
            "whole page (page, counts, filter choices)": whole_page,
        }
        return {name: await _timed(call, repeat) for name, call in calls.items()}
    finally:
        await db.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--decided", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    meta = machine() | vars(args)
    with fresh_pg_database("signoff_bench_inbox") as database:
        loaded = bulk_load(database, args.tasks, args.decided)
        times = asyncio.run(measure(database, args.repeat))
    base = percentile(times["baseline SELECT … LIMIT 50"], 0.5)
    rows = []
    print(f"{args.tasks:,} waiting and {args.decided:,} decided tasks loaded in {loaded:.1f} s")
    print(f"{'call':45} {'p50 ms':>8} {'p99 ms':>8} {'× baseline p50':>15}")
    for name, values in times.items():
        p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
        rows.append({"call": name, "p50_ms": round(p50, 2), "p99_ms": round(p99, 2)})
        rows[-1]["ratio"] = round(p50 / base, 2)
        print(f"{name:45} {p50:8.2f} {p99:8.2f} {p50 / base:14.2f}×")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"meta": meta, "runs": rows}, indent=2))


if __name__ == "__main__":
    main()
