"""The one headline formatter: money, dates, people, links and nested values, per locale."""

from __future__ import annotations

from typing import Any

import pytest

from signoff.domain.headline import (
    HeadlineSpec,
    KeyField,
    bind,
    default_headline,
    format_value,
    pick_locale,
    render,
)
from signoff.domain.inbox import search_text
from signoff.errors import Unprocessable

DOCUMENT: dict[str, Any] = {
    "amount": 12500,
    "currency": "EUR",
    "payee": {"name": "ACME Ltd"},
    "due": "2026-12-24",
    "at": "2026-12-24T15:30:00Z",
    "link": "https://erp.example/orders/7",
    "lines": [{"sku": "A-1", "qty": 2}],
}

SPEC = HeadlineSpec(
    title="Release {/amount} to {/payee/name}",
    fields=(
        KeyField("Amount", "/amount", "money", currency_pointer="/currency"),
        KeyField("Payee", "/payee", "person"),
        KeyField("Due", "/due", "date"),
        KeyField("Order", "/link", "link"),
        KeyField("Lines", "/lines", "text"),
    ),
)


@pytest.mark.parametrize(
    ("locale", "amount"),
    [("en", "€12,500.00"), ("de_DE", "12.500,00\xa0€"), ("fr_FR", "12\u202f500,00\xa0€")],
)
def test_money_has_its_currency_symbol_and_the_locales_separators(locale: str, amount: str) -> None:
    assert format_value("money", 12500, "EUR", locale) == amount


def test_dates_are_in_words_and_date_times_say_their_zone() -> None:
    assert format_value("date", "2026-12-24", None, "en") == "December 24, 2026"
    assert format_value("date", "2026-12-24", None, "de_DE") == "24. Dezember 2026"
    assert format_value("date", "2026-12-24T15:30:00Z", None, "en") == (
        "December 24, 2026, 3:30\u202fPM UTC"
    )


def test_a_bound_headline_renders_its_title_and_fields_in_any_locale() -> None:
    stored = bind(SPEC, DOCUMENT, 3)
    assert stored["title"] == "Release €12,500.00 to ACME Ltd"
    assert stored["revision"] == 3
    german = render(stored, "de_DE")
    assert german.title == "Release 12.500,00\xa0€ to ACME Ltd"
    assert dict(german.fields) == {
        "Amount": "12.500,00\xa0€",
        "Payee": "ACME Ltd",
        "Due": "24. Dezember 2026",
        "Order": "https://erp.example/orders/7",
        "Lines": '[{"sku": "A-1", "qty": 2}]',
    }
    assert german.links == {"Order": "https://erp.example/orders/7"}


def test_a_link_must_be_http_and_an_unknown_currency_is_refused() -> None:
    spec = HeadlineSpec(
        title="Open {/link}",
        fields=(
            KeyField("Order", "/link", "link"),
            KeyField("Amount", "/amount", "money", currency_pointer="/payee/name"),
        ),
    )
    with pytest.raises(Unprocessable) as refused:
        bind(spec, DOCUMENT | {"link": "javascript:alert(1)"}, None)
    assert refused.value.error_code == "ERR_HEADLINE_FIELD"
    assert {e.message for e in refused.value.errors} == {
        "/link is not an http(s) URL",
        "/payee/name is not an ISO 4217 currency",
    }


def test_the_default_headline_reads_as_words_never_a_hash() -> None:
    headline = default_headline("payment", "pay_50048", "SANCTIONS_NEAR_MATCH")
    assert headline["title"] == "Sanctions near match: payment pay_50048"
    assert render(headline, "de_DE").title == headline["title"]


def test_the_readers_locale_comes_from_accept_language() -> None:
    assert pick_locale("de-DE,de;q=0.9,en;q=0.8") == "de_DE"
    assert pick_locale("xx-YY, fr;q=0.5") == "fr"
    assert pick_locale(None) == "en"
    assert pick_locale("*") == "en"


def test_the_search_text_holds_the_headline_its_fields_and_their_plain_values() -> None:
    stored = bind(SPEC, DOCUMENT, 1)
    words = search_text("payment", "pay_1", "REVIEW", None, stored)
    for expected in ("release €12,500.00 to acme ltd", "12500", "payee", "december 24, 2026"):
        assert expected in words
