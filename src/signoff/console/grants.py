"""Remembered approvals in the console (supervisors and admins): every grant, whether it
is live, how often it was used, and a button to revoke a live one. Listing and revoking go
through :mod:`signoff.services.grants`; this page only shows and asks."""

from __future__ import annotations

from fastapi import Request
from starlette.responses import Response

from signoff.console.auth import CsrfChecked, SignedIn
from signoff.console.rendering import render
from signoff.console.shared import go, page_router, read_form, service_context
from signoff.domain.tasks import Principal
from signoff.errors import SignoffError
from signoff.services import grants as grant_service

router = page_router()

GRANTS_PATH = "/console/grants"
NOTICES = {"revoked": "Revoked. Matching escalations now go to a person."}


@router.get("/grants")
async def grants_page(request: Request, principal: SignedIn) -> Response:
    notice = NOTICES.get(request.query_params.get("notice", ""))
    return await _page(request, principal, notice=notice)


@router.post("/grants/revoke")
async def revoke(request: Request, principal: CsrfChecked) -> Response:
    form = await read_form(request)
    try:
        await grant_service.revoke(service_context(request), principal, form.get("grant_id") or "")
    except SignoffError as error:
        return await _page(request, principal, error=error)
    return go(request, f"{GRANTS_PATH}?notice=revoked")


async def _page(
    request: Request,
    principal: Principal,
    *,
    notice: str | None = None,
    error: SignoffError | None = None,
) -> Response:
    context = service_context(request)
    try:
        grants = await grant_service.listed(context, principal)
    except SignoffError as refused:
        return render(
            request,
            "error.html",
            status_code=refused.error_code.status or 403,
            message=refused.message,
        )
    now = context.now()
    return render(
        request,
        "grants.html",
        status_code=(error.error_code.status or 409) if error else 200,
        principal=principal,
        grants=[g.public(now) for g in grants],
        notice=notice,
        error=error,
    )
