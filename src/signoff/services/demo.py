"""What ``signoff serve --demo`` adds, through the same services as the API.

Idempotent: everything has a fixed identity (keys, escalation ids, the resume link, the
webhook endpoint of the demo receiver, the console users), so running ``--demo`` again
finds it and adds nothing. The demo keys and link are **fixed and public**: never use
``--demo`` on a server other people can reach. The console users' passwords are new at
each start (printed once; the earlier ones stop working).
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from signoff.domain.clock import rfc3339
from signoff.domain.digests import canonical_json
from signoff.domain.states import Decision, Role, TaskStatus
from signoff.domain.tasks import Principal
from signoff.errors import SignoffError
from signoff.services import keys, revisions, tasks, users, webhooks
from signoff.services.context import ServiceContext
from signoff.services.notifications import hash_resume_token
from signoff.store import keys as key_store
from signoff.store import tasks as task_store
from signoff.store import waiting as waiting_store
from signoff.store import webhooks as webhook_store

PRODUCER_KEY = "signoff_demo-producer-key-public-do-not-use-in-production"
REVIEWER_KEY = "signoff_demo-reviewer-key-public-do-not-use-in-production"
PRODUCER_ID = "demo-bot"
REVIEWER_ID = "usr_op_771"
LINK_TOKEN = "demo-link-public-do-not-use-in-production"  # noqa: S105
RECEIVER_PATH = "/demo/receiver"
RECEIVER_DESCRIPTION = "serve --demo: the demo receiver"
CONSOLE_ADMIN_ID = "demo-admin"


def _id(name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"https://signoff.invalid/demo/{name}"))


@dataclass
class DemoTour:
    """What the demo made, for the start-up lines."""

    producer_key: str
    reviewer_key: str
    link: str
    receiver_secret: str
    tasks: dict[str, str] = field(default_factory=dict)
    """Role in the tour → task id."""
    console: list[ConsoleSignIn] = field(default_factory=list)
    """Who signs in to the console, with this run's password."""


@dataclass(frozen=True)
class ConsoleSignIn:
    principal_id: str
    role: Role
    password: str


async def _ensure_console_user(
    ctx: ServiceContext, admin: Principal, principal_id: str, role: Role, groups: list[str]
) -> ConsoleSignIn:
    """The console user (created once), with a password new at each run."""
    password = secrets.token_urlsafe(12)
    known = {user.principal_id: user for user in await users.list_users(ctx, admin)}
    user = known.get(principal_id)
    if user is None:
        await users.create_user(
            ctx,
            admin,
            principal_id=principal_id,
            role=role,
            groups=groups,
            email=f"{principal_id}@example.com",
            password=password,
        )
    else:
        if user.disabled_at is not None:
            await users.update_user(ctx, admin, principal_id, disabled=False)
        await users.set_password(ctx, admin, principal_id, password)
    return ConsoleSignIn(principal_id, role, password)


def _escalation(
    name: str, *, entity_type: str, reason_code: str, amount: str, **extra: Any
) -> dict[str, Any]:
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
        "escalation_id": _id(name),
        "idempotency_key": f"demo-{name}-000001",
        "entity_type": entity_type,
        "entity_id": f"demo_{name}",
        "reason_code": reason_code,
        "precheck_hash": hashlib.sha256(canonical_json(actions)).hexdigest(),
        "diagnostic_bundle": {
            "trace_id": _id(name).replace("-", ""),
            "attempted_actions": actions,
            "input_snapshot": {"amount": amount, "currency": "EUR", "channel": "api"},
            "evaluator_verdict": {"confidence_score": 0.41, "threshold": 0.85},
        },
        **extra,
    }


async def _ensure_key(
    ctx: ServiceContext,
    secret: str,
    *,
    role: Role,
    principal_id: str,
    groups: list[str] | None = None,
    email: str | None = None,
) -> Principal:
    key_hash = keys.hash_api_key(secret)
    async with ctx.database.transaction() as uow:
        if not await key_store.key_hash_exists(uow.connection, key_hash):
            await key_store.insert_api_key(
                uow.connection,
                key_id=uuid.uuid4(),
                key_hash=key_hash,
                role=role,
                principal_id=principal_id,
                now=ctx.now(),
                groups=groups,
                email=email,
            )
            await uow.commit()
    return await keys.authenticate(ctx, secret)


async def _exists(ctx: ServiceContext, task_id: str) -> Any:
    async with ctx.database.transaction(write=False) as uow:
        return await task_store.find_task(uow.connection, uuid.UUID(task_id))


async def _escalate_once(ctx: ServiceContext, producer: Principal, body: dict[str, Any]) -> Any:
    task = await _exists(ctx, body["escalation_id"])
    if task is None:
        await tasks.escalate(ctx, producer, body)
        task = await _exists(ctx, body["escalation_id"])
    return task


