"""Evidence: the server's signing keys, receipts of trail records, checkpoints, and the
bundle an auditor verifies offline (:mod:`signoff.domain.evidence_check`).

The hash chain itself is written by the database in the transaction of each trail
record. A record's receipt is signed here, from the stored record: right after a
decision commits (the API answers with it), when a task's receipts are read, and by the
checkpoint worker for any record still unsigned before it certifies a range. The
bundle itself is written by :mod:`signoff.services.evidence_export`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import structlog
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy.exc import IntegrityError

from signoff.crypto import SecretUnavailable
from signoff.domain.evidence import (
    TrailRecord,
    b64url,
    b64url_decode,
    checkpoint_claims,
    key_id,
    merkle_root,
    public_jwk,
    receipt_claims,
    sign_compact,
)
from signoff.domain.tasks import Principal
from signoff.errors import FieldError, validation_error
from signoff.services.common import get_task
from signoff.services.context import ServiceContext
from signoff.store import evidence as store

log = structlog.get_logger("signoff.evidence")

#: How long a process keeps the active key before it looks again (a rotation made by
#: another process is picked up within this time, by the service clock). A retired key's
#: published ``exp`` allows twice this after its retirement.
KEY_TTL = timedelta(seconds=60)


@dataclass
class _Active:
    kid: str
    key: Ed25519PrivateKey
    loaded: datetime


def _new_key() -> tuple[str, str, Ed25519PrivateKey]:
    private = Ed25519PrivateKey.generate()
    public = private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    return key_id(public), b64url(public), private


def _raw_private(key: Ed25519PrivateKey) -> str:
    raw = key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    return b64url(raw)


async def _active_kid(ctx: ServiceContext) -> str | None:
    async with ctx.database.transaction(write=False) as uow:
        rows = await store.all_keys(uow.connection)
    return next((str(r.kid) for r in rows if r.retired_at is None and r.private_key), None)


async def ensure_signing_key(ctx: ServiceContext) -> str:
    """The active key's id; the first start makes one (its private half encrypted at
    rest like every other secret). The database holds one live key at most: of two
    processes starting at once, one adds its key and the other reads it."""
    active = await _active_kid(ctx)
    if active is not None:
        return active
    kid, public, private = _new_key()
    async with ctx.database.transaction() as uow:
        added = await store.add_key(
            uow.connection,
            kid=kid,
            public_key=public,
            private_key=ctx.keyring.encrypt(_raw_private(private)),
            now=ctx.now(),
        )
        await uow.commit()
    return kid if added else await _winner(ctx)


async def _winner(ctx: ServiceContext) -> str:
    """The live key another process added while this one tried to."""
    active = await _active_kid(ctx)
    if active is None:  # the one live key cannot vanish but by a rotation's own insert
        raise RuntimeError("no live signing key after another process added one")
    return active


async def rotate_signing_key(ctx: ServiceContext) -> str:
    """Make a new key the active one and retire the others (their public halves stay
    published, so what they signed still verifies). Returns the new key's id; of two
    rotations at once, one key stays live and both return it."""
    kid, public, private = _new_key()
    now = ctx.now()
    async with ctx.database.transaction() as uow:
        await store.retire_keys_but(uow.connection, kid, now)
        added = await store.add_key(
            uow.connection,
            kid=kid,
            public_key=public,
            private_key=ctx.keyring.encrypt(_raw_private(private)),
            now=now,
        )
        await uow.commit()
    ctx.signing_key.clear()
    return kid if added else await _winner(ctx)


async def _signer(ctx: ServiceContext) -> _Active:
    now = ctx.now()
    if ctx.signing_key:
        held: _Active = ctx.signing_key[0]
        if held.loaded <= now < held.loaded + KEY_TTL:
            return held
    await ensure_signing_key(ctx)
    async with ctx.database.transaction(write=False) as uow:
        rows = await store.all_keys(uow.connection)
    row = next(r for r in rows if r.retired_at is None and r.private_key is not None)
    raw_key = b64url_decode(ctx.keyring.decrypt(row.private_key))
    fresh = _Active(str(row.kid), Ed25519PrivateKey.from_private_bytes(raw_key), now)
    ctx.signing_key[:] = [fresh]
    return fresh


async def usable_signing_key(ctx: ServiceContext) -> str:
    """The active key's id (the first start makes one), once this process has decrypted
    its private half: a process that could not would answer every decision unsigned.

    Raises:
        SecretUnavailable: no key of this process decrypts it.
    """
    return (await _signer(ctx)).kid


async def signing_key(ctx: ServiceContext) -> Ed25519PrivateKey:
    """The active signing key (for webhook ``v1a`` signatures)."""
    return (await _signer(ctx)).key


async def jwks(ctx: ServiceContext) -> dict[str, Any]:
    """Every public key ever used, active first (RFC 7517 JWK Set)."""
    async with ctx.database.transaction(write=False) as uow:
        rows = await store.all_keys(uow.connection)
    return {
        "keys": [
            public_jwk(
                b64url_decode(row.public_key),
                row.kid,
                created_at=row.created_at,
                retired_at=None if row.retired_at is None else row.retired_at + 2 * KEY_TTL,
            )
            for row in rows
        ]
    }


async def sign_pending(ctx: ServiceContext, *, task_id: uuid.UUID | None = None) -> int:
    """Sign and store the receipt of every linked record that has none: of one task, or
    all those since the last checkpoint (in batches). Returns how many were signed."""
    if task_id is not None:
        return len(await _sign(ctx, task_id=task_id))
    total = 0
    while batch := len(await _sign(ctx)):
        total += batch
        if batch < store.SIGN_BATCH:
            break
    return total


async def with_receipts(
    ctx: ServiceContext, events: Sequence[tuple[int | None, str | None, dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Event documents (webhook bodies, catch-up events) with the receipt of the trail
    record each reports, signed now where it had none yet: ``{"id", "type", "created_at",
    "data", "receipt"}``. Each event is given as (record id, its receipt, its document)."""
    missing = [record for record, receipt, _ in events if record is not None and receipt is None]
    signed = await sign_records(ctx, missing) if missing else {}
    out = []
    for record, receipt, document in events:
        receipt = receipt or signed.get(record or 0)
        out.append({**document, "receipt": receipt} if receipt is not None else document)
    return out


