"""Use cases of webhook delivery (the dispatcher's transactions): claim a round of due
deliveries, and record what one attempt produced. Only services commit."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING

import structlog

from signoff.crypto import SecretUnavailable
from signoff.domain.webhooks import (
    FAILING_ENDPOINT_DISABLE_AFTER,
    AttemptOutcome,
    ClaimedDelivery,
    DeliveryStatus,
    Verdict,
)
from signoff.metrics import RESOLVE_TO_DELIVERED
from signoff.services import evidence
from signoff.services.context import ServiceContext
from signoff.store import catchup, deliveries
from signoff.store import delivery_retention as retention
from signoff.store import webhooks as store

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from sqlalchemy import Delete
    from sqlalchemy.ext.asyncio import AsyncConnection

    #: One retention batch in its own write transaction: how many rows it removed.
    Batch = Callable[[AsyncConnection], Awaitable[int]]

log = structlog.get_logger("signoff.delivery")


@dataclass(frozen=True)
class AttemptRecord:
    """What one attempt produced and what it means for the delivery."""

    attempted_at: datetime
    outcome: AttemptOutcome
    response_body: str | None
    latency_ms: int
    status: DeliveryStatus
    next_at: datetime | None
    verdict: Verdict
    now: datetime


@dataclass(frozen=True)
class Round:
    """What one dispatcher round leased, and whether events are still waiting to be
    fanned out (the round took a full batch of them): then the next round comes at once,
    not after an idle wait."""

    deliveries: list[ClaimedDelivery]
    backlog: bool = False


async def claim_deliveries(ctx: ServiceContext, *, owner: str, limit: int) -> Round:
    """Fan new outbox events out to deliveries, then lease up to ``limit`` due ones to
    ``owner`` for ``SIGNOFF_WEBHOOK_ATTEMPT_LEASE_SECONDS``. A read first, so an idle
    dispatcher takes no write lock."""
    now = ctx.now()
    work = await deliveries.has_work_now(ctx.database, now=now)
    if not work:
        return Round([])
    made, backlog = 0, False
    if work.unfanned:
        batch = ctx.settings.dispatcher_batch_size * 4
        # run_write: on SQLite, one trip to its thread (store/runtime/litethread.py), so the
        # writer turn is not held while the busy event loop gets round to each answer.
        events, made = await ctx.database.run_write(
            lambda conn: deliveries.fan_out(conn, now=now, limit=batch)
        )
        backlog = events >= batch
    if not work.due and not made:
        return Round([], backlog)  # events no endpoint wants: nothing to send this round
    leased_until = now + timedelta(seconds=ctx.settings.webhook_attempt_lease_seconds)
    claimed = await ctx.database.run_write(
        lambda conn: deliveries.claim_due_deliveries(
            conn, owner=owner, now=now, leased_until=leased_until, limit=limit
        )
    )
    ready = await _with_clear_secrets(ctx, claimed, owner=owner, now=now)
    return Round(await _with_receipts(ctx, ready), backlog)


async def _with_receipts(
    ctx: ServiceContext, claimed: list[ClaimedDelivery]
) -> list[ClaimedDelivery]:
    """Each event's body carries the receipt of the trail record it reports."""
    documents = await evidence.with_receipts(
        ctx, [(d.record_id, d.receipt, d.payload) for d in claimed]
    )
    return [replace(d, payload=body) for d, body in zip(claimed, documents, strict=True)]


#: How long a delivery whose secret this process cannot decrypt waits before another try.
UNDECRYPTABLE_RETRY_SECONDS = 60


async def _with_clear_secrets(
    ctx: ServiceContext, claimed: list[ClaimedDelivery], *, owner: str, now: datetime
) -> list[ClaimedDelivery]:
    """Decrypt each delivery's signing secrets. A delivery whose secret this process
    cannot decrypt is never sent (not unsigned, not wrongly signed): it is given back
    uncounted, due again in a minute, and the refusal is logged as an error."""
    ready, refused = [], []
    for delivery in claimed:
        try:
            clear = tuple(ctx.keyring.decrypt(s) for s in delivery.secrets_newest_first)
        except (SecretUnavailable, ValueError) as exc:
            refused.append(delivery)
            log.error(
                "webhook.secret_undecryptable",
                delivery_id=str(delivery.id),
                endpoint_id=str(delivery.endpoint_id),
                error=str(exc),
            )
            continue
        ready.append(replace(delivery, secrets_newest_first=clear))
    if refused:
        async with ctx.database.transaction() as uow:
            await deliveries.postpone_deliveries(
                uow.connection,
                [delivery.id for delivery in refused],
                owner=owner,
                until=now + timedelta(seconds=UNDECRYPTABLE_RETRY_SECONDS),
            )
            await uow.commit()
    return ready


