"""The outbox dispatcher: delivers events to webhook endpoints, at least once.

Any number of dispatchers may run (inside ``signoff serve`` and as ``signoff worker``):
deliveries are leased with ``SKIP LOCKED`` on PostgreSQL, and every result is fenced by
the lease owner and attempt number. On PostgreSQL an idle dispatcher wakes on
``LISTEN signoff_outbox`` (each process announces what it committed, store/runtime/announce.py),
listened to again after the database restarts; a commit in its own process wakes it
directly. SQLite polls every ``SIGNOFF_DISPATCHER_POLL_SECONDS`` (PostgreSQL too, as a
fallback). Results are recorded in groups (workers/recorder.py). Stopping drains: the
attempts in flight finish and are recorded before :meth:`Dispatcher.run` returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import structlog
from sqlalchemy.exc import IntegrityError

from signoff import tracing
from signoff.domain.webhooks import (
    AttemptOutcome,
    ClaimedDelivery,
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
from signoff.services import evidence
from signoff.services.common import dumps
from signoff.services.context import ServiceContext
from signoff.services.delivery import AttemptRecord
from signoff.store.runtime.availability import database_unavailable
from signoff.store.runtime.changes import NOTIFY_CHANNEL as NOTIFY_CHANNEL  # re-exported
from signoff.store.runtime.listen import Listener
from signoff.webhooks import signature_headers
from signoff.workers.outage import OutageLog
from signoff.workers.recorder import Recorder

if TYPE_CHECKING:
    # Imported when the first webhook goes out: a server that sends none starts without it.
    import aiohttp

log = structlog.get_logger("signoff.dispatcher")

MAX_STORED_RESPONSE = 1024
#: After a round that failed (the database went away), the next one comes this soon,
#: doubling up to ``SIGNOFF_DISPATCHER_POLL_SECONDS`` while the failures go on.
FAILED_ROUND_RETRY_SECONDS = 0.25


@dataclass(frozen=True)
class _Answer:
    """What a receiver answered: the status, its Retry-After, the body's first bytes."""

    status: int
    retry_after: str | None
    head: bytes


def _describe(exc: aiohttp.ClientError) -> str:
    """A transport failure in words an admin can act on (and that
    ``domain.webhooks.error_category`` sorts): aiohttp's own messages mention
    ``ssl:default`` even for a refused plain-HTTP connection."""
    import aiohttp

    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return f"TLS certificate rejected: {exc.certificate_error}"
    if isinstance(exc, aiohttp.ClientSSLError):
        return f"TLS handshake failed: {exc.os_error}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        code = exc.os_error.errno
        reason = os.strerror(code) if code else str(exc.os_error)
        return f"ConnectError: {reason} ({exc.host}:{exc.port})"
    return f"{type(exc).__name__}: {exc}"


