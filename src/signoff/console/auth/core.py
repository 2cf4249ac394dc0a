"""Session cookies, the signed-in dependency and CSRF (see the package docstring)."""

from __future__ import annotations

import hmac
import json
import secrets
from typing import Annotated
from urllib.parse import quote, urlsplit

from fastapi import Depends, Request
from starlette.datastructures import FormData
from starlette.responses import Response

from signoff.bodies import read_bounded_body
from signoff.crypto import form_mac
from signoff.domain.tasks import Principal
from signoff.domain.users import User
from signoff.errors import ErrorCode, PayloadTooLarge
from signoff.services import sessions
from signoff.services.context import ServiceContext

SESSION_COOKIE = "signoff_session"
ANON_CSRF_COOKIE = "signoff_csrf"
LOGIN_PATH = "/console/login"
HOME_PATH = "/console"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _context(request: Request) -> ServiceContext:
    context: ServiceContext = request.app.state.context
    return context


#: The browser's lease tokens (one signed cookie; see signoff.console.shared).
LEASE_COOKIE = "signoff_leases"


def secure_cookies(request: Request) -> bool:
    """Whether the console's cookies are marked ``Secure``: the request came over https
    (as the connection, or a listed proxy, says: ``SIGNOFF_FORWARDED_ALLOW_IPS``), or
    the public URL is https."""
    return request.url.scheme == "https" or _context(request).settings.secure_cookies


def forget_lease_tokens(request: Request, response: Response) -> None:
    """Signing out: the browser's lease tokens go with the session."""
    response.delete_cookie(
        LEASE_COOKIE,
        path="/console",
        httponly=True,
        samesite="strict",
        secure=secure_cookies(request),
    )


# The session cookie ---------------------------------------------------------------------


def set_session_cookie(request: Request, response: Response, session_id: str) -> None:
    """The session cookie (``Secure`` over https, see :func:`secure_cookies`)."""
    settings = _context(request).settings
    value = f"{session_id}.{form_mac(settings, 'session', session_id)}"
    response.set_cookie(
        SESSION_COOKIE,
        value,
        max_age=settings.session_max_seconds,
        path="/",
        httponly=True,
        samesite="lax",
        secure=secure_cookies(request),
    )


def clear_session_cookie(request: Request, response: Response) -> None:
    """Signing out: the session cookie and the lease tokens held with it go."""
    response.delete_cookie(
        SESSION_COOKIE, path="/", httponly=True, samesite="lax", secure=secure_cookies(request)
    )
    forget_lease_tokens(request, response)


def session_id_of(request: Request) -> str | None:
    """The session id in the (correctly signed) cookie, live or not."""
    raw = request.cookies.get(SESSION_COOKIE)
    if not raw or "." not in raw:
        return None
    session_id, _, mac = raw.rpartition(".")
    expected = form_mac(_context(request).settings, "session", session_id)
    return session_id if hmac.compare_digest(mac, expected) else None


async def current_user(request: Request) -> User | None:
    """The signed-in user of this request (looked up once per request), or ``None``."""
    if hasattr(request.state, "console_user"):
        user: User | None = request.state.console_user
        return user
    session_id = session_id_of(request)
    user = await sessions.resume_session(_context(request), session_id) if session_id else None
    request.state.console_user = user
    request.state.console_session_id = session_id if user is not None else None
    return user


def signed_in_user(request: Request) -> User | None:
    """For templates: the user :data:`SignedIn` found for this request, if any."""
    return getattr(request.state, "console_user", None)


# Signed in, or sent to the login page ---------------------------------------------------


class LoginRequired(Exception):
    """No live session: a page redirects to the login page, htmx/fetch gets a 401."""


def wants_fragment(request: Request) -> bool:
    """htmx, Server-Sent Events and fetch requests: they get status codes, not pages."""
    accept = request.headers.get("accept", "")
    return (
        "hx-request" in request.headers
        or "text/event-stream" in accept
        or "application/json" in accept
    )


def safe_next(target: str | None) -> str:
    """``target`` when it is a path on this site, else the inbox; always ASCII (it goes
    into headers)."""
    if not target or not target.startswith("/") or target.startswith(("//", "/\\")):
        return HOME_PATH
    parts = urlsplit(target)
    # Browsers drop tabs and newlines from URLs ("/\t/evil.example" becomes
    # "//evil.example"), so any control character, space or backslash is refused.
    if parts.scheme or parts.netloc or any(c <= " " or c in "\\\x7f" for c in target):
        return HOME_PATH
    # It becomes a Location header, which is ASCII: other characters as UTF-8 escapes.
    return "".join(c if c.isascii() else quote(c, safe="") for c in target)


