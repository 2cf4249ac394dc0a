"""Schema migrations (Alembic), run programmatically so an installed package needs no
``alembic.ini``. On PostgreSQL an advisory lock serialises replicas that start together.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

#: Arbitrary constant naming Signoff's migration lock (``pg_advisory_xact_lock``).
MIGRATION_LOCK_ID = 0x5167_0FF0


def alembic_config() -> Config:
    """An Alembic config pointing at the migrations shipped inside the package."""
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
    command.downgrade(_locked(connection), revision)


async def downgrade(engine: AsyncEngine, revision: str) -> None:
    """Take the database schema back to ``revision``."""
    async with engine.begin() as connection:
        await connection.run_sync(_downgrade, revision)
