"""Running Signoff: ``serve`` (the HTTP API, with the background workers), ``migrate`` and
``worker`` (the background workers alone)."""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from signoff import tracing
from signoff.cli.common import DatabaseOption, run_with_database, settings_from

if TYPE_CHECKING:
    import uvicorn

    from signoff.settings import Settings

# The server's libraries (uvicorn, SQLAlchemy, the application) are imported by the
# commands that run it, so ``signoff --help`` and the other commands start without them.

#: How often each ``serve --workers N`` process checks that its parent still runs.
PARENT_CHECK_SECONDS = 1.0
#: prometheus_client's own variable for its multi-process directory (as in
#: :mod:`signoff.metrics`, which cannot be imported before it is set).
MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"
#: The environment variable naming the supervisor's process id to its processes (a process
#: started after the supervisor died already has another parent).
SUPERVISOR_PID = "_SIGNOFF_SUPERVISOR_PID"


def serve(
    host: Annotated[
        str | None, typer.Option(help="Interface to listen on (default 127.0.0.1).")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on (default 8000).")] = None,
    database_url: DatabaseOption = None,
    workers: Annotated[
        int | None,
        typer.Option(
            help="Server processes (default on PostgreSQL: the CPU count, half of it when "
            "the database runs on this machine; 1 on SQLite). Each also runs the background "
            "workers."
        ),
    ] = None,
    demo: Annotated[
        bool,
        typer.Option(
            "--demo", help="Add demo keys, tasks and a webhook (idempotent: safe to repeat)."
        ),
    ] = False,
) -> None:
    """Migrate the database, then serve the HTTP API."""
    # Starting makes a few hundred thousand objects that live as long as the process
    # (modules, tables, routes, schemas) and next to no garbage, yet the cyclic collector
    # would walk them all again and again while they are made: a quarter of the start's
    # CPU. It stays off until the application has started (its lifespan freezes what
    # start-up made, then turns the collector on) or the supervisor has forked, and is
    # on again however serving ends.
    gc.disable()
    with contextlib.ExitStack() as stack:
        stack.callback(gc.enable)
        # Links handed out (set-password, resume) name the port this server listens on.
        settings = settings_from(
            database_url, host=host, port=port, workers=workers
        ).with_public_url()
        if demo:
            # The demo's receiver is this server itself, on loopback.
            settings = settings.model_copy(update={"webhook_allow_private_networks": True})
        # The demo's receiver lives in this process: one process serves the demo.
        processes = 1 if demo else settings.serve_processes
        if processes > 1:
            # The server processes are forked from this one, and Prometheus' multi-process
            # mode is chosen when prometheus_client is first imported: the directory first.
            stack.enter_context(metrics_directory())
        _serve(settings, processes, demo=demo)


def _serve(settings: Settings, processes: int, *, demo: bool) -> None:
    import uvicorn
    from sqlalchemy.engine import make_url

    from signoff.bootstrap import prepare_database
    from signoff.cli.protocol import SignoffHttp
    from signoff.logs import server_log_config

    admin_key = run_with_database(settings, prepare_database(settings))
    if admin_key:
        typer.echo(f"Admin API key (shown once, store it now): {admin_key}")
    demo_lines: list[str] = []
    demo_secret = None
    if demo:
        from signoff import demo as demo_module

        tour = run_with_database(settings, demo_module.seed_demo(settings))
        typer.echo(f"Demo producer key: {tour.producer_key}")
        typer.echo(f"Demo reviewer key: {tour.reviewer_key}")
        demo_lines, demo_secret = demo_module.tour(tour, settings), tour.receiver_secret
    typer.echo(
        f"Starting Signoff on http://{settings.host}:{settings.port} "
        f"({make_url(settings.database_url).render_as_string(hide_password=True)}, "
        f"{processes} process{'es' if processes > 1 else ''})"
    )
    for note in start_up_notes(settings):
        typer.echo(note)
    for line in demo_lines:
        typer.echo(line)
    sys.stdout.flush()
    # uvloop and httptools (uvicorn[standard]): the event loop and HTTP parser in C; the
    # protocol adds the header timeout, the connection cap and the drain (cli/protocol.py).
    SignoffHttp.configure(settings)
    options: dict[str, Any] = {
        "loop": "uvloop",
        "http": SignoffHttp,
        "host": settings.host,
        "port": settings.port,
        "log_level": settings.log_level,
        "access_log": settings.access_log,
        "log_config": server_log_config(settings.log_level),
        # A request stuck on a lock must not delay exit forever.
        "timeout_graceful_shutdown": settings.shutdown_wait_seconds,
        **proxy_options(settings),
    }
    if processes > 1:
        # Each process builds its app from the environment; hand the flags down. Every
        # process also runs a dispatcher, sweeper and notifier: they are replica-safe.
        os.environ["SIGNOFF_DATABASE_URL"] = settings.database_url
        os.environ["SIGNOFF_PUBLIC_BASE_URL"] = settings.public_base_url
        if not settings.secret_key:
            # Console sessions and form tokens are signed: every process needs one key.
            import secrets

            os.environ["SIGNOFF_SECRET_KEY"] = secrets.token_urlsafe(32)
        _serve_processes(
            uvicorn.Config(
                "signoff.cli.server:server_process_app",
                factory=True,
                workers=processes,
                **options,
            )
        )
        return
    from signoff.api.app import create_app

    application = create_app(settings)
    if demo_secret is not None:
        from signoff.demo import install_receiver

        install_receiver(application, demo_secret)
    uvicorn.run(application, **options)


def proxy_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's proxy headers: believed only from ``SIGNOFF_FORWARDED_ALLOW_IPS`` (never
    from loopback by default, nor from uvicorn's own ``FORWARDED_ALLOW_IPS``). The
    request's client address and scheme, which everything else reads, come from here."""
    allowed = settings.forwarded_allow_ips.strip()
    if not allowed:
        return {"proxy_headers": False}
    return {"proxy_headers": True, "forwarded_allow_ips": allowed}


@contextlib.contextmanager
def metrics_directory() -> Iterator[None]:
    """Prometheus' multi-process mode for the processes of ``serve --workers N``: the
    directory named by ``PROMETHEUS_MULTIPROC_DIR`` (a fresh temporary one when unset),
    emptied first so counts of an earlier run are not added in; a temporary one is
    removed afterwards."""
    given = os.environ.get(MULTIPROCESS_DIR)
    folder = Path(given) if given else Path(tempfile.mkdtemp(prefix="signoff-metrics-"))
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.db"):
        stale.unlink()
    os.environ[MULTIPROCESS_DIR] = str(folder)
    try:
        yield
    finally:
        if not given:
            shutil.rmtree(folder, ignore_errors=True)


def start_up_notes(settings: Settings) -> list[str]:
    """What an operator should know about this configuration before relying on it."""
    notes = []
    levels = settings.default_policy.levels
    for index, level in enumerate(levels):
        if level.assign_group:
            hours = sum(earlier.after_seconds for earlier in levels[: index + 1]) / 3600
            notes.append(
                f"Note: the default escalation policy reassigns a task still waiting after "
                f"{hours:g} h to group '{level.assign_group}'; then only reviewers in that "
                "group, supervisors and admins see it (docs/waiting.md)."
            )
            break
    if settings.webhook_allow_private_networks:
        notes.append(
            "Note: webhooks may go to private and loopback addresses "
            "(SIGNOFF_WEBHOOK_ALLOW_PRIVATE_NETWORKS=true): for local development only."
        )
    return notes


def _serve_processes(config: uvicorn.Config) -> None:
    """Serve with ``config.workers`` processes; after SIGTERM, exit by that signal (status
    143), as a single process does.

    The processes are forked from this one once it has imported the application (uvicorn
    spawns them, and each imported everything again: a second of CPU per process at
    start-up). Each still builds its own application, connections and workers
    (:func:`server_process_app`): nothing that runs is shared."""
    import multiprocessing

    from uvicorn import _subprocess
    from uvicorn.supervisors.multiprocess import Multiprocess

    import signoff.api.app  # noqa: F401  (imported here once, for every process)

    setattr(_subprocess, "spawn", multiprocessing.get_context("fork"))  # noqa: B010

    class _Supervisor(Multiprocess):
        """uvicorn's supervisor, remembering the signal that stopped it."""

        stopped_by: signal.Signals | None = None

        def init_processes(self) -> None:
            super().init_processes()
            gc.enable()  # the processes are forked: the supervisor collects again
            # This process's metric files (its imports made them, with zeros) hold no
            # server's values: a gauge reported as the processes' minimum would read 0.
            for stale in Path(os.environ[MULTIPROCESS_DIR]).glob(f"*_{os.getpid()}.db"):
                stale.unlink()

        def handle_term(self) -> None:
            self.stopped_by = signal.SIGTERM
            super().handle_term()

    os.environ[SUPERVISOR_PID] = str(os.getpid())  # each process stops once it is gone
    supervisor = _Supervisor(config, sockets=[config.bind_socket()])
    supervisor.run()
    if supervisor.stopped_by is not None:
        signal.signal(supervisor.stopped_by, signal.SIG_DFL)
        signal.raise_signal(supervisor.stopped_by)


def server_process_app() -> Any:
    """The app factory of each ``serve --workers N`` process (settings from the environment).

    Each process stops (gracefully, as on SIGTERM) once its parent is gone: killing the
    parent alone must not leave processes serving on the port."""
    from signoff.api.app import create_app
    from signoff.cli.protocol import SignoffHttp
    from signoff.logs import configure_logging
    from signoff.settings import Settings

    settings = Settings()
    configure_logging(settings.log_level)
    SignoffHttp.configure(settings)
    for inherited in (signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU):
        signal.signal(inherited, signal.SIG_DFL)  # the supervisor's handlers, forked with it
    supervisor = int(os.environ.get(SUPERVISOR_PID) or os.getppid())
    threading.Thread(
        target=_stop_with_parent, args=(supervisor,), daemon=True, name="parent-watch"
    ).start()
    return create_app(settings)


def _stop_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_SECONDS)
    os.kill(os.getpid(), signal.SIGTERM)