async def record_delivery_attempts(
    ctx: ServiceContext, *, owner: str, attempts: Sequence[tuple[ClaimedDelivery, AttemptRecord]]
) -> list[bool]:
    """Store a group of finished attempts and their consequences for the deliveries and
    their endpoints (410, or five days of failures, disables one), in one transaction.
    Returns, per attempt, whether ``owner`` still held the delivery's lease.

    An endpoint's failure streak ends with its last success in the group and starts
    with the first failure after it, exactly as recording the attempts one by one in the
    group's order would leave it.

    Raises:
        sqlalchemy.exc.IntegrityError: an endpoint was deleted while an attempt ran.
    """
    rows = [
        deliveries.AttemptRow(
            delivery_id=delivery.id,
            attempt=delivery.attempt,
            attempted_at=record.attempted_at,
            status_code=record.outcome.status_code,
            latency_ms=record.latency_ms,
            error=record.outcome.error,
            response_body=record.response_body,
            new_status=record.status,
            next_attempt_at=record.next_at,
            now=record.now,
        )
        for delivery, record in attempts
    ]
    by_endpoint: dict[uuid.UUID, list[AttemptRecord]] = {}
    for delivery, record in attempts:
        by_endpoint.setdefault(delivery.endpoint_id, []).append(record)

    async def write(conn: AsyncConnection) -> set[uuid.UUID]:
        held = await deliveries.record_attempts(conn, owner=owner, attempts=rows)
        for endpoint_id in sorted(by_endpoint):  # a fixed lock order across dispatchers
            await _settle_endpoint(conn, endpoint_id, by_endpoint[endpoint_id])
        return held

    held = await ctx.database.run_write(write)
    for delivery, record in attempts:
        if record.verdict is Verdict.SUCCESS and delivery.payload.get("type") == "task.resolved":
            _observe_resolve_to_delivered(delivery, record.now)
    return [delivery.id in held for delivery, _ in attempts]


async def _settle_endpoint(
    conn: AsyncConnection, endpoint_id: uuid.UUID, records: list[AttemptRecord]
) -> None:
    """An endpoint's consequences of a group of its attempts, in the order they finished:
    its failure streak, then (a 410, or five days of failures) whether it is disabled."""
    gone = [r for r in records if r.verdict is Verdict.DISABLE_ENDPOINT]
    records = [r for r in records if r.verdict is not Verdict.DISABLE_ENDPOINT]
    if gone:
        await store.disable_endpoint(
            conn, endpoint_id, reason="receiver answered 410 Gone", now=gone[0].now
        )
    if not records:
        return
    succeeded = [n for n, r in enumerate(records) if r.verdict is Verdict.SUCCESS]
    if succeeded and succeeded[-1] == len(records) - 1:
        await store.note_endpoint_result(conn, endpoint_id, succeeded=True, now=records[-1].now)
        return
    if succeeded:  # the streak that was running ended; a new one starts after the success
        await store.note_endpoint_result(conn, endpoint_id, succeeded=True, now=records[0].now)
    first_failure = records[succeeded[-1] + 1 if succeeded else 0]
    failing_since = await store.note_endpoint_result(
        conn, endpoint_id, succeeded=False, now=first_failure.now
    )
    if gone:
        return
    last = records[-1].now
    if failing_since is not None and last - failing_since >= FAILING_ENDPOINT_DISABLE_AFTER:
        await store.disable_endpoint(conn, endpoint_id, reason="failing for 5 days", now=last)


def _observe_resolve_to_delivered(delivery: ClaimedDelivery, now: datetime) -> None:
    try:
        resolved_at = datetime.fromisoformat(str(delivery.payload["created_at"]))
    except (KeyError, ValueError):
        return
    RESOLVE_TO_DELIVERED.observe(max(0.0, (now - resolved_at).total_seconds()))


#: Retention batches per kind in one sweep: bounds one sweep's work, while a backlog
#: (retention turned on for a large database) still shrinks by many batches a sweep.
RETENTION_BATCHES_PER_SWEEP = 20


@dataclass(frozen=True)
class Purged:
    """What one retention pass removed."""

    delivered: int = 0
    dead: int = 0
    events: int = 0

    def __bool__(self) -> bool:
        return bool(self.delivered or self.dead or self.events)


async def purge_old_deliveries(ctx: ServiceContext) -> Purged:
    """Retention: remove deliveries that succeeded more than
    ``SIGNOFF_DELIVERED_RETENTION_DAYS`` ago and dead-lettered ones older than
    ``SIGNOFF_FAILED_RETENTION_DAYS`` (their attempts with them), then outbox events older
    than the first that are fanned out and have no delivery left. A batch of
    ``SIGNOFF_RETENTION_BATCH_SIZE`` rows per statement, each its own short transaction;
    0 days keeps that kind forever. Pending deliveries, events waiting for their fan-out
    and the audit trail are never touched."""
    settings, now = ctx.settings, ctx.now()
    limit = settings.retention_batch_size

    def purging(statement: Delete, cutoff: datetime) -> Batch:
        return lambda conn: retention.purge(conn, statement, cutoff=cutoff, limit=limit)

    def purging_events(cutoff: datetime) -> Batch:
        # Each producer's catch-up horizon moves with the events (ERR_CURSOR_EXPIRED).
        return lambda conn: catchup.purge_events(conn, cutoff=cutoff, limit=limit, now=now)

    removed = {}
    for kind, make, days in (
        (
            "delivered",
            partial(purging, retention.PURGE_DELIVERED),
            settings.delivered_retention_days,
        ),
        ("dead", partial(purging, retention.PURGE_DEAD), settings.failed_retention_days),
        ("events", purging_events, settings.delivered_retention_days),
    ):
        removed[kind] = 0
        if not days:
            continue
        removed[kind] = await _purge_in_batches(ctx, make(now - timedelta(days=days)), limit)
    return Purged(**removed)


async def _purge_in_batches(ctx: ServiceContext, batch: Batch, limit: int) -> int:
    removed = 0
    for _ in range(RETENTION_BATCHES_PER_SWEEP):
        count = await ctx.database.run_write(batch)
        removed += count
        if count < limit:
            break
    return removed
