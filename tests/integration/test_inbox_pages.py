"""The inbox's views page by page, through the services, on both engines: walking every
view forward and back gives its rows once each in the view's order; the tab counts are
the views' sizes; search finds by entity id, reason code and summary words within what
the reader may see; Overdue keeps a task whose deadline passed after the sweeper moved
the next level out."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from signoff.domain.clock import SystemClock
from signoff.domain.inbox import decode_cursor, search_terms
from signoff.domain.states import Decision, Role
from signoff.domain.tasks import Principal
from signoff.errors import Unprocessable
from signoff.services import inbox, waiting
from signoff.services import tasks as task_service
from signoff.services.context import ServiceContext
from signoff.services.escalate import escalate
from signoff.services.inbox import InboxFilters, Page, View
from signoff.settings import Settings
from signoff.store.runtime.database import Database, create_engine
from signoff.store.runtime.migrate import upgrade
from tests.support import escalation

PRODUCER = Principal(key_id=uuid.uuid4(), principal_id="bot", role=Role.PRODUCER)
ANN = Principal(key_id=uuid.uuid4(), principal_id="ann", role=Role.REVIEWER, groups=("pay",))
SUE = Principal(key_id=uuid.uuid4(), principal_id="sue", role=Role.SUPERVISOR)
SIZE = 4


def _run(database_url: str, scenario: Callable[[ServiceContext], Awaitable[None]]) -> None:
    async def main() -> None:
        settings = Settings(database_url=database_url)
        database = Database(create_engine(settings))
        try:
            await upgrade(database.engine)
            await scenario(
                ServiceContext(database=database, settings=settings, clock=SystemClock())
            )
        finally:
            await database.dispose()

    asyncio.run(main())


async def _escalate(ctx: ServiceContext, entity_id: str, **fields: Any) -> str:
    outcome = await escalate(ctx, PRODUCER, escalation(entity_id, **fields))
    assert outcome.status_code == 201, outcome.body
    assert outcome.task_id is not None
    return str(outcome.task_id)


async def _walk(
    ctx: ServiceContext, reader: Principal, view: View, filters: InboxFilters
) -> list[list[str]]:
    """Every page of the view, forward, then checked backward."""
    pages: list[Page] = [await inbox.page_of_view(ctx, reader, view, filters, size=SIZE)]
    while pages[-1].next is not None:
        pages.append(
            await inbox.page_of_view(ctx, reader, view, filters, cursor=pages[-1].next, size=SIZE)
        )
    ids = [[str(task.id) for task in page.tasks] for page in pages]
    for number, page in enumerate(pages):
        assert page.first == (number * SIZE + 1 if page.tasks else 0)
        assert page.last == number * SIZE + len(page.tasks)
        assert (page.previous is None) == (number == 0)
    back = pages[-1]
    for number in range(len(pages) - 2, -1, -1):
        assert back.previous is not None
        back = await inbox.page_of_view(ctx, reader, view, filters, cursor=back.previous, size=SIZE)
        assert [str(task.id) for task in back.tasks] == ids[number]
        assert back.first == number * SIZE + 1
    return ids


def test_every_view_pages_forward_and_back_in_its_order_and_its_count_is_its_size(
    database_url: str,
) -> None:
    async def scenario(ctx: ServiceContext) -> None:
        for number in range(9):
            await _escalate(ctx, f"open_{number}")
        for number in range(3):
            await _escalate(ctx, f"pay_{number}", assigned_group="pay")
            await _escalate(ctx, f"aml_{number}", assigned_group="aml")
        past = (datetime.now(UTC) - timedelta(hours=2)).isoformat()
        for number in range(5):
            await _escalate(ctx, f"late_{number}", deadline=past)
        decided = []
        for number in range(6):
            task_id = await _escalate(ctx, f"done_{number}")
            grant = await task_service.claim(ctx, ANN, task_id)
            await task_service.resolve(
                ctx,
                ANN,
                task_id,
                grant.lease_token,
                decision=Decision.APPROVED,
                notes=None,
                resolution_payload=None,
                door="console",
            )
            decided.append(task_id)
        for number in range(5):
            await task_service.claim(ctx, ANN, await _escalate(ctx, f"held_{number}"))
        plain = InboxFilters()
        for reader in (ANN, SUE):
            counts = await inbox.count_views(ctx, reader, plain)
            assert set(counts) == set(inbox.views_for(reader))
            for view in inbox.views_for(reader):
                pages = await _walk(ctx, reader, view, plain)
                listed = [task_id for page in pages for task_id in page]
                everything = await inbox.list_view(ctx, reader, view, plain, limit=1000)
                assert listed == [str(task.id) for task in everything], view
                assert len(set(listed)) == len(listed) == counts[view], view
        ann = await inbox.count_views(ctx, ANN, plain)
        assert ann[View.AVAILABLE] == 9 + 3 + 5  # not the aml group's, not the held ones
        assert ann[View.MINE] == 5
        assert ann[View.DECIDED] == 6
        assert ann[View.DUE] == 5
        first_decided = await inbox.page_of_view(ctx, ANN, View.DECIDED, plain, size=SIZE)
        assert [str(t.id) for t in first_decided.tasks] == decided[::-1][:SIZE]  # latest first
        sue = await inbox.count_views(ctx, SUE, plain)
        assert sue[View.ALL] == 9 + 6 + 5 + 5
        assert sue[View.OVERDUE] == 5

    _run(database_url, scenario)


def test_search_finds_by_entity_id_reason_code_and_summary_words_within_what_one_may_see(
    database_url: str,
) -> None:
    summary = {"recommendation": "REJECT", "rationale": "The payee is on a Sanctioned list."}

    async def scenario(ctx: ServiceContext) -> None:
        for number in range(6):
            await _escalate(ctx, f"bulk_{number:04d}")
        target = await _escalate(
            ctx, "bulk_0734", reason_code="PAYEE_MISMATCH", summary=summary, assigned_group="pay"
        )
        await _escalate(ctx, "bulk_0734_hidden", summary=summary, assigned_group="aml")
        await _escalate(ctx, "bulk_07_percent%")

        async def found(reader: Principal, words: str) -> list[str]:
            filters = InboxFilters(terms=search_terms(words))
            page = await inbox.page_of_view(ctx, reader, View.AVAILABLE, filters)
            counts = await inbox.count_views(ctx, reader, filters)
            assert counts[View.AVAILABLE] == page.total == len(page.tasks)
            return [t.entity_id for t in page.tasks]

        for words in ("bulk_0734", "payee_mismatch", "SANCTIONED list", "reject payee"):
            assert await found(ANN, words) == ["bulk_0734"], words
        assert sorted(await found(SUE, "bulk_0734")) == ["bulk_0734", "bulk_0734_hidden"]
        assert await found(ANN, "bulk_07_") == ["bulk_07_percent%"]  # "_" is no wildcard
        assert await found(ANN, "%") == ["bulk_07_percent%"]
        assert len(await found(ANN, "bulk")) == 8
        assert await found(ANN, "bulk nothing-like-this") == []
        assert target

    _run(database_url, scenario)


def test_overdue_keeps_a_task_past_its_deadline_after_the_sweeper_moved_the_next_level(
    database_url: str,
) -> None:
    async def scenario(ctx: ServiceContext) -> None:
        past = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()
        late = await _escalate(ctx, "late", deadline=past)
        await _escalate(ctx, "on_time")
        assert await waiting.sweep_due(ctx) == 1  # level 1 (remind): the next level a day on
        page = await inbox.page_of_view(ctx, SUE, View.OVERDUE, InboxFilters())
        assert [str(t.id) for t in page.tasks] == [late]
        task = page.tasks[0]
        assert task.escalation_level == 1
        assert task.deadline_at is not None
        assert task.due_at is not None
        assert task.deadline_at - task.due_at == timedelta(days=1)
        due = await inbox.page_of_view(ctx, SUE, View.DUE, InboxFilters())
        assert [str(t.id) for t in due.tasks] == [late]

    _run(database_url, scenario)


@pytest.mark.parametrize(
    ("field", "raw"),
    [("after", "not-a-page"), ("before", "WyJ4Il0"), ("after", "W10")],
)
def test_a_page_mark_of_another_view_is_refused_with_its_field(
    database_url: str, field: str, raw: str
) -> None:
    async def scenario(ctx: ServiceContext) -> None:
        async def attempt() -> None:
            cursor = decode_cursor(raw, backward=field == "before", field=field)
            await inbox.page_of_view(ctx, ANN, View.AVAILABLE, InboxFilters(), cursor=cursor)

        with pytest.raises(Unprocessable) as refused:
            await attempt()
        assert [e.field for e in refused.value.errors] == [field]

    _run(database_url, scenario)
