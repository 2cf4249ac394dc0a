"""The ``signoff`` command: ``serve``, ``migrate``, ``worker``, ``create-key``,
``create-user``, ``listen``, ``generate-encryption-key``, ``mcp``, ``slack-card``,
``export``, ``verify``, ``rotate-signing-key``.

A user's mistake (a bad flag, a database URL Signoff cannot use, a database that does not
exist, a role no key can hold) prints one line, ``signoff: error: …``, on stderr and exits
non-zero (2 for a bad command line, 1 otherwise); never a traceback. Logs go to stderr;
stdout carries only what a command is asked for (an API key, the start-up lines).

Modules: ``server`` (serve, migrate, worker), ``keys`` (create-key,
generate-encryption-key), ``users`` (create-user, link-sso), ``integrations`` (listen,
mcp, slack-card), ``evidence`` (export, verify, rotate-signing-key) and ``common`` (user
errors, settings, a database that cannot be used, the CLI's operator).
"""

from __future__ import annotations

from typing import Annotated, NoReturn

import typer

from signoff import __version__
from signoff.cli import evidence, integrations, keys, server, users
from signoff.cli.common import UserError

try:  # typer >= 0.22 ships its own copy of click
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - older typer on click
    from click import exceptions as click_exceptions  # type: ignore[no-redef]

app = typer.Typer(
    help="Signoff: a human review queue for machines.",
    no_args_is_help=True,
    rich_markup_mode=None,  # plain help: flags show as flags, values as <type>
    pretty_exceptions_enable=False,
)


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


# The commands, in the order ``signoff --help`` lists them.
app.command()(server.serve)
app.command()(server.migrate)
app.command("create-key")(keys.create_key)
app.command("create-user")(users.create_user)
app.command("link-sso")(users.link_sso)
app.command()(server.worker)
app.command()(integrations.listen)
app.command("generate-encryption-key")(keys.generate_encryption_key)
app.command("mcp")(integrations.mcp_server)
app.command("slack-card")(integrations.slack_card)
app.command()(evidence.export)
app.command()(evidence.verify)
app.command("rotate-signing-key")(evidence.rotate_signing_key)


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
