"""Mailing a set-password link to the person it is for, when e-mail is configured
(``SIGNOFF_SMTP_HOST``). Sent at once, not through the notification outbox: the admin who
asked sees whether it went, and the link is on their screen when it did not."""

from __future__ import annotations

from dataclasses import dataclass
from email.message import EmailMessage

import structlog

from signoff.domain.users import User
from signoff.services.context import ServiceContext
from signoff.services.users import PASSWORD_LINK_HOURS

log = structlog.get_logger("signoff.users")

SEND_TIMEOUT_SECONDS = 15
SUBJECT = "Set your Signoff password"


@dataclass(frozen=True)
class MailResult:
    address: str
    sent: bool
    problem: str | None = None
    """Why it was not sent, in words."""


def link_message(user: User, link: str) -> str:
    return (
        f"Hello {user.principal_id},\n\n"
        "You can now sign in to the Signoff review console. Set your password here (the "
        f"link works once, for {PASSWORD_LINK_HOURS} hours):\n\n"
        f"{link}\n\n"
        f"Then sign in with the username {user.principal_id} or this e-mail address.\n"
    )


async def mail_password_link(ctx: ServiceContext, user: User, link: str) -> MailResult | None:
    """Send ``link`` to ``user``'s e-mail address; ``None`` when e-mail is not configured
    or the user has no address (the link is then only shown)."""
    settings = ctx.settings
    if settings.smtp_host is None or not user.email:
        return None
    message = EmailMessage()
    message["From"] = settings.smtp_from
    message["To"] = user.email
    message["Subject"] = SUBJECT
    message.set_content(link_message(user, link))
    import aiosmtplib  # imported when the first e-mail goes out

    try:
        await aiosmtplib.send(
            message,
            hostname=settings.smtp_host,
            port=settings.smtp_port,
            username=settings.smtp_username,
            password=settings.smtp_password,
            use_tls=settings.smtp_tls,
            timeout=SEND_TIMEOUT_SECONDS,
        )
    except (aiosmtplib.SMTPException, OSError, ValueError) as exc:
        log.warning(
            "user.password_link_mail_failed", principal_id=user.principal_id, error=str(exc)[:300]
        )
        return MailResult(user.email, sent=False, problem="the mail server did not accept it")
    log.info("user.password_link_mailed", principal_id=user.principal_id)
    return MailResult(user.email, sent=True)