async def _receiver_secret(ctx: ServiceContext, admin: Principal, url: str) -> str:
    """The demo receiver's endpoint (created once; its URL follows --host/--port)."""
    async with ctx.database.transaction(write=False) as uow:
        rows = await webhook_store.list_endpoints(uow.connection)
    for row in rows:
        endpoint = row._mapping
        if endpoint["description"] == RECEIVER_DESCRIPTION:
            if endpoint["url"] != url or not endpoint["enabled"]:
                await webhooks.update_endpoint(
                    ctx, admin, str(endpoint["id"]), {"url": url, "enabled": True}
                )
            return str(endpoint["secret"])
    created = await webhooks.create_endpoint(
        ctx, admin, url=url, event_types=None, entity_types=None, description=RECEIVER_DESCRIPTION
    )
    return str(created["secret"])


async def _ensure_link(ctx: ServiceContext, task_id: str) -> None:
    token_hash = hash_resume_token(LINK_TOKEN)
    async with ctx.database.transaction() as uow:
        if await waiting_store.find_resume_token(uow.connection, token_hash) is None:
            now = ctx.now()
            await waiting_store.insert_resume_token(
                uow.connection,
                token_hash=token_hash,
                task_id=uuid.UUID(task_id),
                principal_id=REVIEWER_ID,
                expires_at=now + timedelta(days=30),
                now=now,
            )
            await uow.commit()


async def populate(ctx: ServiceContext, *, base_url: str) -> DemoTour:
    """Create (once) the demo's keys, tasks, webhook endpoint, resume link and console
    users. ``base_url`` is where this server listens (the demo receiver's address); the
    links people open start with ``SIGNOFF_PUBLIC_BASE_URL``."""
    admin = Principal(key_id=uuid.uuid4(), principal_id="demo-admin", role=Role.ADMIN)
    producer = await _ensure_key(ctx, PRODUCER_KEY, role=Role.PRODUCER, principal_id=PRODUCER_ID)
    reviewer = await _ensure_key(
        ctx,
        REVIEWER_KEY,
        role=Role.REVIEWER,
        principal_id=REVIEWER_ID,
        groups=["reviewers"],
        email="usr_op_771@example.com",
    )
    # The receiver first, so it hears about every task below.
    secret = await _receiver_secret(ctx, admin, base_url.rstrip("/") + RECEIVER_PATH)
    public = ctx.settings.public_base_url.rstrip("/")
    tour = DemoTour(PRODUCER_KEY, REVIEWER_KEY, f"{public}/r/{LINK_TOKEN}", secret)

    # 1. A payment held by an AML rule, waiting for a person; the resume link decides it.
    payment = await _escalate_once(
        ctx,
        producer,
        _escalation(
            "payment", entity_type="transaction", reason_code="AML_RULE_FAILED", amount="12500.00"
        ),
    )
    tour.tasks["payment"] = str(payment.id)
    await _ensure_link(ctx, str(payment.id))

    # 2. An article to publish: approvals bind to a revision; revision 2 replaced 1.
    article = await _escalate_once(
        ctx,
        producer,
        _escalation(
            "article",
            entity_type="article",
            reason_code="PUBLICATION_APPROVAL",
            amount="0.00",
            subject={
                "title": "Q4 results",
                "body": "Revenue grew 4 %.",
                "actions": [{"id": "publish"}],
            },
            source_revisions=["finance-report:r1"],
        ),
    )
    if article.current_revision == 1:
        article = await revisions.revise_subject(
            ctx,
            producer,
            str(article.id),
            if_match='"1"',
            body={
                "subject": {
                    "title": "Q4 results",
                    "body": "Revenue grew 4.2 % (restated).",
                    "actions": [{"id": "publish"}],
                },
                "source_revisions": ["finance-report:r2"],
            },
        )
    tour.tasks["article"] = str(article.id)

    # 3. A refund whose first deadline is minutes away (then: remind, reassign, expire).
    soon = rfc3339(ctx.now() + timedelta(minutes=10))
    refund = await _escalate_once(
        ctx,
        producer,
        _escalation(
            "refund",
            entity_type="refund",
            reason_code="REFUND_OVER_LIMIT",
            amount="980.00",
            deadline=soon,
        ),
    )
    tour.tasks["refund"] = str(refund.id)

    # 4. A decided task: its task.resolved webhook goes to the demo receiver.
    decided = await _escalate_once(
        ctx,
        producer,
        _escalation(
            "decided", entity_type="transaction", reason_code="AML_RULE_FAILED", amount="310.00"
        ),
    )
    if decided.status is TaskStatus.PENDING_REVIEW:
        try:
            grant = await tasks.claim(ctx, reviewer, str(decided.id))
            await tasks.resolve(
                ctx,
                reviewer,
                str(decided.id),
                grant.lease_token,
                decision=Decision.APPROVED,
                notes="Known customer; documents on file.",
                resolution_payload={"release": True},
                door="console",
            )
        except SignoffError:
            pass  # someone took it meanwhile: the tour still works
    tour.tasks["decided"] = str(decided.id)

    # 5. People for the console: the demo reviewer, and an admin who manages people.
    tour.console = [
        await _ensure_console_user(ctx, admin, REVIEWER_ID, Role.REVIEWER, ["reviewers"]),
        await _ensure_console_user(ctx, admin, CONSOLE_ADMIN_ID, Role.ADMIN, []),
    ]
    return tour