def migrate(database_url: DatabaseOption = None) -> None:
    """Bring the database schema to the newest revision (Alembic)."""
    from signoff.bootstrap import prepare_database

    settings = settings_from(database_url)
    admin_key = run_with_database(settings, prepare_database(settings))
    typer.echo("Database schema is up to date.")
    if admin_key:
        typer.echo(f"Admin API key (shown once, store it now): {admin_key}")


def worker(database_url: DatabaseOption = None) -> None:
    """Run the background workers alone (no HTTP): the outbox dispatcher, the sweeper and
    the notifier. SIGTERM or Ctrl-C drains and exits."""
    import asyncio

    from signoff.bootstrap import prepare_database
    from signoff.domain.clock import SystemClock
    from signoff.services.context import ServiceContext
    from signoff.store.runtime.database import open_database
    from signoff.workers.runner import run_workers

    settings = settings_from(database_url)
    run_with_database(settings, prepare_database(settings))

    tracing.start()  # delivery attempts are traced when OTEL_TRACES_EXPORTER says so

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        database = open_database(settings)
        try:
            context = ServiceContext(database=database, settings=settings, clock=SystemClock())
            await run_workers(context, stop)
        finally:
            await database.dispose()

    typer.echo("Signoff worker started (dispatcher, sweeper, notifier).")
    sys.stdout.flush()
    try:
        import uvloop  # the event loop in C, as `signoff serve` runs under uvicorn
    except ImportError:  # not built for this platform (Windows): the standard loop
        asyncio.run(run())
    else:
        uvloop.run(run())
