"""The notifier: sends the notification outbox over SMTP (``aiosmtplib``), at least once.

Rows are leased while sent, so several notifiers never send one twice at the same time;
a failure is retried on :data:`RETRY_SCHEDULE`, then the row is marked ``DEAD``.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from email.message import EmailMessage
from typing import Any

import structlog

from signoff.crypto import SecretUnavailable
from signoff.metrics import NOTIFICATIONS
from signoff.services import notifications, notify_digest
from signoff.services.context import ServiceContext
from signoff.workers.outage import OutageLog

log = structlog.get_logger("signoff.notifier")

#: Seconds before each attempt.
RETRY_SCHEDULE: tuple[int, ...] = (0, 60, 300, 1800, 7200)
LEASE_SECONDS = 120


class Notifier:
    def __init__(self, context: ServiceContext) -> None:
        self.context = context
        self.settings = context.settings

    async def send_once(self) -> int:
        """Gather the digests that are due, then send every due notification once;
        returns how many were attempted."""
        if self.settings.smtp_host is None:
            return 0
        await notify_digest.gather_due_digests(self.context)
        due = await notifications.claim_notifications(
            self.context, lease_seconds=LEASE_SECONDS, limit=50
        )
        for row in due:
            await self._send(row)
        return len(due)

    async def _send(self, row: dict[str, Any]) -> None:
        error, permanent, message = None, False, None
        try:
            body = notifications.notification_body(self.context, row)
        except SecretUnavailable as exc:  # retried: another replica may hold the key
            error = f"cannot build the resume link: {exc}"[:500]
            log.error("notification.secret_undecryptable", notification_id=str(row["id"]))
        else:
            try:
                message = EmailMessage()
                message["From"] = self.settings.smtp_from
                message["To"] = row["email"]
                message["Subject"] = row["subject"]
                message["Message-ID"] = f"<{row['id']}@signoff>"
                message.set_content(body)
            except (ValueError, TypeError) as exc:  # a message that can never be sent
                error, permanent = f"unsendable message: {exc}"[:500], True
        if message is not None and error is None:
            import aiosmtplib  # imported when the first e-mail goes out

            try:
                await aiosmtplib.send(
                    message,
                    hostname=self.settings.smtp_host,
                    port=self.settings.smtp_port,
                    username=self.settings.smtp_username,
                    password=self.settings.smtp_password,
                    use_tls=self.settings.smtp_tls,
                    timeout=30,
                )
            except (aiosmtplib.SMTPException, OSError, ValueError) as exc:
                error = f"{type(exc).__name__}: {exc}"[:500]
        now = self.context.now()
        attempt = int(row["attempts"])
        next_at = None
        if error is not None and not permanent and attempt < len(RETRY_SCHEDULE):
            next_at = now + timedelta(seconds=RETRY_SCHEDULE[attempt])
        await notifications.finish_notification(
            self.context, row, error=error, next_attempt_at=next_at
        )
        NOTIFICATIONS.labels("sent" if error is None else "failed").inc()
        log.info(
            "notification.attempt",
            notification_id=str(row["id"]),
            task_id=str(row["task_id"]),
            error=error,
        )

    async def run(self, stop: asyncio.Event) -> None:
        outage = OutageLog("notifier")
        while not stop.is_set():
            try:
                sent = await self.send_once()
            except Exception as exc:  # the loop must outlive a database hiccup
                outage.failed(exc)
                sent = 0
            else:
                outage.succeeded()
            if not sent:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        stop.wait(), timeout=self.settings.dispatcher_poll_seconds
                    )
