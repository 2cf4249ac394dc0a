"""One Jinja2 environment for every console page (autoescaped, templates in the package)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse

from signoff.console import wording
from signoff.console.views import duration_text
from signoff.domain.decisions import choices, notes_rule
from signoff.services.users import may_manage_users

environment = jinja2.Environment(
    loader=jinja2.PackageLoader("signoff.console", "templates"),
    autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
    undefined=jinja2.StrictUndefined,
)
#: The decision rules every page renders its buttons, hints and limits from.
environment.globals.update(decision_choices=choices, notes_rule=notes_rule(), words=wording)
environment.filters["duration"] = duration_text
#: Whether the header links to the people page.
environment.globals["may_manage_people"] = may_manage_users


#: What every console page (the sign-in pages too) is sent with: scripts, styles and
#: everything else only from the console itself (no inline script or style), forms sent
#: only to the console (``form-action``, completed by :func:`page_headers`), no page of
#: another origin may frame it (a click in a frame cannot claim or decide), and no
#: response is read as another type than it says.
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
        "form-action 'self'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def _origin(url: object) -> str | None:
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}"


def form_targets(request: Request) -> list[str]:
    """Where a console form may lead besides the console: with single sign-on configured,
    the identity provider (the sign-in page's SSO form is answered with a redirect to its
    authorization endpoint, and browsers apply ``form-action`` to that redirect): the
    issuer's origin, and its authorization endpoint's once its metadata is loaded."""
    context = getattr(request.app.state, "context", None)
    settings = getattr(context, "settings", None)
    if settings is None or not settings.oidc_enabled:
        return []
    client = getattr(request.app.state, "oidc_client", None)
    metadata = getattr(client, "server_metadata", None) or {}
    found = [_origin(settings.oidc_issuer), _origin(metadata.get("authorization_endpoint"))]
    return list(dict.fromkeys(origin for origin in found if origin))


def page_headers(request: Request) -> dict[str, str]:
    """:data:`PAGE_HEADERS`, ``form-action`` completed with :func:`form_targets`."""
    targets = form_targets(request)
    if not targets:
        return PAGE_HEADERS
    policy = PAGE_HEADERS["Content-Security-Policy"] + "".join(f" {t}" for t in targets)
    return PAGE_HEADERS | {"Content-Security-Policy": policy}


def render(
    request: Request, template: str, *, status_code: int = 200, **values: Any
) -> HTMLResponse:
    """A console page, with :func:`page_headers`. ``request`` is passed to the template
    (for ``url_for`` and the signed-in user, when there is one)."""
    html = environment.get_template(template).render(request=request, **values)
    return HTMLResponse(html, status_code=status_code, headers=page_headers(request))
