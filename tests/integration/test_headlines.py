"""Headlines: declared at escalation, validated at intake, bound to the revision, shown in
the task view, searched in the inbox; on both engines, through real HTTP."""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from signoff.domain.clock import SystemClock
from signoff.domain.inbox import search_terms
from signoff.domain.states import Role
from signoff.domain.tasks import Principal
from signoff.services import inbox
from signoff.services.context import ServiceContext
from signoff.services.escalate import escalate
from signoff.services.inbox import InboxFilters, View
from signoff.settings import Settings
from signoff.store.runtime.database import Database, create_engine
from signoff.store.runtime.migrate import upgrade
from tests.support import Client, LiveServer, escalation

PRODUCER = Principal(key_id=uuid.uuid4(), principal_id="bot", role=Role.PRODUCER)
SUE = Principal(key_id=uuid.uuid4(), principal_id="sue", role=Role.SUPERVISOR)

PAYMENT: dict[str, Any] = {
    "amount": 12500,
    "currency": "EUR",
    "payee": {"name": "ACME Ltd", "iban": "DE89370400440532013000"},
    "value_date": "2026-12-24",
    "actions": [{"id": "release_payment"}],
}

HEADLINE: dict[str, Any] = {
    "title": "Release {/amount} to {/payee/name}",
    "fields": [
        {"label": "Amount", "pointer": "/amount", "type": "money", "currency_pointer": "/currency"},
        {"label": "Payee", "pointer": "/payee/name", "type": "person"},
        {"label": "Value date", "pointer": "/value_date", "type": "date"},
    ],
}


@pytest.fixture
def producer(server: LiveServer):  # type: ignore[no-untyped-def]
    with server.new_client("producer", "payments-bot") as client:
        yield client


@pytest.fixture
def reviewer(server: LiveServer):  # type: ignore[no-untyped-def]
    with server.new_client("reviewer", "ops-1") as client:
        yield client


def _escalate(producer: Client, **extra: Any) -> Any:
    body = escalation(subject=copy.deepcopy(PAYMENT), headline=copy.deepcopy(HEADLINE))
    body.update(extra)
    return producer.escalate(body)


def test_a_declared_headline_is_rendered_once_and_shown_in_the_task_view(
    producer: Client, reviewer: Client
) -> None:
    created = _escalate(producer)
    assert created.status_code == 201, created.text
    headline = created.json()["headline"]
    assert headline["title"] == "Release €12,500.00 to ACME Ltd"
    assert headline["revision"] == 1
    shown = [(f["label"], f["text"]) for f in headline["fields"]]
    assert shown == [
        ("Amount", "€12,500.00"),
        ("Payee", "ACME Ltd"),
        ("Value date", "December 24, 2026"),
    ]
    seen = reviewer.get(f"/tasks/{created.json()['id']}").json()["headline"]
    assert seen == headline


def test_a_task_without_a_headline_gets_one_from_its_reason_and_entity(producer: Client) -> None:
    body = escalation(entity_id="pay_50048", reason_code="SANCTIONS_NEAR_MATCH")
    body["entity_type"] = "payment"
    created = producer.escalate(body)
    assert created.status_code == 201, created.text
    headline = created.json()["headline"]
    assert headline["title"] == "Sanctions near match: payment pay_50048"
    assert headline["fields"] == []
    assert "0" * 16 not in headline["title"]


def test_a_pointer_that_does_not_resolve_is_refused_naming_it(producer: Client) -> None:
    broken = copy.deepcopy(HEADLINE)
    broken["fields"][1]["pointer"] = "/payee/nmae"
    broken["title"] = "Release {/amount} to {/beneficiary}"
    answer = _escalate(producer, headline=broken)
    assert answer.status_code == 422
    problem = answer.json()
    assert problem["error_code"] == "ERR_HEADLINE_FIELD"
    named = {(e["field"], e["message"]) for e in problem["errors"]}
    assert ("headline.fields[1]", "/payee/nmae does not resolve") in named
    assert ("headline.title", "/beneficiary does not resolve") in named


