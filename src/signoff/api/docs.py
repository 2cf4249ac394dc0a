"""``/docs`` (Swagger UI) and ``/redoc`` from assets shipped with the installation (the
``fastapi-offline`` package vendors Swagger UI and Redoc): nothing is loaded from another
host, so both work without internet. Swagger UI's "Authorize" takes an API key (the
document declares HTTP bearer authentication) and keeps it across reloads."""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.staticfiles import StaticFiles
from starlette.responses import HTMLResponse, Response

from signoff.api.openapi import openapi_bytes

ASSETS_URL = "/docs-assets"


def assets_directory() -> str:
    return str(resources.files("fastapi_offline") / "static")


#: Where the OpenAPI document is served (the application is built with
#: ``openapi_url=None``: this module serves it, from bytes encoded once).
OPENAPI_URL = "/openapi.json"


def install_docs(app: FastAPI) -> None:
    app.mount(ASSETS_URL, StaticFiles(directory=assets_directory()), name="docs-assets")
    openapi_url = OPENAPI_URL

    @app.get(OPENAPI_URL, include_in_schema=False)
    async def openapi_document() -> Response:
        return Response(openapi_bytes(app), media_type="application/json")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} API",
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon.png",
            swagger_ui_parameters={"persistAuthorization": True, "tryItOutEnabled": True},
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{app.title} API",
            redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS_URL}/favicon.png",
            with_google_fonts=False,
        )
