"""Alembic environment. Used two ways:

* from :func:`signoff.store.runtime.migrate.upgrade` (``signoff migrate``, ``signoff serve``), which
  passes an open connection in ``config.attributes["connection"]``;
* from the ``alembic`` command line in a checkout, which reads ``SIGNOFF_DATABASE_URL``.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from signoff.settings import Settings
from signoff.store.runtime.database import create_engine
from signoff.store.tables import metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_from_settings() -> None:
    engine = create_engine(Settings())
    async with engine.begin() as connection:
        await connection.run_sync(_run)
    await engine.dispose()


given = context.config.attributes.get("connection")
if given is not None:
    _run(given)
else:
    asyncio.run(_run_from_settings())