def login_url(next_path: str | None) -> str:
    target = safe_next(next_path)
    return LOGIN_PATH if target == HOME_PATH else f"{LOGIN_PATH}?next={quote(target, safe='/')}"


def login_required_response(request: Request) -> Response:
    if wants_fragment(request):
        page = request.headers.get("hx-current-url")
        path = urlsplit(page).path if page else request.url.path
        query = urlsplit(page).query if page else ""
        target = login_url(path + (f"?{query}" if query else ""))
        body = {
            "type": f"urn:signoff:problem:{ErrorCode.UNAUTHENTICATED}",
            "title": "Unauthenticated",
            "status": 401,
            "error_code": ErrorCode.UNAUTHENTICATED,
            "message": "your session has ended; sign in again",
            "detail": "your session has ended; sign in again",
            "login_url": target,
        }
        return Response(
            json.dumps(body),
            status_code=401,
            media_type="application/problem+json",
            headers={"HX-Redirect": target, "Cache-Control": "no-store"},
        )
    path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return Response(
        status_code=303, headers={"Location": login_url(path), "Cache-Control": "no-store"}
    )


async def _signed_in(request: Request) -> Principal:
    user = await current_user(request)
    if user is None:
        raise LoginRequired()
    return user.principal


SignedIn = Annotated[Principal, Depends(_signed_in)]


# CSRF -------------------------------------------------------------------------------------


class FormTooLarge(PayloadTooLarge):
    """A console form larger than ``SIGNOFF_MAX_BODY_BYTES``: a page saying so (413)."""


async def read_form_data(request: Request) -> FormData:
    """The request's form, read through the one bounded body reader before it is parsed
    (every console form, sign-in included, comes through here).

    Raises:
        FormTooLarge: the body exceeds ``SIGNOFF_MAX_BODY_BYTES``.
    """
    await read_bounded_body(request, _context(request).settings.max_body_bytes, FormTooLarge)
    return await request.form()


class CsrfRejected(Exception):
    """A state-changing request without the right CSRF token."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def csrf_token(request: Request) -> str:
    """The token for forms (``<input type=hidden name=csrf>``) and for htmx/fetch (the
    ``X-CSRF-Token`` header). Bound to the session; before sign-in, to a random cookie
    the login and set-password pages set."""
    settings = _context(request).settings
    session_id = getattr(request.state, "console_session_id", None)
    if session_id:
        return form_mac(settings, "csrf-session", session_id)
    nonce = getattr(request.state, "console_csrf_nonce", None) or request.cookies.get(
        ANON_CSRF_COOKIE
    )
    if not nonce:
        nonce = secrets.token_urlsafe(24)
        request.state.console_csrf_nonce_new = True
    request.state.console_csrf_nonce = nonce
    return form_mac(settings, "csrf-anonymous", nonce)


def keep_anonymous_csrf_cookie(request: Request, response: Response) -> None:
    """Pages that call :func:`csrf_token` before sign-in must pass their response here."""
    if getattr(request.state, "console_csrf_nonce_new", False):
        response.set_cookie(
            ANON_CSRF_COOKIE,
            request.state.console_csrf_nonce,
            path="/console",
            httponly=True,
            samesite="lax",
            secure=secure_cookies(request),
        )


async def sent_csrf_token(request: Request) -> str | None:
    sent = request.headers.get("x-csrf-token")
    if sent:
        return sent
    content_type = request.headers.get("content-type", "")
    if content_type.startswith(("application/x-www-form-urlencoded", "multipart/form-data")):
        form = await read_form_data(request)
        value = form.get("csrf")
        return value if isinstance(value, str) else None
    return None


async def check_csrf(request: Request) -> None:
    """Raises :class:`CsrfRejected` unless a state-changing request carries the token
    :func:`csrf_token` gives this session (or this browser, before sign-in)."""
    if request.method in SAFE_METHODS:
        return
    sent = await sent_csrf_token(request)
    if not sent:
        raise CsrfRejected(
            "This form was sent without its security token. Reload the page and try again."
        )
    had_cookie = bool(
        getattr(request.state, "console_session_id", None) or request.cookies.get(ANON_CSRF_COOKIE)
    )
    if not had_cookie or not hmac.compare_digest(sent, csrf_token(request)):
        raise CsrfRejected(
            "This form is out of date (it was opened before you signed in or out, or in "
            "another session). Reload the page and try again."
        )


async def _csrf_checked(request: Request, principal: SignedIn) -> Principal:
    await check_csrf(request)
    return principal


CsrfChecked = Annotated[Principal, Depends(_csrf_checked)]
