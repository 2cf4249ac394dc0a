"""Create the PostgreSQL database the tests connect to first, when it is missing.

Usage: ensure_test_database.py postgresql://user@host:port/name  (used by scripts/test)
"""

from __future__ import annotations

import asyncio
import sys

import asyncpg
from sqlalchemy.engine import make_url


async def ensure(url: str) -> None:
    parsed = make_url(url)
    name = parsed.database or "test"
    server = parsed.set(drivername="postgresql", database="postgres").render_as_string(
        hide_password=False
    )
    try:
        connection = await asyncpg.connect(server)
    except (OSError, asyncpg.PostgresError) as exc:
        shown = parsed.render_as_string(hide_password=True)
        sys.exit(f"scripts/test: cannot connect to PostgreSQL for {shown}: {exc}")
    try:
        exists = await connection.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
        if not exists:
            print(f"==> creating the database {name!r}")
            await connection.execute(f'CREATE DATABASE "{name}"')
    finally:
        await connection.close()


if __name__ == "__main__":
    asyncio.run(ensure(sys.argv[1]))
