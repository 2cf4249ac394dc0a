"""The "Your account" page: who is signed in, and how they hear of work waiting for them
(each event, a digest every interval, or none)."""

from __future__ import annotations

from fastapi import Request
from starlette.responses import Response

from signoff.console.auth import CsrfChecked, SignedIn
from signoff.console.auth.core import signed_in_user
from signoff.console.rendering import render
from signoff.console.shared import page_router, read_form, service_context
from signoff.domain.notify_choice import NOTIFY_CHOICES, notify_choice
from signoff.domain.tasks import Principal
from signoff.errors import NotFound, Unprocessable
from signoff.services import users as user_service

router = page_router()

SAVED = "Saved. From now on: {label}."


def _page(
    request: Request,
    principal: Principal,
    *,
    status_code: int = 200,
    notice: str | None = None,
    error: str | None = None,
) -> Response:
    user = signed_in_user(request)
    return render(
        request,
        "account.html",
        status_code=status_code,
        principal=principal,
        user=user,
        choices=NOTIFY_CHOICES,
        chosen=notify_choice(user.notify if user else None).value,
        smtp=service_context(request).settings.smtp_host is not None,
        notice=notice,
        error=error,
    )


@router.get("/account")
async def account(request: Request, principal: SignedIn) -> Response:
    """Who is signed in (role, groups) and their notification choice; the header of
    every page has the sign-out button."""
    notice = None
    if request.query_params.get("notice") == "notify_saved":
        user = signed_in_user(request)
        notice = SAVED.format(label=notify_choice(user.notify if user else None).label.lower())
    return _page(request, principal, notice=notice)


@router.post("/account/notifications")
async def choose_notifications(request: Request, principal: CsrfChecked) -> Response:
    form = await read_form(request)
    try:
        await user_service.set_own_notify_choice(
            service_context(request), principal, form.get("notify") or ""
        )
    except Unprocessable:
        allowed = ", ".join(f"“{choice.label}”" for choice in NOTIFY_CHOICES)
        return _page(
            request,
            principal,
            status_code=422,
            error=f"Nothing was changed: choose one of {allowed}.",
        )
    except NotFound:
        return _page(
            request,
            principal,
            status_code=404,
            error="Nothing was changed: only a console account has notification choices.",
        )
    return Response(status_code=303, headers={"Location": "/console/account?notice=notify_saved"})
