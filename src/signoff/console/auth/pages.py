"""The sign-in pages: login, logout, set password (single sign-on lives in ``oidc``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from signoff.console.auth.core import (
    HOME_PATH,
    LOGIN_PATH,
    CsrfChecked,
    CsrfRejected,
    check_csrf,
    clear_session_cookie,
    current_user,
    keep_anonymous_csrf_cookie,
    read_form_data,
    safe_next,
    session_id_of,
    set_session_cookie,
)
from signoff.console.rendering import render
from signoff.errors import Forbidden, NotFound, TooManyRequests, Unauthenticated, Unprocessable
from signoff.services import sessions
from signoff.services import users as user_service
from signoff.services.context import ServiceContext

router = APIRouter(prefix="/console", include_in_schema=False)

NOTICES = {
    "signed_out": "You are signed out.",
    "password_set": "Your password is set. Sign in with it now.",
    "expired": "Your session ended. Sign in again to continue.",
}


def _context(request: Request) -> ServiceContext:
    context: ServiceContext = request.app.state.context
    return context


def _address(request: Request) -> str | None:
    return request.client.host if request.client else None


def _login_page(
    request: Request,
    *,
    status_code: int = 200,
    error: str | None = None,
    username: str = "",
    next_path: str = HOME_PATH,
    headers: dict[str, str] | None = None,
) -> Response:
    notice = NOTICES.get(request.query_params.get("notice", ""))
    response = render(
        request,
        "login.html",
        status_code=status_code,
        error=error,
        notice=notice,
        username=username,
        next_path=next_path,
        sso=_context(request).settings.oidc_enabled,
        sso_error=None,
    )
    keep_anonymous_csrf_cookie(request, response)
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response


@router.get("/login")
async def login_page(request: Request) -> Response:
    next_path = safe_next(request.query_params.get("next"))
    if await current_user(request) is not None:
        return Response(status_code=303, headers={"Location": next_path})
    return _login_page(request, next_path=next_path)


async def _form(request: Request) -> dict[str, str]:
    form = await read_form_data(request)
    return {k: v for k, v in form.items() if isinstance(v, str)}


@router.post("/login")
async def login(request: Request) -> Response:
    form = await _form(request)
    username = form.get("username", "").strip()
    next_path = safe_next(form.get("next"))
    try:
        await check_csrf(request)
    except CsrfRejected:
        return _login_page(
            request,
            status_code=403,
            error="This sign-in form had expired. It has been renewed: sign in again.",
            username=username,
            next_path=next_path,
        )
    if not username or not form.get("password"):
        return _login_page(
            request,
            status_code=422,
            error="Enter both your username (or e-mail address) and your password.",
            username=username,
            next_path=next_path,
        )
    try:
        session = await sessions.sign_in(
            _context(request), username, form["password"], address=_address(request)
        )
    except TooManyRequests as exc:
        return _login_page(
            request,
            status_code=429,
            error=f"Sign-in is paused: {exc.message}. Nothing you type before then is checked.",
            username=username,
            next_path=next_path,
            headers={"Retry-After": str(exc.extra["retry_after"])},
        )
    except Unauthenticated:
        settings = _context(request).settings
        minutes = settings.login_failure_window_seconds // 60
        return _login_page(
            request,
            status_code=401,
            error=(
                "The username or password is not right. Check both and try again "
                f"(after {settings.login_max_failures} failed attempts, sign-in pauses for "
                f"{minutes} minutes). Forgot your password? Ask an administrator for a "
                "new set-password link."
            ),
            username=username,
            next_path=next_path,
        )
    except Forbidden as exc:
        return _login_page(
            request,
            status_code=403,
            error=exc.message[:1].upper() + exc.message[1:] + ".",
            username=username,
            next_path=next_path,
        )
    earlier = session_id_of(request)
    if earlier:  # a new session id at every sign-in; the one this browser had ends
        await sessions.sign_out(_context(request), earlier)
    response = Response(status_code=303, headers={"Location": next_path})
    set_session_cookie(request, response, session.session_id)
    return response


@router.post("/logout")
async def logout(request: Request, _principal: CsrfChecked) -> Response:
    session_id = getattr(request.state, "console_session_id", None)
    if session_id:
        await sessions.sign_out(_context(request), session_id)
    response = Response(status_code=303, headers={"Location": f"{LOGIN_PATH}?notice=signed_out"})
    clear_session_cookie(request, response)
    return response


def _set_password_page(
    request: Request,
    token: str,
    *,
    status_code: int = 200,
    principal_id: str | None = None,
    error: str | None = None,
    invalid: str | None = None,
) -> Response:
    response = render(
        request,
        "set_password.html",
        status_code=status_code,
        token=token,
        principal_id=principal_id,
        error=error,
        invalid=invalid,
        min_length=user_service.MIN_PASSWORD_LENGTH,
    )
    keep_anonymous_csrf_cookie(request, response)
    response.headers["Referrer-Policy"] = "no-referrer"  # the link is a secret
    return response


@router.get("/set-password/{token}")
async def set_password_page(request: Request, token: str) -> Response:
    try:
        user = await user_service.check_password_token(_context(request), token)
    except NotFound as exc:
        return _set_password_page(request, token, status_code=404, invalid=_sentence(exc.message))
    return _set_password_page(request, token, principal_id=user.principal_id)


def _sentence(message: str) -> str:
    return message[:1].upper() + message[1:] + "."


@router.post("/set-password/{token}")
async def set_password(request: Request, token: str) -> Response:
    form = await _form(request)
    context = _context(request)
    try:
        user = await user_service.check_password_token(context, token)
    except NotFound as exc:
        return _set_password_page(request, token, status_code=404, invalid=_sentence(exc.message))
    page: dict[str, Any] = {"principal_id": user.principal_id}
    try:
        await check_csrf(request)
    except CsrfRejected:
        return _set_password_page(
            request,
            token,
            status_code=403,
            error="This form had expired. It has been renewed: type your new password again.",
            **page,
        )
    password = form.get("password", "")
    if password != form.get("password_again", ""):
        return _set_password_page(
            request,
            token,
            status_code=422,
            error="The two passwords differ. Type the same password in both fields.",
            **page,
        )
    try:
        await user_service.set_password_with_token(context, token, password)
    except Unprocessable as exc:
        detail = exc.errors[0].message if exc.errors else exc.message
        return _set_password_page(
            request, token, status_code=422, error=f"The password {detail}.", **page
        )
    except NotFound as exc:
        return _set_password_page(request, token, status_code=404, invalid=_sentence(exc.message))
    return Response(status_code=303, headers={"Location": f"{LOGIN_PATH}?notice=password_set"})
