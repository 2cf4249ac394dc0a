"""The migrated schema is exactly the declared one, on both engines."""

from __future__ import annotations

import asyncio
from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect
from sqlalchemy.engine import Connection

from signoff.settings import Settings
from signoff.store.runtime.database import Database, create_engine
from signoff.store.runtime.migrate import upgrade
from signoff.store.tables import metadata


def _declared_for(dialect: str) -> Any:
    """Leaves out what the declared schema creates on another engine only (an index
    declared with ``ddl_if(dialect=...)``)."""

    def include(item: object, name: str | None, kind: str, reflected: bool, other: Any) -> bool:
        condition = getattr(item, "_ddl_if", None)
        return condition is None or condition.dialect in (None, dialect)

    return include


def _differences(connection: Connection) -> list[object]:
    opts = {"compare_type": True, "include_object": _declared_for(connection.dialect.name)}
    context = MigrationContext.configure(connection, opts=opts)
    return list(compare_metadata(context, metadata))


def _indexes(connection: Connection) -> dict[str, set[str]]:
    inspector = inspect(connection)
    return {
        table: {ix["name"] for ix in inspector.get_indexes(table)}
        for table in inspector.get_table_names()
    }


def test_the_migrated_schema_equals_the_declared_schema(database_url: str) -> None:
    async def check() -> tuple[list[object], dict[str, set[str]]]:
        database = Database(create_engine(Settings(database_url=database_url)))
        try:
            await upgrade(database.engine)
            await upgrade(database.engine)  # idempotent
            async with database.engine.connect() as connection:
                return await connection.run_sync(_differences), await connection.run_sync(_indexes)
        finally:
            await database.dispose()

    differences, indexes = asyncio.run(check())
    assert differences == []
    assert {"uq_review_tasks_active_entity", "ix_review_tasks_claimable"} <= indexes["review_tasks"]
