"""What every use case needs: the database, the settings and the clock."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

from signoff.crypto import Keyring, load_keyring
from signoff.domain.clock import Clock
from signoff.services.cpu import CpuPools
from signoff.services.diff_cache import DiffCache
from signoff.services.wait_slots import WaitSlots
from signoff.settings import Settings
from signoff.store.runtime.database import Database

if TYPE_CHECKING:
    from signoff.services.shield import StormShield


@dataclass(frozen=True)
class ServiceContext:
    database: Database
    settings: Settings
    clock: Clock
    shield: StormShield | None = None
    """The Redis storm shield (``SIGNOFF_REDIS_URL``), or ``None``."""

    def now(self) -> datetime:
        """Read the clock once per operation; bind this value into every comparison."""
        return self.clock.now()

    @cached_property
    def wait_slots(self) -> WaitSlots:
        """The long-polls and event streams each key holds open in this process."""
        return WaitSlots()

    @cached_property
    def cpu(self) -> CpuPools:
        """The threads CPU-heavy work runs on (diffs, password hashing), per kind."""
        return CpuPools(
            diff_threads=self.settings.diff_threads,
            password_threads=self.settings.password_threads,
        )

    @cached_property
    def diff_cache(self) -> DiffCache:
        """The diffs this process has worked out, by revision pair."""
        return DiffCache(self.settings.diff_cache_bytes)

    @cached_property
    def signing_key(self) -> list[Any]:
        """The signing key this process holds, once loaded (:mod:`signoff.services.evidence`
        keeps it here: at most one item)."""
        return []

    @cached_property
    def keyring(self) -> Keyring:
        """The keys of secrets at rest (loaded once; see :mod:`signoff.crypto`)."""
        return load_keyring(self.settings)
