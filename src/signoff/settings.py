"""Configuration from the environment (prefix ``SIGNOFF_``) and CLI flags."""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_DATABASE_URL = "sqlite:///signoff.db"


class Settings(BaseSettings):
    """All settings. Durations are in seconds.

    ``database_url`` accepts the URLs people write (``postgresql://user@host/db``,
    ``sqlite:///path.db``); :func:`async_database_url` rewrites them to the async drivers.
    """

    model_config = SettingsConfigDict(env_prefix="SIGNOFF_", extra="ignore")

    database_url: str = DEFAULT_DATABASE_URL
    bootstrap_admin_key: str | None = Field(default=None, repr=False)
    lease_seconds: int = Field(default=900, gt=0, le=86400)
    idempotency_ttl_seconds: int = Field(default=86400, gt=0)
    max_body_bytes: int = Field(default=1024 * 1024, gt=0)
    host: str = "127.0.0.1"
    port: int = 8000
    log_level: str = "info"
    sqlite_busy_timeout_ms: int = Field(default=10_000, ge=0)

    @field_validator("bootstrap_admin_key")
    @classmethod
    def _key_is_long_enough(cls, value: str | None) -> str | None:
        if value is not None and len(value) < 16:
            raise ValueError("SIGNOFF_BOOTSTRAP_ADMIN_KEY must be at least 16 characters")
        return value

    @property
    def is_sqlite(self) -> bool:
        return async_database_url(self.database_url).startswith("sqlite")


def async_database_url(url: str) -> str:
    """Rewrite a plain database URL to its asyncio driver.

    ``postgresql://`` and ``postgres://`` become ``postgresql+asyncpg://``; ``sqlite://``
    becomes ``sqlite+aiosqlite://``. URLs that already name a driver are kept.
    """
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+asyncpg://" + url[len(prefix) :]
    if url.startswith("sqlite://"):
        return "sqlite+aiosqlite://" + url[len("sqlite://") :]
    return url