def test_a_value_its_type_cannot_show_is_refused(producer: Client) -> None:
    subject = copy.deepcopy(PAYMENT) | {"amount": "twelve thousand", "value_date": "soon"}
    answer = producer.escalate(escalation(subject=subject, headline=copy.deepcopy(HEADLINE)))
    assert answer.status_code == 422
    assert answer.json()["error_code"] == "ERR_HEADLINE_FIELD"
    fields = {e["field"]: e["message"] for e in answer.json()["errors"]}
    assert fields == {
        "headline.fields[0]": "/amount is not an amount",
        "headline.fields[2]": "/value_date is not an ISO 8601 date",
    }


@pytest.mark.parametrize(
    ("headline", "field"),
    [
        ({"title": "x", "fields": [{"label": "A", "pointer": "/a", "type": "money"}]}, "fields"),
        ({"title": "Pay {amount}"}, "headline.title"),
        ({"title": "x" * 201}, "headline.title"),
        ({"title": "Pay {/amount}", "extra": 1}, "headline"),
    ],
)
def test_a_malformed_headline_is_a_validation_error_naming_the_part(
    producer: Client, headline: dict[str, Any], field: str
) -> None:
    answer = _escalate(producer, headline=headline)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error_code"] == "ERR_VALIDATION"
    assert any(field in e["field"] for e in answer.json()["errors"]), answer.json()


def test_a_refused_headline_writes_nothing(producer: Client, server: LiveServer) -> None:
    broken = copy.deepcopy(HEADLINE) | {"title": "Release {/missing}"}
    body = escalation(subject=copy.deepcopy(PAYMENT), headline=broken)
    assert producer.escalate(body).status_code == 422
    assert producer.get(f"/tasks/{body['escalation_id']}").status_code == 404


def test_huge_values_and_markup_are_kept_as_clipped_text(producer: Client) -> None:
    subject = copy.deepcopy(PAYMENT)
    subject["payee"]["name"] = "<script>alert(1)</script>" + "A" * 5000
    created = _escalate(producer, subject=subject)
    assert created.status_code == 201, created.text
    headline = created.json()["headline"]
    payee = headline["fields"][1]["text"]
    assert payee.startswith("<script>alert(1)</script>AAA")
    assert len(payee) == 200
    assert payee.endswith("…")
    assert len(headline["title"]) <= 300


