"""Secrets at rest (signoff.crypto): re-encrypting them with the newest key."""

from __future__ import annotations

import structlog

from signoff.crypto import SecretUnavailable
from signoff.services.context import ServiceContext
from signoff.store import secrets as store

log = structlog.get_logger("signoff.secrets")


async def reencrypt_with_newest_key(ctx: ServiceContext) -> int:
    """Re-encrypt every stored secret with the newest key (``signoff serve``, ``worker``
    and ``migrate`` do this on start), so a retired key can be removed once every replica
    has restarted with the new list. Secrets no key decrypts are left as they are and
    counted in one error line. Returns how many were re-encrypted."""
    keyring = ctx.keyring
    done, failed = 0, 0
    async with ctx.database.transaction() as uow:
        for row in await store.endpoint_secrets(uow.connection):
            try:
                secret = keyring.rotate(row.secret)
                previous = keyring.rotate(row.previous_secret) if row.previous_secret else None
            except SecretUnavailable:
                failed += 1
                continue
            await store.set_endpoint_secrets(
                uow.connection, row.id, secret=secret, previous_secret=previous
            )
            done += 1
        for row in await store.stored_resume_tokens(uow.connection):
            try:
                token = keyring.rotate(row.resume_token)
            except SecretUnavailable:
                failed += 1
                continue
            await store.set_resume_token(uow.connection, row.id, token)
            done += 1
        await uow.commit()
    if failed:
        log.error(
            "encryption.secrets_undecryptable",
            count=failed,
            message=(
                "stored secrets that no configured key decrypts: webhooks of those endpoints "
                "will not be sent until this process has the key the others use"
            ),
        )
    return done
