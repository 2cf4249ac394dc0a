"""Where the console is mounted: each page module's router under ``/console``, static
assets under ``/console/static``."""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles


def install_console(app: FastAPI) -> None:
    """Mount the console on ``app``: its pages and its vendored static assets."""
    from signoff.console import events, inbox, review_session, task_page

    static = resources.files("signoff.console").joinpath("static")
    app.mount("/console/static", StaticFiles(directory=str(static)), name="console-static")
    for page in (inbox, task_page, review_session, events):
        app.include_router(page.router)
