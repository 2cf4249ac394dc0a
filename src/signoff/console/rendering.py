"""One Jinja2 environment for every console page (autoescaped, templates in the package)."""

from __future__ import annotations

from typing import Any

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
#: everything else only from the console itself (no inline script or style), no page of
#: another origin may frame it (a click in a frame cannot claim or decide), and no
#: response is read as another type than it says. (No ``form-action``: single sign-on's
#: form is answered with a redirect to the identity provider, which it would block.)
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def render(
    request: Request, template: str, *, status_code: int = 200, **values: Any
) -> HTMLResponse:
    """A console page, with :data:`PAGE_HEADERS`. ``request`` is passed to the template
    (for ``url_for`` and the signed-in user, when there is one)."""
    html = environment.get_template(template).render(request=request, **values)
    return HTMLResponse(html, status_code=status_code, headers=PAGE_HEADERS)
