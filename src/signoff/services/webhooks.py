"""Webhook endpoints and delivery history. A task never supplies its own callback URL:
source systems register endpoints, filtered by event and entity type.

An admin's endpoint receives every producer's events. A producer may register its own
(producer-scoped subscriptions): they receive only the events of that producer's tasks,
and the producer sees, changes, rotates and deletes only its own endpoints (another
producer's are 404, as if they did not exist). Secrets are stored encrypted."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from signoff.domain.states import REVIEWERS, Role
from signoff.domain.tasks import Principal, require_role
from signoff.domain.webhooks import error_category
from signoff.errors import ErrorCode, NotFound
from signoff.net import vet_url
from signoff.services.common import get_task
from signoff.services.context import ServiceContext
from signoff.store import webhooks as store
from signoff.webhooks import new_secret

ADMIN = frozenset({Role.ADMIN})
MANAGERS = frozenset({Role.ADMIN, Role.PRODUCER})


def _owner(caller: Principal) -> str | None:
    """The producer an endpoint belongs to (``None``: an admin's, for every producer)."""
    return caller.principal_id if caller.role is Role.PRODUCER else None


def _visible(caller: Principal, row: Any) -> bool:
    return caller.role is Role.ADMIN or row.producer_id == caller.principal_id


def _not_found(endpoint_id: object) -> NotFound:
    return NotFound(
        f"webhook endpoint {endpoint_id} does not exist",
        error_code=ErrorCode.WEBHOOK_ENDPOINT_NOT_FOUND,
    )


def _parse_id(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise _not_found(raw) from None


async def create_endpoint(
    ctx: ServiceContext,
    caller: Principal,
    *,
    url: str,
    event_types: list[str] | None,
    entity_types: list[str] | None,
    description: str | None,
    asymmetric_signature: bool = False,
) -> dict[str, Any]:
    """Register an endpoint; returns it with its ``secret`` (shown only here).
    ``asymmetric_signature``: also sign deliveries with the server's Ed25519 key.

    Raises:
        Unprocessable: 422 ``ERR_WEBHOOK_URL_FORBIDDEN`` (SSRF guard, see :mod:`signoff.net`).
    """
    require_role(caller, MANAGERS, "manage webhook endpoints")
    await vet_url(url, allow_private=ctx.settings.webhook_allow_private_networks)
    now, secret = ctx.now(), new_secret()
    async with ctx.database.transaction() as uow:
        row = await store.insert_endpoint(
            uow.connection,
            {
                "id": uuid.uuid4(),
                "url": url,
                "description": description,
                "event_types": event_types,
                "entity_types": entity_types,
                "enabled": True,
                "secret": ctx.keyring.encrypt(secret),
                "producer_id": _owner(caller),
                "asymmetric_signature": asymmetric_signature,
                "created_at": now,
                "updated_at": now,
            },
        )
        await uow.commit()
    return {**store.endpoint_view(row), "secret": secret}


async def list_endpoints(ctx: ServiceContext, caller: Principal) -> list[dict[str, Any]]:
    """Admins: every endpoint; a producer: its own."""
    require_role(caller, MANAGERS, "manage webhook endpoints")
    async with ctx.database.transaction(write=False) as uow:
        rows = await store.list_endpoints(uow.connection)
    return [store.endpoint_view(row) for row in rows if _visible(caller, row)]


async def _own_endpoint(ctx: ServiceContext, caller: Principal, raw_id: str) -> Any:
    """The endpoint, if the caller may manage it (else 404, never 403: another
    producer's endpoints are not theirs to learn of)."""
    require_role(caller, MANAGERS, "manage webhook endpoints")
    async with ctx.database.transaction(write=False) as uow:
        row = await store.find_endpoint(uow.connection, _parse_id(raw_id))
    if row is None or not _visible(caller, row):
        raise _not_found(raw_id)
    return row


async def get_endpoint(ctx: ServiceContext, caller: Principal, raw_id: str) -> dict[str, Any]:
    return store.endpoint_view(await _own_endpoint(ctx, caller, raw_id))


async def update_endpoint(
    ctx: ServiceContext, caller: Principal, raw_id: str, changes: dict[str, Any]
) -> dict[str, Any]:
    """Change ``url``, ``enabled``, ``event_types``, ``entity_types``, ``description`` or
    ``asymmetric_signature``.
    Re-enabling clears the disabled reason and the failure streak."""
    await _own_endpoint(ctx, caller, raw_id)
    if "url" in changes:
        await vet_url(changes["url"], allow_private=ctx.settings.webhook_allow_private_networks)
    values = dict(changes, updated_at=ctx.now())
    if changes.get("enabled") is True:
        values |= {"disabled_reason": None, "failing_since": None}
    elif changes.get("enabled") is False:
        values["disabled_reason"] = "disabled by an admin"
    async with ctx.database.transaction() as uow:
        row = await store.update_endpoint(uow.connection, _parse_id(raw_id), values)
        if row is None:
            raise _not_found(raw_id)
        await uow.commit()
    return store.endpoint_view(row)


async def delete_endpoint(ctx: ServiceContext, caller: Principal, raw_id: str) -> None:
    await _own_endpoint(ctx, caller, raw_id)
    async with ctx.database.transaction() as uow:
        if not await store.delete_endpoint(uow.connection, _parse_id(raw_id)):
            raise _not_found(raw_id)
        await uow.commit()


async def rotate_secret(ctx: ServiceContext, caller: Principal, raw_id: str) -> dict[str, Any]:
    """New secret; the old one keeps signing (``webhook-signature`` carries both) for
    ``SIGNOFF_WEBHOOK_SECRET_OVERLAP_SECONDS`` (24 h)."""
    await _own_endpoint(ctx, caller, raw_id)
    endpoint_id, now, secret = _parse_id(raw_id), ctx.now(), new_secret()
    async with ctx.database.transaction() as uow:
        current = await store.find_endpoint(uow.connection, endpoint_id)
        if current is None:
            raise _not_found(raw_id)
        row = await store.update_endpoint(
            uow.connection,
            endpoint_id,
            {
                "secret": ctx.keyring.encrypt(secret),
                "previous_secret": current.secret,  # still encrypted
                "previous_secret_expires_at": now
                + timedelta(seconds=ctx.settings.webhook_secret_overlap_seconds),
                "updated_at": now,
            },
        )
        await uow.commit()
    return {**store.endpoint_view(row), "secret": secret}


async def endpoint_deliveries(
    ctx: ServiceContext, caller: Principal, raw_id: str
) -> list[dict[str, Any]]:
    endpoint = await get_endpoint(ctx, caller, raw_id)
    async with ctx.database.transaction(write=False) as uow:
        found = await store.list_deliveries(uow.connection, endpoint_id=uuid.UUID(endpoint["id"]))
    return _for(caller, found)


def _for(caller: Principal, deliveries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every reader gets each failure's category; only admins the transport detail and
    the receiver's answer, which can name internal hosts and addresses."""
    admin = caller.role is Role.ADMIN
    shown = []
    for delivery in deliveries:
        attempts = []
        for attempt in delivery["attempts"]:
            category = error_category(attempt["status_code"], attempt["error"])
            attempt = {**attempt, "error_category": category}
            if not admin:
                attempt |= {"error": None, "response_body": None}
            attempts.append(attempt)
        category = error_category(delivery["last_status_code"], delivery["last_error"])
        delivery = {**delivery, "last_error_category": category, "attempts": attempts}
        if not admin:
            delivery["last_error"] = None
        shown.append(delivery)
    return shown


async def task_deliveries(
    ctx: ServiceContext, caller: Principal, raw_task_id: str
) -> list[dict[str, Any]]:
    """Deliveries of a task's events: admins, supervisors, and the producer that owns it."""
    require_role(caller, ADMIN | REVIEWERS | {Role.PRODUCER}, "read deliveries")
    task = await get_task(ctx, caller, raw_task_id)
    async with ctx.database.transaction(write=False) as uow:
        return _for(caller, await store.list_deliveries(uow.connection, task_id=task.id))


async def redeliver(ctx: ServiceContext, caller: Principal, raw_id: str) -> None:
    """Queue a delivery again (same ``webhook-id``), from the start of the retry schedule.

    Raises:
        NotFound: ``ERR_DELIVERY_NOT_FOUND``, also while an attempt of it is in flight.
    """
    require_role(caller, ADMIN, "redeliver webhooks")
    try:
        delivery_id = uuid.UUID(raw_id)
    except ValueError:
        delivery_id = None
    async with ctx.database.transaction() as uow:
        if delivery_id is None or not await store.requeue_delivery(
            uow.connection, delivery_id, now=ctx.now()
        ):
            raise NotFound(
                f"no delivery {raw_id} that can be sent again now",
                error_code=ErrorCode.DELIVERY_NOT_FOUND,
            )
        await uow.commit()
