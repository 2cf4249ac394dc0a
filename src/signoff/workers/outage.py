"""How the background loops report a database that does not answer: one warning when it
goes away (``database.unavailable``) and one line when it is back
(``database.available``, with how long it was gone), instead of a stack trace every round.
Any other failure is still logged in full, every time."""

from __future__ import annotations

import time

import structlog

from signoff.store.runtime.availability import classify


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
        outage = classify(exc)
        if outage is None:
            self._log.exception(f"{self.worker}.iteration_failed")
            return
        if self._since is None:
            self._since = time.monotonic()
            self._log.warning(
                "database.unavailable", worker=self.worker, cause=outage.cause, error=outage.error
            )

    def succeeded(self) -> None:
        if self._since is not None:
            self._log.info(
                "database.available",
                worker=self.worker,
                unavailable_seconds=round(time.monotonic() - self._since, 3),
            )
            self._since = None
