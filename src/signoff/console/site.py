"""Pages of words where a person lands outside the console's own pages: ``/`` opened in
a browser (a small page leading to the console and the API reference), and an address
under ``/console`` that does not exist (a page saying so, with the way back to the inbox).

Programs keep their JSON: ``/`` without ``text/html`` in ``Accept``, and every address
outside ``/console`` (or a console request from htmx or ``fetch``), answer the API's
problem documents as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import APIRouter, FastAPI, Request
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from signoff.console.auth.core import current_user, wants_fragment
from signoff.console.rendering import render

router = APIRouter(include_in_schema=False)


def wants_page(request: Request) -> bool:
    """A browser navigating: it names ``text/html`` in ``Accept``."""
    return "text/html" in request.headers.get("accept", "") and not wants_fragment(request)


@router.get("/")
async def landing(request: Request) -> Response:
    if not wants_page(request):
        raise StarletteHTTPException(status_code=404)  # as before: the API has no root
    return render(request, "landing.html")


def _console_page_missing(request: Request, exc: StarletteHTTPException) -> bool:
    path = request.url.path
    return (
        exc.status_code == 404
        and (path == "/console" or path.startswith("/console/"))
        and not path.startswith("/console/static/")
        and not wants_fragment(request)
    )


HttpHandler = Callable[[Request, StarletteHTTPException], Awaitable[Response]]


def install_site_pages(app: FastAPI, problems: HttpHandler) -> None:
    """Mount ``/`` and answer unknown console addresses with a page; everything else goes
    to ``problems`` (the API's problem documents)."""

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        if not _console_page_missing(request, exc):
            return await problems(request, exc)
        user = await current_user(request)
        values = {"principal": user.principal} if user is not None else {}
        return render(
            request,
            "message.html",
            status_code=404,
            title="This page does not exist",
            paragraphs=[
                "Nothing in the console is at this address. The link may be mistyped, or "
                "from an older version of the console."
            ],
            back_href="/console",
            back_label="Back to the inbox",
            **values,
        )

    app.include_router(router)
