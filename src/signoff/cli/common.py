"""What the ``signoff`` commands share: one-line user errors, settings from flags and the
environment, a database that cannot be used said in one line, and the operator a command
acts as."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

if TYPE_CHECKING:
    from pydantic import ValidationError

    from signoff.domain.tasks import Principal
    from signoff.services.context import ServiceContext
    from signoff.settings import Settings

T = TypeVar("T")


class UserError(Exception):
    """Something the user can fix; printed as one line, exit status 1."""


DatabaseOption = Annotated[
    str | None,
    typer.Option("--database-url", help="Overrides SIGNOFF_DATABASE_URL.", show_default=False),
]


def settings_from(database_url: str | None, **overrides: object) -> Settings:
    from pydantic import ValidationError

    from signoff.logs import configure_logging
    from signoff.settings import Settings

    values = {k: v for k, v in overrides.items() if v is not None}
    if database_url:
        values["database_url"] = database_url
    try:
        settings = Settings(**values)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise UserError(describe_settings_error(exc, flags=set(values))) from None
    configure_logging(settings.log_level)
    return settings


def describe_settings_error(exc: ValidationError, *, flags: set[str]) -> str:
    """One line naming the setting (as the flag or environment variable the user wrote)."""
    parts = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else "settings"
        name = "--" + field.replace("_", "-") if field in flags else "SIGNOFF_" + field.upper()
        message = str(error["msg"]).removeprefix("Value error, ")
        parts.append(f"{name}: {message}")
    return "; ".join(parts)


def describe_database_error(exc: BaseException, settings: Settings) -> str | None:
    """One line for a database that cannot be used, or ``None`` when ``exc`` is not that."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import DBAPIError

    root: BaseException = exc
    while root.__cause__ is not None or getattr(root, "orig", None) is not None:
        root = getattr(root, "orig", None) or root.__cause__  # type: ignore[assignment]
    url = make_url(settings.database_url)
    if url.drivername.startswith("sqlite"):
        where = f"the SQLite file {url.database or ':memory:'}"
        if isinstance(exc, DBAPIError):
            detail = str(root).splitlines()[0] if str(root) else type(root).__name__
            return f"cannot open {where} ({detail}); does its directory exist and is it writable?"
        return None
    server = f"{url.host or 'localhost'}:{url.port or 5432}"
    name = type(root).__name__
    if name == "InvalidCatalogNameError":
        return (
            f'database "{url.database}" does not exist on {server}; create it '
            f"(createdb -h {url.host or 'localhost'} -p {url.port or 5432} "
            f"-U {url.username or 'postgres'} {url.database}) or fix the URL"
        )
    if name in ("InvalidPasswordError", "InvalidAuthorizationSpecificationError"):
        return f"the PostgreSQL server at {server} refused the login: {root}"
    if isinstance(root, OSError):
        reason = root.strerror or str(root) or type(root).__name__
        return f"cannot reach the PostgreSQL server at {server}: {reason}"
    if isinstance(exc, DBAPIError) or type(root).__module__.startswith("asyncpg"):
        detail = str(root).splitlines()[0] if str(root) else name
        return f"the PostgreSQL server at {server} answered: {detail}"
    return None


def run_with_database(settings: Settings, coroutine: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` the coroutine; a database that cannot be used becomes a UserError."""
    import asyncio

    from sqlalchemy.engine import make_url

    from signoff.crypto import KeyringError
    from signoff.private_files import ExposedFile

    url = make_url(settings.database_url)
    if url.drivername.startswith("sqlite") and url.database and url.database != ":memory:":
        folder = os.path.dirname(os.path.abspath(url.database))
        if not os.path.isdir(folder):
            coroutine.close()
            raise UserError(
                f"cannot open the SQLite file {url.database}: the folder {folder} does not exist"
            )
    try:
        return asyncio.run(coroutine)
    except (KeyringError, ExposedFile) as exc:  # the key of stored secrets, private files
        raise UserError(str(exc)) from None
    except Exception as exc:
        message = describe_database_error(exc, settings)
        if message is None:
            raise
        raise UserError(message) from None


@asynccontextmanager
async def as_cli_admin(
    settings: Settings,
) -> AsyncIterator[tuple[ServiceContext, Principal]]:
    """The migrated database's service context and the operator a CLI command acts as
    (whoever may run the CLI may administer the database)."""
    import uuid

    from signoff.bootstrap import prepare_database
    from signoff.domain.clock import SystemClock
    from signoff.domain.states import Role
    from signoff.domain.tasks import Principal
    from signoff.services.context import ServiceContext
    from signoff.store.runtime.database import open_database

    await prepare_database(settings)
    database = open_database(settings)
    try:
        context = ServiceContext(database=database, settings=settings, clock=SystemClock())
        yield context, Principal(key_id=uuid.uuid4(), principal_id="cli", role=Role.ADMIN)
    finally:
        await database.dispose()
