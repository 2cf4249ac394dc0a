"""Single sign-on with OpenID Connect (Authlib's Starlette client).

``GET /console/login/sso`` sends the browser to the provider (authorization code flow,
with state and nonce); ``GET /console/login/sso/callback`` checks the answer (the ID
token's signature, issuer, audience and nonce, through Authlib), maps the person's groups
to a role with ``SIGNOFF_OIDC_ROLE_MAP`` and opens a console session. The account is
found by the ID token's issuer and subject (``iss``, ``sub``), never by a name; a new
account is named by the ``SIGNOFF_OIDC_USERNAME_CLAIM`` claim (``preferred_username`` by
default), else the e-mail address, else ``sub``, and refused when that name belongs to
another principal (see :func:`signoff.services.sessions.sign_in_oidc`). The e-mail
address is taken only when ``email_verified`` is true. Someone in no mapped group is
refused with a page that says which groups Signoff accepts. The state of the round trip
lives for ten minutes in its own signed cookie (``signoff_sso``), scoped to ``/console/login``.
"""

from __future__ import annotations

import json
from typing import Any

import structlog
from fastapi import APIRouter, FastAPI, Request
from starlette.responses import Response

from signoff.console.auth.core import (
    LOGIN_PATH,
    safe_next,
    session_id_of,
    set_session_cookie,
)
from signoff.console.rendering import render
from signoff.crypto import secret_key
from signoff.domain.states import Role
from signoff.errors import Forbidden, Unprocessable
from signoff.services import sessions
from signoff.services.context import ServiceContext
from signoff.settings import Settings

log = structlog.get_logger("signoff.oidc")

router = APIRouter(prefix="/console/login/sso", include_in_schema=False)

CALLBACK_PATH = "/console/login/sso/callback"
RANK = {Role.REVIEWER: 1, Role.SUPERVISOR: 2, Role.ADMIN: 3}
#: The ``error`` codes an authorization response may carry (RFC 6749 4.1.2.1, OpenID
#: Connect Core 3.1.2.6): the only provider text a page shows.
OAUTH_ERRORS = frozenset(
    {
        "invalid_request",
        "unauthorized_client",
        "access_denied",
        "unsupported_response_type",
        "invalid_scope",
        "server_error",
        "temporarily_unavailable",
        "interaction_required",
        "login_required",
        "account_selection_required",
        "consent_required",
        "invalid_request_uri",
        "invalid_request_object",
        "request_not_supported",
        "request_uri_not_supported",
        "registration_not_supported",
    }
)


def _context(request: Request) -> ServiceContext:
    context: ServiceContext = request.app.state.context
    return context


def role_for(groups: list[str], role_map: dict[str, str]) -> Role | None:
    """The highest role any of ``groups`` maps to, or ``None``."""
    roles = [Role(role_map[g]) for g in groups if g in role_map]
    return max(roles, key=RANK.__getitem__) if roles else None


def groups_of(claims: dict[str, Any], claim: str) -> list[str]:
    value = claims.get(claim)
    if isinstance(value, str):
        return [part for part in value.replace(",", " ").split() if part]
    if isinstance(value, list):
        return [str(part) for part in value if isinstance(part, str | int)]
    return []


def principal_id_of(claims: dict[str, Any], claim: str) -> str | None:
    for name in (claim, "email", "sub"):
        value = claims.get(name)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _client(app: FastAPI, settings: Settings) -> Any:
    client = getattr(app.state, "oidc_client", None)
    if client is None:
        from authlib.integrations.starlette_client import OAuth

        oauth = OAuth()
        issuer = (settings.oidc_issuer or "").rstrip("/")
        client = oauth.register(
            "signoff",
            server_metadata_url=f"{issuer}/.well-known/openid-configuration",
            client_id=settings.oidc_client_id,
            client_secret=settings.oidc_client_secret,
            client_kwargs={"scope": settings.oidc_scopes},
        )
        app.state.oidc_client = client
    return client


def _refused(request: Request, status_code: int, message: str) -> Response:
    return render(
        request,
        "auth_message.html",
        status_code=status_code,
        heading="Single sign-on did not sign you in",
        message=message,
        action_href=LOGIN_PATH,
        action_label="Back to the sign-in page",
    )


