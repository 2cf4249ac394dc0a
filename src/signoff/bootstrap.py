"""Start-up steps shared by the CLI and the tests: migrate, then make sure an admin can
get in."""

from __future__ import annotations

from signoff.domain.clock import Clock, SystemClock
from signoff.services.context import ServiceContext
from signoff.services.keys import ensure_admin_key
from signoff.settings import Settings
from signoff.store.database import Database, create_engine
from signoff.store.migrate import upgrade


async def prepare_database(settings: Settings, *, clock: Clock | None = None) -> str | None:
    """Migrate the schema to the newest revision and ensure an admin key exists.

    Returns a newly generated admin key secret to show once, or ``None``.
    """
    database = Database(create_engine(settings))
    try:
        await upgrade(database.engine)
        context = ServiceContext(database=database, settings=settings, clock=clock or SystemClock())
        return await ensure_admin_key(context)
    finally:
        await database.dispose()