def test_a_new_revision_re_renders_the_headline_and_the_approval_names_it(
    producer: Client, reviewer: Client
) -> None:
    task = _escalate(producer).json()
    revised = copy.deepcopy(PAYMENT) | {"amount": 9800.5}
    answer = producer.put(
        f"/tasks/{task['id']}/subject", headers={"If-Match": '"1"'}, json={"subject": revised}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["headline"]["title"] == "Release €9,800.50 to ACME Ltd"
    assert answer.json()["headline"]["revision"] == 2
    claim = reviewer.claim(task["id"])
    token = claim.json()["lease_token"]
    decided = reviewer.resolve(
        task["id"],
        token,
        {
            "decision": "APPROVED",
            "notes": "payee checked",
            "revision": 2,
            "digest": answer.json()["digest"],
        },
    )
    assert decided.status_code == 200, decided.text
    view = decided.json()
    assert view["approved_revision"] == view["headline"]["revision"] == 2
    assert view["headline"]["title"] == "Release €9,800.50 to ACME Ltd"


def test_a_revision_that_loses_a_headline_value_is_refused_and_changes_nothing(
    producer: Client,
) -> None:
    task = _escalate(producer).json()
    revised = {k: v for k, v in PAYMENT.items() if k != "payee"}
    answer = producer.put(
        f"/tasks/{task['id']}/subject", headers={"If-Match": '"1"'}, json={"subject": revised}
    )
    assert answer.status_code == 422
    assert answer.json()["error_code"] == "ERR_HEADLINE_FIELD"
    after = producer.get(f"/tasks/{task['id']}").json()
    assert after["current_revision"] == 1
    assert after["headline"]["title"] == "Release €12,500.00 to ACME Ltd"


def test_the_inbox_search_finds_a_task_by_payee_and_by_amount_with_exact_counts(
    database_url: str,
) -> None:
    async def scenario(ctx: ServiceContext) -> None:
        for number in range(40):
            payee = "ACME Ltd" if number % 3 == 0 else f"Globex {number}"
            subject = copy.deepcopy(PAYMENT) | {"amount": 1000 + number}
            subject["payee"]["name"] = payee
            outcome = await escalate(
                ctx, PRODUCER, escalation(subject=subject, headline=copy.deepcopy(HEADLINE))
            )
            assert outcome.status_code == 201, outcome.body
        plain = copy.deepcopy(PAYMENT) | {"amount": 12500}
        await escalate(ctx, PRODUCER, escalation(subject=plain, headline=copy.deepcopy(HEADLINE)))

        async def found(words: str) -> tuple[int, int, list[Any]]:
            filters = InboxFilters(terms=search_terms(words))
            page = await inbox.page_of_view(ctx, SUE, View.AVAILABLE, filters, size=5)
            counts = await inbox.count_views(ctx, SUE, filters)
            return page.total, counts[View.AVAILABLE], page.tasks

        total, counted, tasks = await found("acme")
        assert total == counted == 15  # 14 of the 40, and the 12,500 one: never "5 of 5"
        assert len(tasks) == 5
        for words in ("12500", "€12,500.00", "12,500"):
            total, counted, tasks = await found(words)
            assert (total, counted) == (1, 1), words
            assert tasks[0].headline["title"] == "Release €12,500.00 to ACME Ltd"
        total, _, _ = await found("globex 1001")
        assert total == 1

    asyncio.run(_in_database(database_url, scenario))


async def _in_database(
    database_url: str, scenario: Callable[[ServiceContext], Awaitable[None]]
) -> None:
    settings = Settings(database_url=database_url)
    database = Database(create_engine(settings))
    try:
        await upgrade(database.engine)
        await scenario(ServiceContext(database=database, settings=settings, clock=SystemClock()))
    finally:
        await database.dispose()


def test_an_escalation_policy_gives_its_headline_to_tasks_that_declare_none(
    server: LiveServer, producer: Client
) -> None:
    policy = {
        "name": "payments",
        "levels": [{"after_seconds": 3600, "action": "expire"}],
        "headline": copy.deepcopy(HEADLINE),
    }
    with server.admin() as admin:
        bad = copy.deepcopy(policy) | {"name": "broken", "headline": {"title": "Pay {amount}"}}
        refused = admin.post("/escalation-policies", json=bad)
        assert refused.status_code == 422, refused.text
        assert refused.json()["errors"][0]["field"] == "headline.title"
        made = admin.post("/escalation-policies", json=policy)
        assert made.status_code == 201, made.text
        assert admin.get("/escalation-policies/payments").json()["headline"] == HEADLINE
    body = escalation(subject=copy.deepcopy(PAYMENT), policy="payments")
    created = producer.escalate(body)
    assert created.status_code == 201, created.text
    assert created.json()["headline"]["title"] == "Release €12,500.00 to ACME Ltd"
    own = {"title": "Pay {/payee/name}"}
    mine = producer.escalate(
        escalation(subject=copy.deepcopy(PAYMENT), policy="payments", headline=own)
    )
    assert mine.json()["headline"]["title"] == "Pay ACME Ltd"
    lacking = producer.escalate(escalation(subject={"note": "no amount"}, policy="payments"))
    assert lacking.status_code == 422
    assert lacking.json()["error_code"] == "ERR_HEADLINE_FIELD"
