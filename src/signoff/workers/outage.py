"""How the background loops report a database that does not answer: one warning when it
goes away (``database.unavailable``) and one line when it is back
(``database.available``, with how long it was gone), instead of a stack trace every round.
Any other failure is still logged in full, every time."""

from __future__ import annotations

import time

import asyncpg
import structlog
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout

#: SQLSTATE classes meaning "the database is not there (for now)": connection exceptions,
#: authorization (a database being recreated), insufficient resources, operator
#: intervention (shutdown, crash recovery).
UNAVAILABLE_SQLSTATE_PREFIXES = ("08", "28", "3D", "53", "57P")


def database_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database cannot be reached, as opposed to a bug."""
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated:
            return True
        exc = exc.orig if isinstance(exc.orig, BaseException) else exc
    if isinstance(exc, OSError | TimeoutError | PoolTimeout | asyncpg.InterfaceError):
        return True
    sqlstate = getattr(exc, "sqlstate", None)
    return isinstance(sqlstate, str) and sqlstate.startswith(UNAVAILABLE_SQLSTATE_PREFIXES)


class OutageLog:
    """One per loop (``worker`` names it in each line)."""

    def __init__(self, worker: str) -> None:
        self.worker = worker
        self._log = structlog.get_logger(f"signoff.{worker}")
        self._since: float | None = None

    @property
    def down(self) -> bool:
        return self._since is not None

    def failed(self, exc: BaseException) -> None:
        """Call from the ``except`` block of a failed round."""
        if not database_unavailable(exc):
            self._log.exception(f"{self.worker}.iteration_failed")
            return
        if self._since is None:
            self._since = time.monotonic()
            self._log.warning(
                "database.unavailable",
                worker=self.worker,
                error=f"{type(exc).__name__}: {exc}"[:300],
            )

    def succeeded(self) -> None:
        if self._since is not None:
            self._log.info(
                "database.available",
                worker=self.worker,
                unavailable_seconds=round(time.monotonic() - self._since, 3),
            )
            self._since = None
