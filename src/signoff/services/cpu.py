"""CPU-heavy work off the event loop, each kind on a small pool of threads of its own.

Diffs (line and word diffs of long strings) and password hashing (Argon2) each get their
own threads, sized by ``SIGNOFF_DIFF_THREADS`` and ``SIGNOFF_PASSWORD_THREADS``: however
many diffs are asked for at once, they wait for one another and never for a sign-in's
password check, nor the other way round. Neither uses the event loop's default thread
pool, which the database drivers and everything else share.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class CpuPool:
    """A bounded pool of threads for one kind of CPU work."""

    def __init__(self, name: str, threads: int) -> None:
        self.name = name
        self.threads = threads
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix=f"signoff-{name}")

    async def run(self, function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``function(*args, **kwargs)`` in one of the pool's threads, once one is free."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, functools.partial(function, *args, **kwargs)
        )

    def close(self) -> None:
        """Stop taking work; what waits is cancelled, what runs finishes (bounded)."""
        self._executor.shutdown(wait=False, cancel_futures=True)


class CpuPools:
    """This process's pools, one per kind of CPU-heavy work."""

    def __init__(self, *, diff_threads: int, password_threads: int) -> None:
        self.diffs = CpuPool("diff", diff_threads)
        self.passwords = CpuPool("password", password_threads)

    def close(self) -> None:
        self.diffs.close()
        self.passwords.close()
