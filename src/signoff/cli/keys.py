"""API keys and the encryption key: ``create-key`` and ``generate-encryption-key``."""

from __future__ import annotations

from typing import Annotated

import typer

from signoff.cli.common import (
    DatabaseOption,
    UserError,
    as_cli_admin,
    describe_settings_error,
    run_with_database,
    settings_from,
)
from signoff.domain.states import Role

ASSIGNABLE_ROLES = tuple(role.value for role in Role if role is not Role.SYSTEM)


def _role(value: str) -> str:
    if value == Role.SYSTEM.value:
        raise typer.BadParameter(
            "system is Signoff's own role (its workers); no API key can hold it. "
            f"Choose {', '.join(ASSIGNABLE_ROLES)}"
        )
    if value not in ASSIGNABLE_ROLES:
        raise typer.BadParameter(f"{value!r} is not a role; choose {', '.join(ASSIGNABLE_ROLES)}")
    return value


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
    from pydantic import ValidationError

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
    settings = settings_from(database_url)

    async def run() -> str:
        async with as_cli_admin(settings) as (context, operator):
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


def generate_encryption_key() -> None:
    """Print a new key for SIGNOFF_ENCRYPTION_KEYS (which encrypts webhook secrets and
    unsent resume links at rest). To rotate: put the new key first, keep the old ones
    after it, restart every replica (each re-encrypts with the newest key on start),
    then drop the old key."""
    from signoff.crypto import generate_key

    typer.echo(generate_key())
