"""The ``signoff`` command: ``serve``, ``worker``, ``migrate``, ``create-key``, ``create-user``."""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Annotated, NoReturn

import typer
import uvicorn
from sqlalchemy.engine import make_url

from signoff.bootstrap import prepare_database
from signoff.domain.states import Role
from signoff.domain.tasks import Principal
from signoff.logs import configure_logging
from signoff.settings import Settings

app = typer.Typer(help="Signoff: a human review queue for machines.", no_args_is_help=True)

DatabaseOption = Annotated[
    str | None,
    typer.Option("--database-url", help="Overrides SIGNOFF_DATABASE_URL.", show_default=False),
]


def _settings(database_url: str | None, **overrides: object) -> Settings:
    values = {k: v for k, v in overrides.items() if v is not None}
    if database_url:
        values["database_url"] = database_url
    return Settings(**values)  # type: ignore[arg-type]


@app.command()
def serve(
    host: Annotated[
        str | None, typer.Option(help="Interface to listen on (default 127.0.0.1).")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on (default 8000).")] = None,
    database_url: DatabaseOption = None,
    workers: Annotated[
        int | None,
        typer.Option(help="Server processes (default 1). Each also runs the background workers."),
    ] = None,
    demo: Annotated[bool, typer.Option("--demo", help="Add demo keys and tasks.")] = False,
) -> None:
    """Migrate the database, then serve the HTTP API."""
    settings = _settings(database_url, host=host, port=port, workers=workers)
    configure_logging(settings.log_level)
    admin_key = asyncio.run(prepare_database(settings))
    if admin_key:
        typer.echo(f"Admin API key (shown once, store it now): {admin_key}")
    if demo:
        from signoff.demo import seed_demo

        demo_keys = asyncio.run(seed_demo(settings))
        typer.echo(f"Demo producer key: {demo_keys['producer']}")
        typer.echo(f"Demo reviewer key: {demo_keys['reviewer']}")
    typer.echo(
        f"Starting Signoff on http://{settings.host}:{settings.port} "
        f"({make_url(settings.database_url).render_as_string(hide_password=True)}, "
        f"{settings.workers} process{'es' if settings.workers > 1 else ''})"
    )
    if settings.workers > 1:
        # Each process builds its app from the environment; hand the flags down. Every
        # process also runs a dispatcher, sweeper and notifier: they are replica-safe.
        os.environ["SIGNOFF_DATABASE_URL"] = settings.database_url
        uvicorn.run(
            "signoff.api.app:create_app",
            factory=True,
            workers=settings.workers,
            host=settings.host,
            port=settings.port,
            log_level=settings.log_level,
            timeout_graceful_shutdown=30,
        )
        return
    from signoff.api.app import create_app

    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        timeout_graceful_shutdown=30,  # a request stuck on a lock must not delay exit forever
    )


@app.command()
def migrate(database_url: DatabaseOption = None) -> None:
    """Bring the database schema to the newest revision (Alembic)."""
    settings = _settings(database_url)
    configure_logging(settings.log_level)
    admin_key = asyncio.run(prepare_database(settings))
    typer.echo("Database schema is up to date.")
    if admin_key:
        typer.echo(f"Admin API key (shown once, store it now): {admin_key}")


@app.command("create-key")
def create_key(
    role: Annotated[Role, typer.Option(help="producer, reviewer, supervisor or admin.")],
    principal_id: Annotated[str, typer.Option(help="The principal the key acts as.")],
    database_url: DatabaseOption = None,
) -> None:
    """Create an API key directly in the database and print its secret once."""
    from signoff.domain.clock import SystemClock
    from signoff.services.context import ServiceContext
    from signoff.services.keys import create_api_key
    from signoff.store.database import Database, create_engine

    settings = _settings(database_url)

    async def run() -> str:
        await prepare_database(settings)
        database = Database(create_engine(settings))
        try:
            context = ServiceContext(database=database, settings=settings, clock=SystemClock())
            operator = Principal(key_id=uuid.uuid4(), principal_id="cli", role=Role.ADMIN)
            created = await create_api_key(context, operator, role=role, principal_id=principal_id)
            return created.key
        finally:
            await database.dispose()

    typer.echo(asyncio.run(run()))


