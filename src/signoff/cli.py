"""The ``signoff`` command: ``serve``, ``worker``, ``migrate``, ``create-key``."""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Annotated

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
        typer.Option(
            help="Server processes (default: the CPU count on PostgreSQL, 1 on SQLite). "
            "Each also runs the background workers."
        ),
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
    processes = settings.serve_processes
    typer.echo(
        f"Starting Signoff on http://{settings.host}:{settings.port} "
        f"({make_url(settings.database_url).render_as_string(hide_password=True)}, "
        f"{processes} process{'es' if processes > 1 else ''})"
    )
    # uvloop and httptools (uvicorn[standard]): the event loop and HTTP parser in C.
    fast = {"loop": "uvloop", "http": "httptools"}
    if processes > 1:
        # Each process builds its app from the environment; hand the flags down. Every
        # process also runs a dispatcher, sweeper and notifier: they are replica-safe.
        os.environ["SIGNOFF_DATABASE_URL"] = settings.database_url
        uvicorn.run(
            "signoff.api.app:create_app",
            factory=True,
            workers=processes,
            host=settings.host,
            port=settings.port,
            log_level=settings.log_level,
            access_log=settings.access_log,
            timeout_graceful_shutdown=30,
            **fast,  # type: ignore[arg-type]
        )
        return
    from signoff.api.app import create_app

    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=settings.access_log,
        timeout_graceful_shutdown=30,  # a request stuck on a lock must not delay exit forever
        **fast,  # type: ignore[arg-type]
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


def main() -> None:
    app()
