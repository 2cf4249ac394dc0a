"""What every console page module shares: its router, the form reader, the lease-token
cookie, navigation and the notices a page shows.

Lease tokens stay on the server side of the browser: an HttpOnly cookie scoped to the
console keeps the reviewer's tokens, so a reload or a second tab keeps the lease.
"""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass

from fastapi import APIRouter, Request
from starlette.responses import RedirectResponse, Response

from signoff.console.auth.core import LEASE_COOKIE, read_form_data, secure_cookies
from signoff.domain.params import decode_token
from signoff.errors import SignoffError
from signoff.services.context import ServiceContext

MAX_HELD_TOKENS = 40
#: The lease countdown warns this many seconds before the lease lapses.
WARN_SECONDS = 120


def page_router() -> APIRouter:
    """A page module's router: its paths live under ``/console``, outside the OpenAPI
    document."""
    return APIRouter(prefix="/console", include_in_schema=False)


class Form:
    """A URL-encoded form body (the console's forms send nothing else)."""

    def __init__(self, fields: dict[str, list[str]]) -> None:
        self.fields = fields

    def get(self, name: str) -> str | None:
        values = self.fields.get(name)
        return values[0] if values else None

    def getlist(self, name: str) -> list[str]:
        return self.fields.get(name, [])


async def read_form(request: Request) -> Form:
    data = await read_form_data(request)  # parsed once per request (the CSRF check read it first)
    fields: dict[str, list[str]] = {}
    for name, value in data.multi_items():
        if isinstance(value, str):
            fields.setdefault(name, []).append(value)
    return Form(fields)


def service_context(request: Request) -> ServiceContext:
    context: ServiceContext = request.app.state.context
    return context


def is_htmx(request: Request) -> bool:
    return bool(request.headers.get("hx-request"))


# Lease tokens ---------------------------------------------------------------------------


def _held_tokens(request: Request) -> dict[str, str]:
    raw = request.cookies.get(LEASE_COOKIE)
    if not raw:
        return {}
    try:
        data = decode_token(raw)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): str(v) for k, v in data.items() if isinstance(v, str)}


def _store_tokens(response: Response, tokens: dict[str, str], *, secure: bool) -> None:
    kept = dict(list(tokens.items())[-MAX_HELD_TOKENS:])
    value = base64.urlsafe_b64encode(json.dumps(kept).encode()).decode().rstrip("=")
    response.set_cookie(
        LEASE_COOKIE,
        value,
        path="/console",
        httponly=True,
        samesite="strict",
        max_age=86400,
        secure=secure,
    )


@dataclass
class TokenChanges:
    """Lease tokens gained and given up during one request, written to the cookie."""

    tokens: dict[str, str]
    changed: bool = False
    secure: bool = False

    @classmethod
    def of(cls, request: Request) -> TokenChanges:
        """The tokens the request's cookie holds."""
        return cls(_held_tokens(request), secure=secure_cookies(request))

    def keep(self, task_id: uuid.UUID | str, token: str) -> None:
        self.tokens.pop(str(task_id), None)
        self.tokens[str(task_id)] = token
        self.changed = True

    def drop(self, task_id: uuid.UUID | str) -> None:
        if self.tokens.pop(str(task_id), None) is not None:
            self.changed = True

    def apply(self, response: Response) -> Response:
        if self.changed:
            _store_tokens(response, self.tokens, secure=self.secure)
        return response


def go(request: Request, url: str, tokens: TokenChanges | None = None) -> Response:
    """Navigate: htmx follows ``HX-Redirect``; a plain form follows the 303."""
    response: Response
    if is_htmx(request):
        response = Response(status_code=204, headers={"HX-Redirect": url})
    else:
        response = RedirectResponse(url, status_code=303)
    return tokens.apply(response) if tokens else response


@dataclass(frozen=True)
class Notice:
    """Something that happened since the page was shown: who, when, what."""

    text: str
    tone: str  # ok, warn or error: the notice's colour
    refusal: SignoffError | None = None
    """The service's refusal this notice explains: the page is answered with its HTTP
    status and carries its ``error_code`` for programs (never in the visible text)."""

    @property
    def code(self) -> str | None:
        return self.refusal.error_code.value if self.refusal else None

    @property
    def status(self) -> int | None:
        return self.refusal.error_code.status if self.refusal else None
