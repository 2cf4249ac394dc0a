"""Where the console is mounted: each page module's router under ``/console``, static
assets under ``/console/static``, and the pages of words (``console.site``: ``/`` in a
browser, unknown console addresses)."""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles

from signoff.console.site import HttpHandler


def install_console(app: FastAPI, problems: HttpHandler) -> None:
    """Mount the console on ``app``: its pages and its vendored static assets. An unknown
    address outside the console goes to ``problems`` (the API's problem documents)."""
    from signoff.console import (
        account,
        events,
        grants,
        inbox,
        people,
        review_session,
        site,
        task_page,
    )

    static = resources.files("signoff.console").joinpath("static")
    app.mount("/console/static", StaticFiles(directory=str(static)), name="console-static")
    for page in (inbox, task_page, review_session, events, people, grants, account):
        app.include_router(page.router)
    site.install_site_pages(app, problems)
