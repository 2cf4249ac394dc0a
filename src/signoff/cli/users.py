"""People who sign in to the console: ``create-user``, ``link-sso``."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from signoff.cli.common import (
    DatabaseOption,
    UserError,
    as_cli_admin,
    run_with_database,
    settings_from,
)
from signoff.domain.states import Role


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
    settings = settings_from(database_url)

    async def run() -> str:
        try:
            async with as_cli_admin(settings) as (context, operator):
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


def link_sso(
    principal_id: Annotated[
        str,
        typer.Option(help="The principal to sign in as: a console user or an API key's principal."),
    ],
    subject: Annotated[
        str, typer.Option(help="The person's subject (`sub`) at the identity provider.")
    ],
    issuer: Annotated[
        str | None,
        typer.Option(
            help="The identity provider's issuer as its ID tokens name it "
            "(default: SIGNOFF_OIDC_ISSUER).",
            metavar="URL",
        ),
    ] = None,
    database_url: DatabaseOption = None,
) -> None:
    """Let one identity-provider account sign in (single sign-on) as an existing principal.

    Single sign-on never takes over a name that exists already: this is the only way."""
    from signoff.errors import SignoffError
    from signoff.services.users import link_sso as link

    settings = settings_from(database_url)
    issuer = issuer or settings.oidc_issuer
    if not issuer:
        raise UserError("--issuer is needed (SIGNOFF_OIDC_ISSUER is not set)")

    async def run() -> str:
        try:
            async with as_cli_admin(settings) as (context, operator):
                await link(context, operator, principal_id, issuer=issuer, subject=subject)
        except SignoffError as exc:
            raise UserError(exc.message) from None
        return f"{subject} at {issuer} now signs in as {principal_id}."

    typer.echo(run_with_database(settings, run()))
