"""Attempt records written in groups (signoff.workers.recorder): a group leaves the
database exactly as recording its attempts one by one would, on both engines."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import update
from sqlalchemy.exc import IntegrityError

from signoff.domain.webhooks import AttemptOutcome, ClaimedDelivery, DeliveryStatus, Verdict
from signoff.services import delivery as delivery_service
from signoff.services.context import ServiceContext
from signoff.services.delivery import AttemptRecord
from signoff.store.tables import webhook_deliveries
from signoff.workers import recorder as recorder_module
from signoff.workers.recorder import Recorder
from tests.integration.test_batches import _in_context
from tests.integration.test_webhooks import hooks, register  # noqa: F401 (a fixture)
from tests.receiver import Receiver
from tests.support import LiveServer, escalation

OWNER = "test-dispatcher"


def _claimed(server: LiveServer, tasks: int) -> list[ClaimedDelivery]:
    """``tasks`` escalations, each fanned out to the registered endpoints and leased."""
    with server.new_client("producer") as producer:
        for _ in range(tasks):
            assert producer.escalate(escalation()).status_code == 201

    async def claim(ctx: ServiceContext) -> list[ClaimedDelivery]:
        taken = await delivery_service.claim_deliveries(ctx, owner=OWNER, limit=100)
        return taken.deliveries

    return list(_in_context(server, claim))


def _record(at: datetime, status_code: int, minutes: int = 0) -> AttemptRecord:
    now = at + timedelta(minutes=minutes)
    if status_code == 200:
        return AttemptRecord(
            now, AttemptOutcome(200), "ok", 5, DeliveryStatus.SUCCEEDED, None, Verdict.SUCCESS, now
        )
    verdict = Verdict.DISABLE_ENDPOINT if status_code == 410 else Verdict.RETRY
    status = DeliveryStatus.DEAD if status_code == 410 else DeliveryStatus.PENDING
    retry_at = None if status_code == 410 else now + timedelta(minutes=1)
    return AttemptRecord(now, AttemptOutcome(status_code), "no", 5, status, retry_at, verdict, now)


def _write(server: LiveServer, group: Sequence[tuple[ClaimedDelivery, AttemptRecord]]) -> Any:
    async def write(ctx: ServiceContext) -> list[bool]:
        return await delivery_service.record_delivery_attempts(ctx, owner=OWNER, attempts=group)

    return _in_context(server, write)


def test_a_group_stores_every_attempt_and_settles_each_held_delivery(hooks) -> None:  # noqa: F811
    with Receiver() as receiver:
        register(hooks, receiver.url, event_types=["task.created"])
        claimed = _claimed(hooks, 4)
    assert len(claimed) == 4
    lost = claimed[3]

    async def take_over(ctx: ServiceContext) -> None:  # another dispatcher took it over
        async with ctx.database.transaction() as uow:
            await uow.connection.execute(
                update(webhook_deliveries)
                .where(webhook_deliveries.c.id == lost.id)
                .values(lease_owner="someone-else")
            )
            await uow.commit()

    _in_context(hooks, take_over)
    now = hooks.clock.now()
    codes = [200, 500, 200, 200]
    held = _write(hooks, [(d, _record(now, code)) for d, code in zip(claimed, codes, strict=True)])
    assert held == [True, True, True, False]
    assert hooks.count("delivery_attempts") == 4  # the lost lease's attempt is kept too
    by_id = {str(row["id"]): row for row in hooks.rows("webhook_deliveries")}
    states = [(by_id[str(d.id)]["status"], by_id[str(d.id)]["lease_owner"]) for d in claimed]
    assert states == [
        ("SUCCEEDED", None),
        ("PENDING", None),  # retried later, lease given back
        ("SUCCEEDED", None),
        ("PENDING", "someone-else"),  # not touched: its lease was not ours any more
    ]


@pytest.mark.parametrize(
    ("codes", "streak_from"),
    [
        ([500, 500], 0),  # a streak starts with the group's first failure
        ([500, 200, 500, 500], 2),  # the success ended it; a new one starts after it
        ([500, 200], None),  # it ends with a success
    ],
)
def test_a_groups_failure_streak_is_the_one_by_one_streak(hooks, codes, streak_from) -> None:  # noqa: F811
    with Receiver() as receiver:
        register(hooks, receiver.url, event_types=["task.created"])
        claimed = _claimed(hooks, len(codes))
    now = hooks.clock.now()
    group = [
        (d, _record(now, code, minutes=n))
        for n, (d, code) in enumerate(zip(claimed, codes, strict=True))
    ]
    _write(hooks, group)
    (endpoint,) = hooks.rows("webhook_endpoints")
    expected = None if streak_from is None else group[streak_from][1].now
    assert endpoint["failing_since"] == expected
    assert endpoint["enabled"]


def test_a_410_in_a_group_disables_the_endpoint(hooks) -> None:  # noqa: F811
    with Receiver() as receiver:
        register(hooks, receiver.url, event_types=["task.created"])
        claimed = _claimed(hooks, 2)
    now = hooks.clock.now()
    _write(hooks, [(claimed[0], _record(now, 200)), (claimed[1], _record(now, 410))])
    (endpoint,) = hooks.rows("webhook_endpoints")
    assert (endpoint["enabled"], endpoint["disabled_reason"]) == (
        False,
        "receiver answered 410 Gone",
    )


def test_a_deleted_endpoint_fails_only_its_own_attempts(hooks) -> None:  # noqa: F811
    with Receiver() as first, Receiver() as second:
        register(hooks, first.url, event_types=["task.created"], entity_types=["kept"])
        gone = register(hooks, second.url, event_types=["task.created"], entity_types=["gone"])
        with hooks.new_client("producer") as producer:
            for entity_type in ("kept", "gone", "kept"):
                producer.escalate(escalation(entity_type=entity_type))

        async def claim(ctx: ServiceContext) -> list[ClaimedDelivery]:
            return (await delivery_service.claim_deliveries(ctx, owner=OWNER, limit=10)).deliveries

        claimed = _in_context(hooks, claim)
        with hooks.admin() as admin:  # its deliveries go with it, while the attempts ran
            assert admin.delete(f"/webhook-endpoints/{gone['id']}").status_code == 204
    now = hooks.clock.now()
    writes: list[int] = []

    async def run(ctx: ServiceContext) -> list[Any]:
        async def write(group: Sequence[tuple[ClaimedDelivery, AttemptRecord]]) -> list[bool]:
            writes.append(len(group))
            return await delivery_service.record_delivery_attempts(ctx, owner=OWNER, attempts=group)

        recorder = Recorder(write)
        return await asyncio.gather(
            *(recorder.record(d, _record(now, 200)) for d in claimed), return_exceptions=True
        )

    outcomes = _in_context(hooks, run)
    by_endpoint = {str(d.endpoint_id): o for d, o in zip(claimed, outcomes, strict=True)}
    assert isinstance(by_endpoint.pop(gone["id"]), IntegrityError)
    assert list(by_endpoint.values()) == [True]  # one endpoint left, its attempts recorded
    assert [o for o in outcomes if not isinstance(o, IntegrityError)] == [True, True]
    assert writes[0] == 3  # the group first,
    assert sorted(writes[1:]) == [1, 1, 1]  # then one by one
    assert hooks.count("delivery_attempts") == 2
    assert {row["status"] for row in hooks.rows("webhook_deliveries")} == {"SUCCEEDED"}


def test_attempts_finishing_together_are_written_in_few_transactions(monkeypatch) -> None:
    monkeypatch.setattr(recorder_module, "GROUP_LIMIT", 40)
    groups: list[int] = []

    async def write(group: Sequence[tuple[Any, Any]]) -> list[bool]:
        groups.append(len(group))
        await asyncio.sleep(0.01)  # a transaction's round trips
        return [n % 2 == 0 for n in range(len(group))]

    async def run() -> list[bool]:
        recorder = Recorder(write)
        return await asyncio.gather(*(recorder.record(n, n) for n in range(100)))  # type: ignore[arg-type]

    held = asyncio.run(run())
    assert sum(groups) == 100
    assert max(groups) <= 40
    assert len(groups) <= 4  # not one transaction per attempt
    assert len(held) == 100


def test_a_failed_write_reaches_every_attempt_of_its_group() -> None:
    async def write(group: Sequence[tuple[Any, Any]]) -> list[bool]:
        raise ConnectionResetError("the database went away")

    async def run() -> list[Any]:
        recorder = Recorder(write)
        return await asyncio.gather(
            *(recorder.record(n, n) for n in range(5)),  # type: ignore[arg-type]
            return_exceptions=True,
        )

    outcomes = asyncio.run(run())
    assert all(isinstance(o, ConnectionResetError) for o in outcomes)
