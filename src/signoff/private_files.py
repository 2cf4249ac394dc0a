"""Files only their owner may read: the SQLite database (with its ``-wal`` and ``-shm``
files) and the encryption key file. Signoff creates them mode 0600, and refuses to start
with one its group or other users may read or write (it says what to run)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from sqlalchemy.engine import make_url

from signoff.settings import async_database_url

#: Owner read and write, nothing for anyone else.
PRIVATE = 0o600


class ExposedFile(ValueError):
    """A file that must be private is open to the group or to other users."""


def create_private(path: Path) -> None:
    """Create an empty ``path``, mode 0600, unless it exists. For a SQLite database: SQLite
    then opens it and gives its ``-wal`` and ``-shm`` files the database file's mode. A
    path that cannot be created is left to whoever opens it (it reports why)."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE)
    except OSError:
        return
    os.close(descriptor)


def refuse_exposed(path: Path, what: str) -> None:
    """Raises :class:`ExposedFile` when ``path`` exists and its group or other users have
    any permission on it."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return
    if mode & 0o077:
        raise ExposedFile(
            f"{what} {path} has mode {mode:04o}: other users of this machine can read it. "
            f"Make it private (chmod 600 {path}) and start again."
        )


def sqlite_path(database_url: str) -> Path | None:
    """The SQLite database file ``database_url`` names; ``None`` for PostgreSQL, a
    database in memory or a ``file:`` URI."""
    url = make_url(async_database_url(database_url))
    name = url.database
    if url.get_backend_name() != "sqlite" or not name or name == ":memory:":
        return None
    return None if name.startswith("file:") else Path(name)


def sqlite_files(database: Path) -> tuple[Path, ...]:
    """The database file and the ``-wal`` and ``-shm`` files SQLite keeps beside it."""
    return (database, Path(f"{database}-wal"), Path(f"{database}-shm"))


def refuse_exposed_sqlite(database: Path) -> None:
    """:func:`refuse_exposed` for a SQLite database and its ``-wal`` and ``-shm`` files."""
    for path in sqlite_files(database):
        refuse_exposed(path, "the SQLite database file")