class Dispatcher:
    """One dispatcher."""

    def __init__(self, context: ServiceContext) -> None:
        self.context = context
        self.settings = context.settings
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._session: aiohttp.ClientSession | None = None
        self._wake = asyncio.Event()
        self.listener = self._listener()
        self._recorder = Recorder(self._write_records)

    async def _write_records(
        self, attempts: Sequence[tuple[ClaimedDelivery, AttemptRecord]]
    ) -> list[bool]:
        return await delivery_service.record_delivery_attempts(
            self.context, owner=self.owner, attempts=attempts
        )

    def _http(self) -> aiohttp.ClientSession:
        """The dispatcher's HTTP client, made on first use (it belongs to the running event
        loop). aiohttp, not httpx: httpcore's pool walks every pooled connection for each
        request, so with a large batch most of the dispatcher's time went to choosing a
        connection. No cookies are kept (one receiver's cookies are nobody's business),
        no proxy from the environment, no redirects (see ``_post``)."""
        if self._session is None or self._session.closed:
            import aiohttp

            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=0,  # the batch size bounds the attempts in flight
                    limit_per_host=0,
                    ttl_dns_cache=None,  # hosts are already resolved and pinned (net.py)
                    use_dns_cache=False,
                    ssl=ssl.create_default_context(),
                ),
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
                auto_decompress=False,  # the stored answer is its first bytes, as sent
            )
        return self._session

    async def run_once(self) -> int:
        """Fan out new events, then send every due delivery once, and close the connections
        this opened. Returns attempts made."""
        try:
            claimed = (await self._claim_round(self.settings.dispatcher_batch_size)).deliveries
            await asyncio.gather(*(self._deliver(delivery) for delivery in claimed))
        finally:
            await self.close()
        return len(claimed)

    async def _claim_round(self, limit: int) -> delivery_service.Round:
        return await delivery_service.claim_deliveries(self.context, owner=self.owner, limit=limit)

    async def _deliver(self, delivery: ClaimedDelivery) -> None:
        attempted_at = self.context.now()
        body = dumps(delivery.payload).encode("utf-8")
        started = time.perf_counter()
        with tracing.delivery_attempt(
            delivery.url,
            str(delivery.event_id),
            str(delivery.id),
            delivery.attempt,
            delivery.traceparent,
        ) as traced:
            outcome, response_body = await self._send(delivery, body)
            traced(outcome.status_code, outcome.error)
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
            asymmetric_key=(
                await evidence.signing_key(self.context) if delivery.asymmetric else None
            ),
        )
        headers |= {
            "Content-Type": "application/json",
            "User-Agent": "Signoff-Webhooks/1",
            "Host": target.host_header,
        }
        if delivery.traceparent:  # W3C trace context of the escalation this event is about
            headers["traceparent"] = delivery.traceparent
        # The connection goes to the vetted address; TLS still names (and checks the
        # certificate against) the host the endpoint was registered with.
        tls_name = target.host if target.pinned_url.startswith("https") else None
        import aiohttp

        try:
            # One deadline for the whole attempt, the answer's body included: a receiver
            # trickling its answer must not outlive the attempt's lease.
            answer = await asyncio.wait_for(
                self._post(target.pinned_url, body, headers, tls_name),
                timeout=self.settings.webhook_timeout_seconds,
            )
        except TimeoutError:
            return AttemptOutcome(status_code=None, error="timeout"), None
        except aiohttp.ClientError as exc:
            return AttemptOutcome(status_code=None, error=_describe(exc)[:500]), None
        retry_after = parse_retry_after(answer.retry_after, self.context.now())
        text = answer.head.decode("utf-8", "replace")[:MAX_STORED_RESPONSE]
        return AttemptOutcome(status_code=answer.status, retry_after_seconds=retry_after), text

    async def _post(
        self, url: str, body: bytes, headers: dict[str, str], tls_name: str | None
    ) -> _Answer:
        async with self._http().post(
            url,
            data=body,
            headers=headers,
            allow_redirects=False,  # a redirect could lead past the address check
            server_hostname=tls_name,
        ) as response:
            head = b""
            while len(head) < MAX_STORED_RESPONSE and not response.content.at_eof():
                chunk = await response.content.read(MAX_STORED_RESPONSE - len(head))
                if not chunk:
                    break
                head += chunk  # the status is what matters; a large answer is not read on
            return _Answer(response.status, response.headers.get("retry-after"), head)

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
            held = await self._recorder.record(delivery, record)
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
        # The process's one shared listener (store/runtime/changes.py) wakes us and long-polls.
        changes = self.context.database.changes
        unsubscribe = changes.subscribe(self._wake.set)
        await changes.start()
        in_flight: set[asyncio.Task[None]] = set()
        capacity = self.settings.dispatcher_batch_size
        outage = OutageLog("dispatcher")
        loop = asyncio.get_running_loop()
        last_round = -float("inf")
        failed_retry = FAILED_ROUND_RETRY_SECONDS / 2
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
                retry_in: float | None = None
                if len(in_flight) < capacity:
                    try:
                        taken = await self._claim_round(capacity - len(in_flight))
                        claimed, backlog = taken.deliveries, taken.backlog
                    except Exception as exc:  # the loop must outlive a database hiccup
                        outage.failed(exc)
                        # The work that woke this round is still there, and its wake-up
                        # is spent: try again soon, not at the next poll.
                        retry_in = failed_retry = min(
                            failed_retry * 2, self.settings.dispatcher_poll_seconds
                        )
                    else:
                        failed_retry = FAILED_ROUND_RETRY_SECONDS / 2
                        outage.succeeded()
                        if listener is not None and not listener.listening.is_set():
                            listener.nudge()  # the database answers again: listen again now
                for delivery in claimed:
                    attempt = asyncio.create_task(self._deliver(delivery))
                    in_flight.add(attempt)
                    attempt.add_done_callback(self._finished(in_flight))
                if not claimed and not backlog:
                    await self._idle(stop, retry_in)
            if in_flight:
                await asyncio.gather(*in_flight, return_exceptions=True)
        finally:
            unsubscribe()
            await self.close()

    async def close(self) -> None:
        """Close the HTTP client's connections (``run`` does this when it returns)."""
        if self._session is not None:
            await self._session.close()
            self._session = None

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

    async def _idle(self, stop: asyncio.Event, at_most: float | None = None) -> None:
        """Wait for a wake-up, a commit, the stop, or ``at_most`` seconds (default: the poll)."""
        committed = self.context.database.outbox_committed  # cleared at each round's start
        waiters = [
            asyncio.ensure_future(self._wake.wait()),
            asyncio.ensure_future(stop.wait()),
            asyncio.ensure_future(committed.wait()),
        ]
        await asyncio.wait(
            waiters,
            timeout=self.settings.dispatcher_poll_seconds if at_most is None else at_most,
            return_when=asyncio.FIRST_COMPLETED,
        )
        for waiter in waiters:
            waiter.cancel()

    def _listener(self) -> Listener | None:
        """On PostgreSQL, the process's shared LISTEN on the outbox channel (it wakes this
        dispatcher and long-poll waiters, and is made again whenever its connection is
        lost); SQLite has none (it polls)."""
        return self.context.database.changes.listener
