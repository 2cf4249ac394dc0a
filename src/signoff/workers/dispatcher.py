"""The outbox dispatcher: delivers events to webhook endpoints, at least once.

Any number of dispatchers may run (inside ``signoff serve`` and as ``signoff worker``):
deliveries are leased with ``SKIP LOCKED`` on PostgreSQL, and every result is fenced by
the lease owner and attempt number. On PostgreSQL an idle dispatcher wakes on
``LISTEN signoff_outbox`` (a trigger notifies when an outbox event commits), listened to
again after the database restarts; SQLite polls every ``SIGNOFF_DISPATCHER_POLL_SECONDS``
(PostgreSQL too, as a fallback). Stopping drains: the attempts in flight finish
and are recorded before :meth:`Dispatcher.run` returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import structlog
from sqlalchemy.exc import IntegrityError

from signoff.domain.webhooks import (
    AttemptOutcome,
    DeliveryStatus,
    Verdict,
    judge,
    next_attempt_delay,
    parse_retry_after,
)
from signoff.errors import SignoffError
from signoff.metrics import WEBHOOK_ATTEMPTS
from signoff.net import vet_url
from signoff.services import delivery as delivery_service
from signoff.services.common import dumps
from signoff.services.context import ServiceContext
from signoff.services.delivery import AttemptRecord
from signoff.store.availability import database_unavailable
from signoff.store.changes import NOTIFY_CHANNEL as NOTIFY_CHANNEL  # re-exported
from signoff.store.listen import Listener
from signoff.store.webhooks import ClaimedDelivery
from signoff.webhooks import signature_headers
from signoff.workers.outage import OutageLog

log = structlog.get_logger("signoff.dispatcher")

MAX_STORED_RESPONSE = 1024


class Dispatcher:
    """One dispatcher. ``client`` may be injected (tests use a transport seam)."""

    def __init__(self, context: ServiceContext, *, client: httpx.AsyncClient | None = None) -> None:
        self.context = context
        self.settings = context.settings
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._client = client or httpx.AsyncClient(
            timeout=self.settings.webhook_timeout_seconds, follow_redirects=False, trust_env=False
        )
        self._wake = asyncio.Event()
        self.listener = self._listener()

    async def run_once(self) -> int:
        """Fan out new events, then send every due delivery once. Returns attempts made."""
        claimed = (await self._claim_round(self.settings.dispatcher_batch_size)).deliveries
        await asyncio.gather(*(self._deliver(delivery) for delivery in claimed))
        return len(claimed)

    async def _claim_round(self, limit: int) -> delivery_service.Round:
        return await delivery_service.claim_deliveries(self.context, owner=self.owner, limit=limit)

    async def _deliver(self, delivery: ClaimedDelivery) -> None:
        attempted_at = self.context.now()
        body = dumps(delivery.payload).encode("utf-8")
        started = time.perf_counter()
        outcome, response_body = await self._send(delivery, body)
        latency_ms = int((time.perf_counter() - started) * 1000)
        await self._record(delivery, attempted_at, outcome, response_body, latency_ms)

    async def _send(
        self, delivery: ClaimedDelivery, body: bytes
    ) -> tuple[AttemptOutcome, str | None]:
        try:
            target = await vet_url(
                delivery.url, allow_private=self.settings.webhook_allow_private_networks
            )
        except SignoffError as refused:
            return AttemptOutcome(status_code=None, error=refused.message), None
        headers = signature_headers(
            event_id=str(delivery.event_id),
            body=body,
            secrets_newest_first=delivery.secrets_newest_first,
            # Receivers compare this with their own wall clock, not ours.
            timestamp=datetime.now(UTC),
        )
        headers |= {
            "Content-Type": "application/json",
            "User-Agent": "Signoff-Webhooks/1",
            "Host": target.host_header,
        }
        if delivery.traceparent:  # W3C trace context of the escalation this event is about
            headers["traceparent"] = delivery.traceparent
        extensions = {"sni_hostname": target.host} if target.pinned_url.startswith("https") else {}
        try:
            # One deadline for the whole attempt: httpx's timeout is per read, so a
            # receiver trickling its answer could otherwise outlive the attempt's lease.
            response = await asyncio.wait_for(
                self._post(target.pinned_url, body, headers, extensions),
                timeout=self.settings.webhook_timeout_seconds,
            )
        except (httpx.TimeoutException, TimeoutError):
            return AttemptOutcome(status_code=None, error="timeout"), None
        except httpx.HTTPError as exc:
            return AttemptOutcome(
                status_code=None, error=f"{type(exc).__name__}: {exc}"[:500]
            ), None
        retry_after = parse_retry_after(response.headers.get("retry-after"), self.context.now())
        text = response.content.decode("utf-8", "replace")[:MAX_STORED_RESPONSE]
        return AttemptOutcome(
            status_code=response.status_code, retry_after_seconds=retry_after
        ), text

    async def _post(
        self, url: str, body: bytes, headers: dict[str, str], extensions: dict[str, Any]
    ) -> httpx.Response:
        async with self._client.stream(
            "POST", url, content=body, headers=headers, extensions=extensions
        ) as response:
            kept = b""
            async for chunk in response.aiter_bytes():
                kept += chunk[: MAX_STORED_RESPONSE - len(kept)]
                if len(kept) >= MAX_STORED_RESPONSE:
                    break  # the status is what matters; stop reading a large answer
            response._content = kept
            return response

    async def _record(
        self,
        delivery: ClaimedDelivery,
        attempted_at: datetime,
        outcome: AttemptOutcome,
        response_body: str | None,
        latency_ms: int,
    ) -> None:
        now = self.context.now()
        verdict = judge(outcome)
        next_at: datetime | None = None
        if verdict is Verdict.SUCCESS:
            status = DeliveryStatus.SUCCEEDED
        else:
            delay = next_attempt_delay(
                attempts_made=delivery.attempt,
                schedule=self.settings.retry_schedule,
                outcome=outcome,
                jitter=self.settings.webhook_retry_jitter,
            )
            if verdict is Verdict.DISABLE_ENDPOINT or delay is None:
                status = DeliveryStatus.DEAD
            else:
                status, next_at = DeliveryStatus.PENDING, now + timedelta(seconds=delay)
        record = AttemptRecord(
            attempted_at, outcome, response_body, latency_ms, status, next_at, verdict, now
        )
        try:
            held = await delivery_service.record_delivery_attempt(
                self.context, owner=self.owner, delivery=delivery, record=record
            )
        except IntegrityError:
            # The endpoint (and so the delivery) was deleted while the attempt was in flight.
            log.info("webhook.attempt_orphaned", delivery_id=str(delivery.id))
            return
        WEBHOOK_ATTEMPTS.labels(status.value).inc()
        log.info(
            "webhook.attempt",
            delivery_id=str(delivery.id),
            event_id=str(delivery.event_id),
            attempt=delivery.attempt,
            status_code=outcome.status_code,
            error=outcome.error,
            result=status.value,
            lease_held=held,
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Loop until ``stop`` is set. Attempts run concurrently (up to
        ``SIGNOFF_DISPATCHER_BATCH_SIZE``) and new work is claimed while others are in
        flight, so one slow receiver never holds up the rest. On stop, the attempts in
        flight finish and are recorded before this returns."""
        listener = self.listener
        # The process's one shared listener (store/changes.py) wakes us and long-polls.
        changes = self.context.database.changes
        unsubscribe = changes.subscribe(self._wake.set)
        await changes.start()
        in_flight: set[asyncio.Task[None]] = set()
        capacity = self.settings.dispatcher_batch_size
        outage = OutageLog("dispatcher")
        loop = asyncio.get_running_loop()
        last_round = -float("inf")
        try:
            while not stop.is_set():
                # Coalesce: wake-ups arrive with every commit, in this process and (by
                # notification) in others; a round takes whatever came in the meantime.
                pause = last_round + self.settings.dispatcher_coalesce_seconds - loop.time()
                if pause > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), pause)
                    if stop.is_set():
                        break
                last_round = loop.time()
                # Clear before the round, not after: a notification that arrives while
                # the round runs must still cut the next wait short.
                self._wake.clear()
                self.context.database.outbox_committed.clear()
                claimed: list[ClaimedDelivery] = []
                backlog = False
                if len(in_flight) < capacity:
                    try:
                        taken = await self._claim_round(capacity - len(in_flight))
                        claimed, backlog = taken.deliveries, taken.backlog
                    except Exception as exc:  # the loop must outlive a database hiccup
                        outage.failed(exc)
                    else:
                        outage.succeeded()
                        if listener is not None and not listener.listening.is_set():
                            listener.nudge()  # the database answers again: listen again now
                for delivery in claimed:
                    attempt = asyncio.create_task(self._deliver(delivery))
                    in_flight.add(attempt)
                    attempt.add_done_callback(self._finished(in_flight))
                if not claimed and not backlog:
                    await self._idle(stop)
            if in_flight:
                await asyncio.gather(*in_flight, return_exceptions=True)
        finally:
            unsubscribe()
            await self._client.aclose()

    def _finished(self, in_flight: set[asyncio.Task[None]]) -> Any:
        def done(attempt: asyncio.Task[None]) -> None:
            in_flight.discard(attempt)
            failure = None if attempt.cancelled() else attempt.exception()
            if failure is not None and database_unavailable(failure):
                # Sent, perhaps, but not recorded: made again once its lease lapses.
                log.warning("webhook.attempt_unrecorded", error=repr(failure)[:300])
            elif failure is not None:
                log.error("dispatcher.attempt_failed", error=repr(failure))
            self._wake.set()  # a finished attempt may make a task's next event due

        return done

    async def _idle(self, stop: asyncio.Event) -> None:
        committed = self.context.database.outbox_committed  # cleared at each round's start
        waiters = [
            asyncio.ensure_future(self._wake.wait()),
            asyncio.ensure_future(stop.wait()),
            asyncio.ensure_future(committed.wait()),
        ]
        await asyncio.wait(
            waiters,
            timeout=self.settings.dispatcher_poll_seconds,
            return_when=asyncio.FIRST_COMPLETED,
        )
        for waiter in waiters:
            waiter.cancel()

    def _listener(self) -> Listener | None:
        """On PostgreSQL, the process's shared LISTEN on the outbox channel (it wakes this
        dispatcher and long-poll waiters, and is made again whenever its connection is
        lost); SQLite has none (it polls)."""
        return self.context.database.changes.listener
