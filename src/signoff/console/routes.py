"""The console's router: pages under ``/console``, static assets under ``/console/static``."""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter, FastAPI
from starlette.staticfiles import StaticFiles

router = APIRouter(prefix="/console", include_in_schema=False)


def install_console(app: FastAPI) -> None:
    """Mount the console on ``app``: its pages and its vendored static assets."""
    from signoff.console import pages  # noqa: F401  (registers the pages on ``router``)

    static = resources.files("signoff.console").joinpath("static")
    app.mount("/console/static", StaticFiles(directory=str(static)), name="console-static")
    app.include_router(router)