@app.command("create-user")
def create_user(
    principal_id: Annotated[
        str, typer.Option(help="The user name people sign in with (their principal id).")
    ],
    role: Annotated[str, typer.Option(help="reviewer, supervisor or admin.")],
    email: Annotated[
        str | None, typer.Option(help="E-mail address (also works to sign in).")
    ] = None,
    groups: Annotated[
        str | None, typer.Option(help="Comma-separated groups, e.g. payments,aml.")
    ] = None,
    password_stdin: Annotated[
        bool,
        typer.Option(
            "--password-stdin",
            help="Read the password from standard input instead of printing a set-password link.",
        ),
    ] = False,
    database_url: DatabaseOption = None,
) -> None:
    """Create a console user and print a one-time link (valid 24 h) to set the password."""
    import sys

    from signoff.domain.clock import SystemClock
    from signoff.errors import SignoffError
    from signoff.services.context import ServiceContext
    from signoff.services.users import create_user as create
    from signoff.store.database import Database, create_engine

    def fail(message: str) -> NoReturn:
        typer.echo(f"error: {message}", err=True)
        raise typer.Exit(code=2)

    if role not in ("reviewer", "supervisor", "admin"):
        fail(f"--role must be reviewer, supervisor or admin, not {role!r}")
    password = None
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
        if not password:
            fail("--password-stdin: no password on standard input")
    group_list = [g.strip() for g in (groups or "").split(",") if g.strip()]
    try:
        settings = _settings(database_url)
    except ValueError as exc:
        fail(f"invalid configuration: {exc}".splitlines()[0])
    configure_logging("warning")

    async def run() -> str:
        await prepare_database(settings)
        database = Database(create_engine(settings))
        try:
            context = ServiceContext(database=database, settings=settings, clock=SystemClock())
            operator = Principal(key_id=uuid.uuid4(), principal_id="cli", role=Role.ADMIN)
            created = await create(
                context,
                operator,
                principal_id=principal_id,
                role=Role(role),
                groups=group_list,
                email=email,
                password=password,
            )
        finally:
            await database.dispose()
        if created.set_password_link is None:
            return f"User {principal_id} created ({role}); the password is set."
        return (
            f"User {principal_id} created ({role}). Send them this one-time link to set "
            f"their password (valid 24 hours):\n{created.set_password_link}"
        )

    try:
        typer.echo(asyncio.run(run()))
    except SignoffError as exc:
        fail(exc.message)
    except OSError as exc:
        fail(f"cannot reach the database: {exc}")


@app.command()
def worker(database_url: DatabaseOption = None) -> None:
    """Run the background workers alone (no HTTP): the outbox dispatcher, the sweeper and
    the notifier. SIGTERM or Ctrl-C drains and exits."""
    import signal

    from signoff.domain.clock import SystemClock
    from signoff.services.context import ServiceContext
    from signoff.store.database import Database, create_engine
    from signoff.workers.runner import run_workers

    settings = _settings(database_url)
    configure_logging(settings.log_level)
    asyncio.run(prepare_database(settings))

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        database = Database(create_engine(settings))
        try:
            context = ServiceContext(database=database, settings=settings, clock=SystemClock())
            await run_workers(context, stop)
        finally:
            await database.dispose()

    typer.echo("Signoff worker started (dispatcher, sweeper, notifier).")
    asyncio.run(run())


@app.command("mcp")
def mcp_server() -> None:
    """Serve Signoff's review tools to agents over MCP on stdio (needs signoff[mcp]):
    request_human_review, get_review, wait_for_decision, against SIGNOFF_URL with the
    producer key in SIGNOFF_API_KEY."""
    try:
        from signoff.integrations.mcp import main as serve_mcp
    except ImportError as missing:
        hint = f"signoff mcp needs the mcp extra: pip install 'signoff[mcp]' ({missing})"
        raise SystemExit(hint) from missing
    serve_mcp()


def main() -> None:
    app()
