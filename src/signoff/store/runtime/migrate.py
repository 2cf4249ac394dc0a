"""Schema migrations (Alembic), run programmatically so an installed package needs no
``alembic.ini``. On PostgreSQL an advisory lock serialises replicas that start together.

A database already at the newest revision (every restart) is told so from its
``alembic_version`` row and the migration files' own revision ids, without importing
Alembic (a tenth of a start's CPU); Alembic runs only when there is something to do.
"""

from __future__ import annotations

import ast
import functools
import re
from importlib import resources
from typing import TYPE_CHECKING, Any

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

if TYPE_CHECKING:
    from alembic.config import Config

#: Arbitrary constant naming Signoff's migration lock (``pg_advisory_xact_lock``).
MIGRATION_LOCK_ID = 0x5167_0FF0


#: A migration file's ``revision`` and ``down_revision`` assignments.
_REVISION_LINE = re.compile(r"^(revision|down_revision)\b[^=\n]*=\s*(.+?)\s*$", re.MULTILINE)


@functools.cache
def head_revision() -> str | None:
    """The newest revision's id, read from the migration files: the one revision no other
    revises (a test holds it to Alembic's own answer). ``None`` if there is not exactly
    one: Alembic decides then."""
    revisions: set[str] = set()
    revised: set[str] = set()
    for path in (resources.files("signoff") / "migrations" / "versions").iterdir():
        if not path.name.endswith(".py"):
            continue
        fields = dict(_REVISION_LINE.findall(path.read_text(encoding="utf-8")))
        if "revision" not in fields:
            continue
        try:
            revisions.add(ast.literal_eval(fields["revision"]))
            down = ast.literal_eval(fields.get("down_revision", "None"))
        except (ValueError, SyntaxError):
            return None  # not a plain literal: Alembic reads it
        revised.update(down if isinstance(down, tuple) else (down,) if down else ())
    heads = revisions - revised
    return heads.pop() if len(heads) == 1 else None


def at_head(connection: Connection) -> bool:
    """Whether the schema is already at the newest revision (nothing to migrate)."""
    head = head_revision()
    if head is None or not inspect(connection).has_table("alembic_version"):
        return False
    current = connection.execute(text("SELECT version_num FROM alembic_version")).scalars()
    return list(current) == [head]


def alembic_config() -> Config:
    """An Alembic config pointing at the migrations shipped inside the package."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(resources.files("signoff") / "migrations"))
    return config


def _locked(connection: Connection) -> Config:
    """The config that runs migrations on ``connection``, once no other process does."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": MIGRATION_LOCK_ID})
    config = alembic_config()
    config.attributes["connection"] = connection
    return config


def _upgrade(connection: Connection, revision: str, keyring: Any) -> None:
    if revision == "head" and at_head(connection):
        return  # a restart: the schema is current, Alembic is not even imported
    from alembic import command

    config = _locked(connection)
    # Migrations that encrypt stored secrets use it (a signoff.crypto.Keyring, or a
    # function returning one, called only when there is something to encrypt); without
    # one they load the keys from the environment.
    config.attributes["keyring"] = keyring
    command.upgrade(config, revision)


async def upgrade(engine: AsyncEngine, revision: str = "head", *, keyring: Any = None) -> None:
    """Bring the database schema to ``revision`` (default: the newest)."""
    async with engine.begin() as connection:
        await connection.run_sync(_upgrade, revision, keyring)


def _downgrade(connection: Connection, revision: str) -> None:
    from alembic import command

    command.downgrade(_locked(connection), revision)


async def downgrade(engine: AsyncEngine, revision: str) -> None:
    """Take the database schema back to ``revision``."""
    async with engine.begin() as connection:
        await connection.run_sync(_downgrade, revision)
