"""The ``signoff`` command: ``serve``, ``worker``, ``migrate``, ``create-key``,
``create-user``, ``listen``.

A user's mistake (a bad flag, a database URL Signoff cannot use, a database that does not
exist, a role no key can hold) prints one line, ``signoff: error: …``, on stderr and exits
non-zero (2 for a bad command line, 1 otherwise); never a traceback. Logs go to stderr;
stdout carries only what a command is asked for (an API key, the start-up lines).
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import httpx
import typer
import uvicorn
from pydantic import ValidationError
from sqlalchemy.engine import make_url

from signoff import __version__
from signoff.bootstrap import prepare_database
from signoff.crypto import KeyringError
from signoff.domain.states import Role
from signoff.domain.tasks import Principal
from signoff.logs import configure_logging, server_log_config
from signoff.settings import Settings

if TYPE_CHECKING:
    from signoff.services.context import ServiceContext

try:  # typer >= 0.22 ships its own copy of click
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - older typer on click
    from click import exceptions as click_exceptions  # type: ignore[no-redef]

T = TypeVar("T")

app = typer.Typer(
    help="Signoff: a human review queue for machines.",
    no_args_is_help=True,
    rich_markup_mode=None,  # plain help: flags show as flags, values as <type>
    pretty_exceptions_enable=False,
)


class UserError(Exception):
    """Something the user can fix; printed as one line, exit status 1."""


def fail(message: str, status: int = 1) -> NoReturn:
    typer.echo(f"signoff: error: {message}", err=True)
    raise SystemExit(status)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"signoff {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version and exit.", is_eager=True, callback=_version
        ),
    ] = False,
) -> None:
    """Signoff: a human review queue for machines."""


DatabaseOption = Annotated[
    str | None,
    typer.Option("--database-url", help="Overrides SIGNOFF_DATABASE_URL.", show_default=False),
]


def _settings(database_url: str | None, **overrides: object) -> Settings:
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
    except KeyringError as exc:  # the encryption key of stored secrets (signoff.crypto)
        raise UserError(str(exc)) from None
    except Exception as exc:
        message = describe_database_error(exc, settings)
        if message is None:
            raise
        raise UserError(message) from None


ASSIGNABLE_ROLES = tuple(role.value for role in Role if role is not Role.SYSTEM)


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
    settings = _settings(database_url, host=host, port=port, workers=workers)
    if demo:
        # The demo's receiver is this server itself, on loopback.
        settings = settings.model_copy(update={"webhook_allow_private_networks": True})
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
    # The demo's receiver lives in this process: one process serves the demo.
    processes = 1 if demo else settings.serve_processes
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
    # uvloop and httptools (uvicorn[standard]): the event loop and HTTP parser in C.
    fast = {"loop": "uvloop", "http": "httptools"}
    if processes > 1:
        # Each process builds its app from the environment; hand the flags down. Every
        # process also runs a dispatcher, sweeper and notifier: they are replica-safe.
        os.environ["SIGNOFF_DATABASE_URL"] = settings.database_url
        if not settings.secret_key:
            # Console sessions and form tokens are signed: every process needs one key.
            import secrets

            os.environ["SIGNOFF_SECRET_KEY"] = secrets.token_urlsafe(32)
        uvicorn.run(
            "signoff.cli:server_process_app",
            factory=True,
            workers=processes,
            host=settings.host,
            port=settings.port,
            log_level=settings.log_level,
            access_log=settings.access_log,
            log_config=server_log_config(settings.log_level),
            timeout_graceful_shutdown=30,
            **fast,  # type: ignore[arg-type]
        )
        return
    from signoff.api.app import create_app

    application = create_app(settings)
    if demo_secret is not None:
        from signoff.demo import install_receiver

        install_receiver(application, demo_secret)
    uvicorn.run(
        application,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=settings.access_log,
        log_config=server_log_config(settings.log_level),
        timeout_graceful_shutdown=30,  # a request stuck on a lock must not delay exit forever
        **fast,  # type: ignore[arg-type]
    )


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


def server_process_app() -> Any:
    """The app factory of each ``serve --workers N`` process (settings from the environment)."""
    from signoff.api.app import create_app

    settings = Settings()
    configure_logging(settings.log_level)
    return create_app(settings)


@app.command()
def migrate(database_url: DatabaseOption = None) -> None:
    """Bring the database schema to the newest revision (Alembic)."""
    settings = _settings(database_url)
    admin_key = run_with_database(settings, prepare_database(settings))
    typer.echo("Database schema is up to date.")
    if admin_key:
        typer.echo(f"Admin API key (shown once, store it now): {admin_key}")


def _role(value: str) -> str:
    if value == Role.SYSTEM.value:
        raise typer.BadParameter(
            "system is Signoff's own role (its workers); no API key can hold it. "
            f"Choose {', '.join(ASSIGNABLE_ROLES)}"
        )
    if value not in ASSIGNABLE_ROLES:
        raise typer.BadParameter(f"{value!r} is not a role; choose {', '.join(ASSIGNABLE_ROLES)}")
    return value


@app.command("create-key")
def create_key(
    role: Annotated[
        str,
        typer.Option(
            help="What the key may do.", metavar="|".join(ASSIGNABLE_ROLES), callback=_role
        ),
    ],
    principal_id: Annotated[str, typer.Option(help="The principal the key acts as.")],
    groups: Annotated[
        list[str] | None,
        typer.Option(
            "--groups",
            help="Reviewer groups, comma-separated (repeatable), e.g. reviewers,supervisors.",
            metavar="GROUP[,GROUP]",
        ),
    ] = None,
    email: Annotated[
        str | None,
        typer.Option(help="Where notifications for this principal go.", metavar="ADDRESS"),
    ] = None,
    database_url: DatabaseOption = None,
) -> None:
    """Create an API key directly in the database and print only its secret (once), so
    KEY=$(signoff create-key ...) captures it."""
    from signoff.api.schemas import CreateApiKeyRequest
    from signoff.services.keys import create_api_key

    names = [name.strip() for value in groups or [] for name in value.split(",") if name.strip()]
    try:
        request = CreateApiKeyRequest.model_validate(
            {"role": role, "principal_id": principal_id, "groups": names, "email": email}
        )
    except ValidationError as exc:
        raise UserError(
            describe_settings_error(exc, flags={"role", "principal_id", "groups", "email"})
        ) from None
    settings = _settings(database_url)

    async def run() -> str:
        async with _as_cli_admin(settings) as (context, operator):
            created = await create_api_key(
                context,
                operator,
                role=Role(request.role),
                principal_id=request.principal_id,
                groups=request.groups,
                email=request.email,
            )
            return created.key

    typer.echo(run_with_database(settings, run()))


@asynccontextmanager
async def _as_cli_admin(
    settings: Settings,
) -> AsyncIterator[tuple[ServiceContext, Principal]]:
    """The migrated database's service context and the operator a CLI command acts as
    (whoever may run the CLI may administer the database)."""
    from signoff.domain.clock import SystemClock
    from signoff.services.context import ServiceContext
    from signoff.store.database import Database, create_engine

    await prepare_database(settings)
    database = Database(create_engine(settings))
    try:
        context = ServiceContext(database=database, settings=settings, clock=SystemClock())
        yield context, Principal(key_id=uuid.uuid4(), principal_id="cli", role=Role.ADMIN)
    finally:
        await database.dispose()


@app.command("create-user")
def create_user(
    principal_id: Annotated[
        str, typer.Option(help="The user name people sign in with (their principal id).")
    ],
    role: Annotated[
        str, typer.Option(help="What the user may do.", metavar="reviewer|supervisor|admin")
    ],
    email: Annotated[
        str | None, typer.Option(help="E-mail address (also works to sign in).", metavar="ADDRESS")
    ] = None,
    groups: Annotated[
        list[str] | None,
        typer.Option(
            "--groups",
            help="Reviewer groups, comma-separated (repeatable), e.g. payments,aml.",
            metavar="GROUP[,GROUP]",
        ),
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
    from signoff.errors import SignoffError
    from signoff.services.users import create_user as create

    if role not in ("reviewer", "supervisor", "admin"):
        raise UserError(f"--role must be reviewer, supervisor or admin, not {role!r}")
    password = None
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
        if not password:
            raise UserError("--password-stdin: no password on standard input")
    names = [name.strip() for value in groups or [] for name in value.split(",") if name.strip()]
    settings = _settings(database_url)

    async def run() -> str:
        try:
            async with _as_cli_admin(settings) as (context, operator):
                created = await create(
                    context,
                    operator,
                    principal_id=principal_id,
                    role=Role(role),
                    groups=names,
                    email=email,
                    password=password,
                )
        except SignoffError as exc:
            raise UserError(exc.message) from None
        if created.set_password_link is None:
            return f"User {principal_id} created ({role}); the password is set."
        return (
            f"User {principal_id} created ({role}). Send them this one-time link to set "
            f"their password (valid 24 hours):\n{created.set_password_link}"
        )

    typer.echo(run_with_database(settings, run()))


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
    run_with_database(settings, prepare_database(settings))

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
    sys.stdout.flush()
    try:
        import uvloop  # the event loop in C, as `signoff serve` runs under uvicorn
    except ImportError:  # not built for this platform (Windows): the standard loop
        asyncio.run(run())
    else:
        uvloop.run(run())


@app.command()
def listen(
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 9000,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    secret: Annotated[
        str | None,
        typer.Option(
            envvar="SIGNOFF_LISTEN_SECRET",
            help="The webhook endpoint's secret (whsec_...), to verify signatures.",
            show_default=False,
        ),
    ] = None,
    register: Annotated[
        str | None,
        typer.Option(
            "--register",
            metavar="SIGNOFF_URL",
            help="Create (or re-key) the webhook endpoint for this receiver on that Signoff "
            "and use its secret; needs --admin-key.",
            show_default=False,
        ),
    ] = None,
    admin_key: Annotated[
        str | None,
        typer.Option(envvar="SIGNOFF_ADMIN_KEY", help="For --register.", show_default=False),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print each event's whole envelope as JSON.")
    ] = False,
    exit_after: Annotated[
        int | None,
        typer.Option(metavar="N", help="Exit after N distinct events (of --event's type).", min=1),
    ] = None,
    event: Annotated[
        str | None,
        typer.Option(metavar="TYPE", help="With --exit-after: count only this event type."),
    ] = None,
) -> None:
    """A webhook receiver for trying Signoff out: verifies each delivery's signature and
    prints one line per event."""
    from signoff import listen as receiver_module

    configure_logging("warning")
    receiver_url = f"http://{host}:{port}/"
    if register:
        if not admin_key:
            raise UserError("--register needs --admin-key (or SIGNOFF_ADMIN_KEY)")
        if secret:
            raise UserError("give either --secret or --register, not both")
        try:
            endpoint_id, secret = receiver_module.register(register, admin_key, receiver_url)
        except receiver_module.RegistrationError as exc:
            raise UserError(str(exc)) from None
        except httpx.HTTPError as exc:
            raise UserError(f"cannot reach Signoff at {register}: {exc}") from None
        typer.echo(f"Webhook endpoint {endpoint_id} delivers to {receiver_url}", err=True)
    if not secret:
        raise UserError(
            "a secret is needed to verify signatures: --secret whsec_... (or "
            "SIGNOFF_LISTEN_SECRET), or --register http://127.0.0.1:8000 --admin-key KEY"
        )
    receiver = receiver_module.Receiver(
        secret, as_json=as_json, stop_after=exit_after, stop_on=event
    )
    try:
        server = receiver_module.serve(receiver, host, port)
    except OSError as exc:
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    typer.echo(
        f"Listening on {receiver_url} for signed Signoff webhooks (Ctrl-C to stop)", err=True
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


@app.command("generate-encryption-key")
def generate_encryption_key() -> None:
    """Print a new key for SIGNOFF_ENCRYPTION_KEYS (which encrypts webhook secrets and
    unsent resume links at rest). To rotate: put the new key first, keep the old ones
    after it, restart every replica (each re-encrypts with the newest key on start),
    then drop the old key."""
    from signoff.crypto import generate_key

    typer.echo(generate_key())


@app.command("mcp")
def mcp_server() -> None:
    """Serve Signoff's review tools to agents over MCP on stdio (needs signoff[mcp]):
    request_human_review, get_review, wait_for_decision, against SIGNOFF_URL with the
    producer key in SIGNOFF_API_KEY."""
    try:
        from signoff.integrations.mcp import main as serve_mcp
    except ImportError as missing:
        hint = f"signoff mcp needs the mcp extra: pip install 'signoff[mcp]' ({missing})"
        raise UserError(hint) from missing
    serve_mcp()


def main(argv: list[str] | None = None) -> None:
    """Run the command line; user errors become one line on stderr and a non-zero exit."""
    command = typer.main.get_command(app)
    try:
        status = command.main(args=argv, prog_name="signoff", standalone_mode=False)
    except click_exceptions.NoArgsIsHelpError as exc:
        typer.echo(exc.format_message(), err=True)
        raise SystemExit(2) from None
    except click_exceptions.UsageError as exc:
        where = f" (see: {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
        fail(exc.format_message().replace("\n", " ") + where, 2)
    except click_exceptions.ClickException as exc:
        fail(exc.format_message().replace("\n", " "), exc.exit_code)
    except typer.Abort:
        fail("interrupted", 130)
    except UserError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    raise SystemExit(status if isinstance(status, int) else 0)
