"""Who is using the console: users signing in, their sessions, and CSRF.

The contract the console pages code against::

    from signoff.console.auth import CsrfChecked, SignedIn, csrf_token, install_auth

- ``SignedIn`` — ``Annotated[Principal, Depends(...)]``: the signed-in user as the same
  :class:`signoff.domain.tasks.Principal` an API key produces (``key_id`` is the user's
  id), so every rule in the services holds unchanged: roles, groups, no self-approval,
  operator identity. Without a live session a page request is redirected (303) to
  ``/console/login?next=<path>``; an htmx/fetch/SSE request (``HX-Request`` header, or
  ``Accept`` naming ``text/event-stream`` or ``application/json``) gets 401 with an
  ``HX-Redirect`` header to the login page instead. The session is checked against the
  database on every request: signing out, disabling the user, the idle lifetime
  (``SIGNOFF_SESSION_IDLE_SECONDS``) and the absolute lifetime
  (``SIGNOFF_SESSION_MAX_SECONDS``) all take effect on the next request.
- ``csrf_token(request) -> str`` — put it in every form as
  ``<input type="hidden" name="csrf" value="{{ csrf_token(request) }}">`` (it is a Jinja
  global of the console environment) and send it as the ``X-CSRF-Token`` header from
  htmx/fetch (e.g. ``<body hx-headers='{"X-CSRF-Token": "..."}'>``).
- ``CsrfChecked`` — ``Annotated[Principal, Depends(...)]``: ``SignedIn`` plus the CSRF
  check; use it (instead of ``SignedIn``) on every state-changing route. A missing or
  wrong token is answered 403: a page saying to reload and try again, or for
  htmx/fetch a problem document ``ERR_CSRF``.
- ``signed_in_user(request)`` — the :class:`signoff.domain.users.User` (e-mail, role,
  groups) behind ``SignedIn`` for templates, or ``None``.
- ``install_auth(app)`` — mounts ``/console/login``, ``/console/logout`` (POST, with the
  CSRF token), ``/console/set-password/{token}`` and single sign-on, and the handlers
  above. :func:`signoff.api.app.create_app` calls it.

Sessions are server-side rows; the cookie (``signoff_session``: HttpOnly, SameSite=Lax,
Secure when the request came over https, as the connection or a proxy listed in
``SIGNOFF_FORWARDED_ALLOW_IPS`` says, or ``SIGNOFF_PUBLIC_BASE_URL`` is https) carries a
random id signed with ``SIGNOFF_SECRET_KEY``. Replicas must share that key. Signing out
clears it and the lease-token cookie (``console/shared.py``).
"""

from __future__ import annotations

import json

from fastapi import FastAPI, Request
from starlette.responses import Response

from signoff.console.auth.core import (
    CsrfChecked,
    CsrfRejected,
    FormTooLarge,
    LoginRequired,
    SignedIn,
    csrf_token,
    current_user,
    login_required_response,
    signed_in_user,
    wants_fragment,
)
from signoff.console.rendering import environment, render
from signoff.errors import ErrorCode
from signoff.settings import Settings

__all__ = [
    "CsrfChecked",
    "SignedIn",
    "csrf_token",
    "current_user",
    "install_auth",
    "signed_in_user",
]


def _problem(code: ErrorCode, title: str, status: int, message: str) -> Response:
    """A problem document for htmx/fetch requests (they get status codes, not pages)."""
    body = {
        "type": f"urn:signoff:problem:{code}",
        "title": title,
        "status": status,
        "error_code": code,
        "message": message,
        "detail": message,
    }
    return Response(json.dumps(body), status_code=status, media_type="application/problem+json")


def _limit(request: Request) -> int:
    limit: int = request.app.state.context.settings.max_body_bytes
    return limit


def install_auth(app: FastAPI, settings: Settings | None = None) -> None:
    """Add the sign-in pages and the handlers behind ``SignedIn`` and ``CsrfChecked``
    (once per app; :func:`signoff.api.app.create_app` calls it)."""
    from signoff.console.auth import oidc, pages

    if getattr(app.state, "console_auth_installed", False):
        return
    app.state.console_auth_installed = True

    environment.globals["csrf_token"] = csrf_token
    environment.globals["signed_in_user"] = signed_in_user

    @app.exception_handler(LoginRequired)
    async def _login_required(request: Request, _exc: LoginRequired) -> Response:
        return login_required_response(request)

    @app.exception_handler(CsrfRejected)
    async def _csrf_rejected(request: Request, exc: CsrfRejected) -> Response:
        if wants_fragment(request):
            return _problem(ErrorCode.CSRF, "Forbidden", 403, exc.message)
        referer = request.headers.get("referer") or ""
        back = request.url.path if request.method == "GET" else "/console"
        if referer.startswith(str(request.base_url)):
            back = "/" + referer[len(str(request.base_url)) :]
        return render(
            request,
            "auth_message.html",
            status_code=403,
            heading="This form could not be sent",
            message=exc.message,
            action_href=back,
            action_label="Reload the page",
        )

    @app.exception_handler(FormTooLarge)
    async def _form_too_large(request: Request, exc: FormTooLarge) -> Response:
        if wants_fragment(request):
            return _problem(ErrorCode.PAYLOAD_TOO_LARGE, exc.title, 413, exc.message)
        return render(
            request,
            "auth_message.html",
            status_code=413,
            heading="This form is too large to send",
            message=(
                f"The server accepts forms of up to {_limit(request)} bytes; nothing was "
                "saved. Shorten what you typed and send it again."
            ),
            action_href=request.url.path if request.method == "GET" else "/console",
            action_label="Back",
        )

    oidc.install(app, settings or Settings())
    app.include_router(pages.router)
