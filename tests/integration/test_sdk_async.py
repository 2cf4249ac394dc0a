"""``AsyncSignoff`` against a real Signoff (SQLite and PostgreSQL): the same operations as
the blocking client, awaited."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from signoff.client import AlreadyExecuting, ApprovalNotValid, AsyncSignoff, digest
from tests.support import LiveServer


def test_the_async_client_escalates_waits_and_executes(server: LiveServer) -> None:
    producer_key = str(server.new_client("producer").key)
    reviewer_key = str(server.new_client("reviewer").key)
    subject = {"title": "Refund", "amount": "620.00", "actions": [{"id": "refund"}]}
    entity = f"refund-{uuid.uuid4().hex[:8]}"

    async def story() -> None:
        async with (
            AsyncSignoff(server.base_url, producer_key, backoff=0) as agent,
            AsyncSignoff(server.base_url, reviewer_key, backoff=0) as person,
        ):
            task = await agent.escalate(
                key=entity,
                entity_type="refund",
                entity_id=entity,
                reason_code="ABOVE_LIMIT",
                attempted_actions=[
                    {"action": "policy", "executed_at": "2026-12-01T09:00:00Z", "result": "no"}
                ],
                evaluator_verdict={"confidence_score": 0.5, "threshold": 0.9},
                input_snapshot={"amount": "620.00"},
                trace_id="async",
                subject=subject,
                metadata={"run": entity},
            )
            assert task.digest == digest(subject)
            assert task.metadata == {"run": entity}

            async def decide() -> None:
                claimed = await person.claim(task.id)
                await person.resolve(claimed, decision="APPROVED", notes="ok")

            waited, _ = await asyncio.gather(agent.wait_for_decision(task.id, timeout=60), decide())
            assert waited.decision == "APPROVED"

            with pytest.raises(ApprovalNotValid) as refused:
                async with agent.execution(task.id, subject={**subject, "amount": "6200.00"},
                                           operation_id="refund-1"):  # fmt: skip
                    pass
            assert refused.value.reason == "STALE_DIGEST"

            async with agent.execution(task.id, subject=subject, operation_id="refund-1") as run:
                assert run.token
                with pytest.raises(AlreadyExecuting):
                    async with agent.execution(
                        task.id, subject=subject, operation_id="refund-2", wait_for_lease=0
                    ):
                        pass
                for action in run.pending:
                    await run.complete(action, {"refunded": True})
            assert (await agent.get_task(task.id)).execution_status == "COMPLETED"
            listed = [t.id async for t in agent.list_tasks(entity_type="refund", entity_id=entity)]
            assert listed == [task.id]

    asyncio.run(story())