async def sign_records(ctx: ServiceContext, record_ids: list[int]) -> dict[int, str]:
    """The receipts of ``record_ids`` that had none, signed and stored now, by id."""
    return await _sign(ctx, record_ids=record_ids)


async def _sign(
    ctx: ServiceContext,
    *,
    task_id: uuid.UUID | None = None,
    record_ids: list[int] | None = None,
) -> dict[int, str]:
    # A read first: most calls find nothing to sign, and take no write lock.
    async with ctx.database.transaction(write=False) as uow:
        after = 0
        if task_id is None and record_ids is None:
            last = await store.last_checkpoint(uow.connection)
            after = 0 if last is None else int(last.last_record_id)
        records = await store.unsigned_records(
            uow.connection, task_id=task_id, record_ids=record_ids, after_id=after
        )
    return await _store_signed(ctx, records)


async def _store_signed(ctx: ServiceContext, records: list[TrailRecord]) -> dict[int, str]:
    """Sign ``records`` and store their receipts; returns them by record id."""
    if not records:
        return {}
    signer = await _signer(ctx)
    now = ctx.now()
    signed: dict[int, str] = {}
    rows = []
    for record in records:
        jws = sign_compact(signer.key, signer.kid, receipt_claims(record))
        signed[record.id] = jws
        rows.append(
            {
                "record_id": record.id,
                "task_id": uuid.UUID(record.task_id),
                "kid": signer.kid,
                "jws": jws,
                "created_at": now,
            }
        )
    async with ctx.database.transaction() as uow:
        # Another process may have signed some first: its receipts are kept (both valid).
        await store.add_receipts(uow.connection, rows)
        await uow.commit()
    return signed


async def readable_receipts(
    ctx: ServiceContext, principal: Principal, raw_task_id: str
) -> list[dict[str, Any]]:
    """:func:`task_receipts` of a task the caller may read."""
    task = await get_task(ctx, principal, raw_task_id)
    return await task_receipts(ctx, task.id)