@router.get("")
async def start(request: Request) -> Response:
    settings = _context(request).settings
    if not settings.oidc_enabled:
        return _refused(request, 404, "Single sign-on is not configured on this Signoff.")
    request.session.clear()
    request.session["next"] = safe_next(request.query_params.get("next"))
    redirect_uri = settings.public_base_url.rstrip("/") + CALLBACK_PATH
    try:
        response: Response = await _client(request.app, settings).authorize_redirect(
            request, redirect_uri
        )
    except Exception as exc:  # the provider is down, or its metadata is unusable
        log.warning("oidc.provider_unavailable", error=str(exc)[:300])
        return _refused(
            request,
            503,
            f"The identity provider ({settings.oidc_issuer}) does not answer. Try again in a "
            "few minutes, or sign in with a password if you have one.",
        )
    return response


@router.get("/callback")
async def callback(request: Request) -> Response:
    from authlib.integrations.base_client import OAuthError

    context = _context(request)
    settings = context.settings
    if not settings.oidc_enabled:
        return _refused(request, 404, "Single sign-on is not configured on this Signoff.")
    if "error" in request.query_params:
        # Only a code the standard defines is shown; the provider's description (and any
        # other text in the address, which anyone can write) never reaches the page.
        code = request.query_params["error"]
        log.info("oidc.provider_error", error=code[:100])
        shown = f" (error code {code})" if code in OAUTH_ERRORS else ""
        return _refused(
            request,
            403,
            f"The identity provider did not sign you in{shown}. Start again from the sign-in page.",
        )
    next_path = safe_next(request.session.get("next"))
    try:
        token = await _client(request.app, settings).authorize_access_token(request)
    except OAuthError as exc:
        log.info("oidc.refused", error=exc.error, description=exc.description)
        return _refused(
            request,
            400,
            "This sign-in could not be completed (it took too long, or was started in "
            "another tab or browser). Start again from the sign-in page.",
        )
    except Exception as exc:
        log.warning("oidc.provider_unavailable", error=str(exc)[:300])
        return _refused(
            request,
            503,
            "The identity provider did not answer while signing you in. Try again in a few "
            "minutes.",
        )
    finally:
        request.session.clear()
    claims: dict[str, Any] = dict(token.get("userinfo") or {})
    issuer, subject = claims.get("iss"), claims.get("sub")
    principal_id = principal_id_of(claims, settings.oidc_username_claim)
    groups = groups_of(claims, settings.oidc_groups_claim)
    role_map: dict[str, str] = json.loads(settings.oidc_role_map)
    role = role_for(groups, role_map)
    if principal_id is None or not isinstance(issuer, str) or not isinstance(subject, str):
        return _refused(request, 403, "The identity provider did not say who you are.")
    if role is None:
        accepted = ", ".join(sorted(role_map)) or "(none are configured)"
        log.info("oidc.no_role", principal_id=principal_id, groups=groups)
        return _refused(
            request,
            403,
            f"You ({principal_id}) are signed in at the identity provider, but in none of "
            f"the groups that may use Signoff. Ask an administrator to add you to one of: "
            f"{accepted}.",
        )
    try:
        email = claims.get("email")
        session = await sessions.sign_in_oidc(
            context,
            sessions.Identity(
                issuer=issuer,
                subject=subject,
                principal_id=principal_id,
                email=email if isinstance(email, str) else None,
                email_verified=claims.get("email_verified") in (True, "true"),
                groups=groups,
                role=role,
            ),
        )
    except (Forbidden, Unprocessable) as exc:
        return _refused(request, 403, exc.message[:1].upper() + exc.message[1:] + ".")
    earlier = session_id_of(request)
    if earlier:
        await sessions.sign_out(context, earlier)
    response = Response(status_code=303, headers={"Location": next_path})
    set_session_cookie(request, response, session.session_id)
    return response


def install(app: FastAPI, settings: Settings) -> None:
    """Add the single sign-on routes, and the short-lived cookie of the round trip."""
    from starlette.middleware.sessions import SessionMiddleware

    if settings.oidc_enabled:
        app.add_middleware(
            SessionMiddleware,
            secret_key=secret_key(settings).hex(),
            session_cookie="signoff_sso",
            max_age=600,
            path=LOGIN_PATH,
            same_site="lax",
            https_only=settings.secure_cookies,
        )
    app.include_router(router)
