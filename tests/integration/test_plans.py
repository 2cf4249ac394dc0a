"""The dispatcher's claim keeps its work per candidate constant as the backlog grows, in
the generic plan PostgreSQL soon uses for a prepared statement.

asyncpg prepares every statement; after a few runs PostgreSQL may plan it once for any
parameters. With ``status = 'PENDING'`` bound as a parameter, that plan could not use the
partial indexes: it read every delivery and compared each pending one with every other
(2,000 pending made each claim take a second). The test counts rows, not time."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
from sqlalchemy.dialects import postgresql

from signoff.store.deliveries import claim_statement
from tests.integration.test_batches import _in_context, quiet  # noqa: F401 (a fixture)
from tests.integration.test_webhooks import register
from tests.receiver import Receiver
from tests.support import LiveServer, escalation

BACKLOG = 120
LIMIT = 5


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found += _nodes(child)
    return found


@pytest.mark.parametrize("engine", ["postgresql"], indirect=True)
def test_the_generic_claim_plan_probes_each_candidate_once(quiet: LiveServer) -> None:  # noqa: F811
    with Receiver() as receiver:
        register(quiet, receiver.url, event_types=["task.created"])
    with quiet.new_client("producer") as producer:
        for _ in range(BACKLOG):
            assert producer.escalate(escalation()).status_code == 201

    async def fan_out(ctx: Any) -> None:
        from signoff.store import deliveries

        async with ctx.database.transaction() as uow:
            await deliveries.fan_out(uow.connection, now=quiet.clock.now(), limit=10 * BACKLOG)
            await uow.commit()

    _in_context(quiet, fan_out)
    now = quiet.clock.now()
    compiled = claim_statement(
        owner="plan-test", now=now, leased_until=now + timedelta(seconds=30), limit=LIMIT
    ).compile(dialect=postgresql.asyncpg.dialect())  # type: ignore[attr-defined]
    params = [compiled.params[name] for name in compiled.positiontup]

    async def explain() -> dict[str, Any]:
        url = quiet.settings.database_url.replace("postgresql+asyncpg", "postgresql")
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("SET plan_cache_mode = force_generic_plan")
            leasing = conn.transaction()  # EXPLAIN ANALYZE runs the UPDATE: roll it back
            await leasing.start()
            rows = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {compiled.string}", *params)
            await leasing.rollback()
            return dict(json.loads(rows)[0]["Plan"])
        finally:
            await conn.close()

    plan = asyncio.run(explain())
    nodes = _nodes(plan)
    assert plan["Actual Rows"] == LIMIT  # it did lease what was asked
    over_deliveries = [n for n in nodes if n.get("Relation Name") == "webhook_deliveries"]
    assert not [n for n in over_deliveries if n["Node Type"] == "Seq Scan"]
    # Each node over the deliveries reads about what the claim needs, not the backlog.
    for node in over_deliveries:
        assert node["Actual Rows"] * node["Actual Loops"] <= 4 * LIMIT, node
    assert sum(n.get("Rows Removed by Join Filter", 0) for n in nodes) <= 4 * LIMIT