def parse_range(since: str | None, until: str | None) -> tuple[datetime | None, datetime | None]:
    """``since``/``until`` as RFC 3339 times with an offset. Raises 422 ``ERR_VALIDATION``
    naming each bad one."""
    errors, moments = [], []
    for name, raw in (("since", since), ("until", until)):
        moment = None
        if raw is not None:
            try:
                moment = datetime.fromisoformat(raw)
            except ValueError:
                moment = None
            if moment is None or moment.tzinfo is None:
                errors.append(FieldError(name, "an RFC 3339 time with an offset"))
                moment = None
        moments.append(moment)
    if errors:
        raise validation_error(errors)
    return moments[0], moments[1]


async def task_receipts(ctx: ServiceContext, task_id: uuid.UUID) -> list[dict[str, Any]]:
    """The task's records, oldest first, each with its chain link and receipt."""
    await sign_pending(ctx, task_id=task_id)
    async with ctx.database.transaction(write=False) as uow:
        records = await store.task_records(uow.connection, task_id)
    return [
        {
            "record_id": record.id,
            "type": record.event_type,
            "prev_hash": record.prev_hash,
            "hash": record.hash,
            "receipt": jws,
        }
        for record, jws in records
    ]


async def latest_receipt(ctx: ServiceContext, task_id: uuid.UUID) -> str | None:
    """The receipt of the task's newest record, signed now if it has none: one read, and
    one insert when signed here. ``None`` too when this process cannot decrypt the
    signing key (logged): the decision it answers is committed, and its receipt is
    signed by the next process that can (the receipts' read and the export sign what has
    none)."""
    async with ctx.database.transaction(write=False) as uow:
        newest = await store.newest_record(uow.connection, task_id)
    if newest is None or not newest[0].hash:
        return None
    record, receipt = newest
    if receipt is not None:
        return receipt
    try:
        return (await _store_signed(ctx, [record])).get(record.id)
    except SecretUnavailable as error:
        log.error("evidence.receipt_unsigned", task_id=str(task_id), reason=str(error))
        return None


async def checkpoint_if_due(ctx: ServiceContext) -> dict[str, Any] | None:
    """A checkpoint when ``SIGNOFF_CHECKPOINT_INTERVAL_SECONDS`` have passed since the last
    (the sweeper asks on every sweep; any number of sweepers may: a second checkpoint of
    the same number is refused by its key and made again next time)."""
    async with ctx.database.transaction(write=False) as uow:
        last = await store.last_checkpoint(uow.connection)
    interval = timedelta(seconds=ctx.settings.checkpoint_interval_seconds)
    if last is not None and last.made_at + interval > ctx.now():
        return None
    try:
        return await make_checkpoint(ctx, settle_seconds=ctx.settings.checkpoint_settle_seconds)
    except IntegrityError:  # another sweeper made this number first: its checkpoint stands
        return None


async def make_checkpoint(
    ctx: ServiceContext, *, settle_seconds: float = 60.0, limit: int = 100_000
) -> dict[str, Any] | None:
    """Certify the records written since the last checkpoint (up to ``settle_seconds``
    ago, so a transaction still open elsewhere is not passed over): a signed Merkle
    root over their hashes, chained to the previous root. ``None``: nothing new."""
    await sign_pending(ctx)
    signer = await _signer(ctx)
    now = ctx.now()
    async with ctx.database.transaction() as uow:
        last = await store.last_checkpoint(uow.connection)
        after = 0 if last is None else int(last.last_record_id)
        leaves = await store.leaves_after(
            uow.connection, after, now - timedelta(seconds=settle_seconds), limit
        )
        if not leaves:
            return None
        claims = checkpoint_claims(
            seq=1 if last is None else int(last.seq) + 1,
            first_record_id=leaves[0][0],
            last_record_id=leaves[-1][0],
            size=len(leaves),
            root=merkle_root([text for _, text in leaves]),
            prev_root="" if last is None else str(last.root),
            made_at=now,
        )
        jws = sign_compact(signer.key, signer.kid, claims)
        await store.add_checkpoint(
            uow.connection,
            {
                "seq": claims["seq"],
                "first_record_id": claims["first_record_id"],
                "last_record_id": claims["last_record_id"],
                "size": claims["size"],
                "root": claims["root"],
                "prev_root": claims["prev_root"],
                "made_at": now,
                "kid": signer.kid,
                "jws": jws,
                "leaves": [text for _, text in leaves],
            },
        )
        await uow.commit()
    return claims
