"""Start-up steps shared by the CLI and the tests: migrate, then make sure an admin can
get in."""

from __future__ import annotations

from signoff.crypto import KeyringError, SecretUnavailable, key_file_path, load_keyring
from signoff.domain.clock import Clock, SystemClock
from signoff.private_files import refuse_exposed, refuse_exposed_sqlite, sqlite_path
from signoff.services.context import ServiceContext
from signoff.services.evidence import usable_signing_key
from signoff.services.keys import ensure_admin_key
from signoff.services.secrets import reencrypt_with_newest_key
from signoff.settings import Settings
from signoff.store.runtime.database import open_database
from signoff.store.runtime.migrate import upgrade


async def prepare_database(settings: Settings, *, clock: Clock | None = None) -> str | None:
    """Load (on first start: create) the encryption key, migrate the schema to the newest
    revision, re-encrypt stored secrets with the newest key, and ensure an admin key
    exists.

    Returns a newly generated admin key secret to show once, or ``None``.

    Raises:
        ExposedFile: the SQLite database (or its ``-wal``/``-shm``) or the key file is
            open to other users of the machine.
        KeyringError: no usable encryption key, or this process's keys do not decrypt
            the receipts' signing key (started with another key file than the database's
            first process).
    """
    database_file = sqlite_path(settings.database_url)
    if database_file is not None:
        refuse_exposed_sqlite(database_file)
    if not settings.encryption_keys:
        refuse_exposed(key_file_path(settings), "the encryption key file")
    database = open_database(settings)
    try:
        # The key is loaded (on first start: created) only once the database answered, and
        # by the migration only if it has secrets to encrypt.
        await upgrade(database.engine, keyring=lambda: load_keyring(settings))
        context = ServiceContext(database=database, settings=settings, clock=clock or SystemClock())
        await reencrypt_with_newest_key(context)
        try:
            await usable_signing_key(context)
        except SecretUnavailable:
            raise KeyringError(
                "the receipts' signing key in the database was encrypted with another "
                f"encryption key than this process's ({_key_source(settings)}): give this "
                "process the key the other processes (and the first `signoff migrate` or "
                "`signoff serve` on this database) use"
            ) from None
        return await ensure_admin_key(context)
    finally:
        await database.dispose()


def _key_source(settings: Settings) -> str:
    if settings.encryption_keys:
        return "SIGNOFF_ENCRYPTION_KEYS"
    return f"the key file {key_file_path(settings)}"
