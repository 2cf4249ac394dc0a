"""Demo content for ``signoff serve --demo``: a producer, a reviewer, and a few tasks
escalated through the same service code as the API."""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime
from typing import Any

from signoff.domain.clock import SystemClock
from signoff.domain.digests import canonical_json
from signoff.domain.states import Role
from signoff.domain.tasks import Principal
from signoff.services import keys, tasks
from signoff.services.context import ServiceContext
from signoff.settings import Settings
from signoff.store.database import Database, create_engine


def demo_escalation(index: int) -> dict[str, Any]:
    """A valid escalation (shaped like ``shared/contract/example-escalation.json``)."""
    actions = [
        {
            "action": "retry_payment_gateway",
            "executed_at": "2026-11-29T08:15:02Z",
            "result": "timeout after 3 attempts",
        },
        {
            "action": "rerun_aml_rules",
            "executed_at": "2026-11-29T08:15:09Z",
            "result": "rule AML-04 still failing",
        },
    ]
    return {
        "escalation_id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"signoff-demo-{index}")),
        "idempotency_key": f"demo-escalation-{index:06d}",
        "entity_type": "transaction",
        "entity_id": f"txn_demo_{index}",
        "reason_code": "AML_RULE_FAILED",
        "precheck_hash": hashlib.sha256(canonical_json(actions)).hexdigest(),
        "diagnostic_bundle": {
            "trace_id": uuid.uuid4().hex,
            "attempted_actions": actions,
            "input_snapshot": {
                "amount": f"{1000 + 500 * index}.00",
                "currency": "EUR",
                "channel": "api",
            },
            "evaluator_verdict": {"confidence_score": 0.41, "threshold": 0.85},
        },
    }


async def seed_demo(settings: Settings) -> dict[str, str]:
    """Create a demo producer and reviewer key and three pending tasks. Returns the keys."""
    database = Database(create_engine(settings))
    try:
        context = ServiceContext(database=database, settings=settings, clock=SystemClock())
        admin = Principal(key_id=uuid.uuid4(), principal_id="demo-admin", role=Role.ADMIN)
        producer = await keys.create_api_key(
            context, admin, role=Role.PRODUCER, principal_id="demo-bot"
        )
        reviewer = await keys.create_api_key(
            context, admin, role=Role.REVIEWER, principal_id="usr_op_771"
        )
        as_producer = Principal(key_id=producer.id, principal_id="demo-bot", role=Role.PRODUCER)
        stamp = int(datetime.now(UTC).timestamp())
        for index in range(3):
            await tasks.escalate(context, as_producer, demo_escalation(stamp * 10 + index))
        return {"producer": producer.key, "reviewer": reviewer.key}
    finally:
        await database.dispose()
