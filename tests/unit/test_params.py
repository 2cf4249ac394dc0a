"""The one strict reader of hand-parsed values, and the places that read through it
without a request: a diff's field names, a receiver's ``Retry-After``, the lease cookie."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest

from signoff.console.wording import field_label
from signoff.domain.params import decode_token, number_or_none, whole_number
from signoff.domain.webhooks import MAX_RETRY_AFTER_SECONDS, parse_retry_after
from signoff.errors import Unprocessable

ODD = ["²", "٣", "１", "+1", "-1", " 1", "1.0", "", "9" * 5000, str(2**31)]


@pytest.mark.parametrize("raw", ODD)
def test_odd_numbers_are_no_numbers(raw: str) -> None:
    assert number_or_none(raw) is None


@pytest.mark.parametrize("raw", [r for r in ODD if r])
def test_a_strict_number_names_its_field(raw: str) -> None:
    with pytest.raises(Unprocessable) as refused:
        whole_number(raw, field="revision")
    assert [e.field for e in refused.value.errors] == ["revision"]


def test_numbers_in_ascii_digits_are_read_up_to_their_bound() -> None:
    assert number_or_none("0") == 0
    assert number_or_none(str(2**31 - 1)) == 2**31 - 1
    assert number_or_none("100", most=99) is None
    assert whole_number("", field="x") is None


def test_tokens_too_deep_or_not_json_are_value_errors() -> None:
    deep = base64.urlsafe_b64encode(b"[" * 5000).decode().rstrip("=")
    for raw in [deep, "!!!", "é", base64.urlsafe_b64encode(b"\xff").decode()]:
        with pytest.raises(ValueError, match="not a token"):
            decode_token(raw)
    assert decode_token(base64.urlsafe_b64encode(b'{"a":1}').decode().rstrip("=")) == {"a": 1}


def test_a_diff_field_named_in_other_digits_is_a_name() -> None:
    assert field_label("/items/²/x") == "Items › ² › X"
    assert field_label("/items/0") == "Items › 1"


def test_a_retry_after_in_other_digits_is_ignored_and_a_huge_one_is_a_day() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert parse_retry_after("²", now) is None
    assert parse_retry_after("9" * 5000, now) == MAX_RETRY_AFTER_SECONDS
    assert parse_retry_after("30", now) == 30


@pytest.mark.parametrize("timestamp", ["²", "١٧٠٠٠٠٠٠٠٠", "9" * 5000, "+1700000000", ""])
def test_a_webhook_timestamp_in_odd_digits_fails_verification_not_the_receiver(
    timestamp: str,
) -> None:
    from signoff.client import WebhookVerificationFailed, verify_event
    from signoff.webhooks import WebhookVerificationError, new_secret, verify

    secret = new_secret()
    headers = {"webhook-id": "evt-1", "webhook-timestamp": timestamp, "webhook-signature": "v1,x"}
    with pytest.raises(WebhookVerificationFailed, match="webhook-timestamp"):
        verify_event(headers, b"{}", [secret])
    with pytest.raises(WebhookVerificationError, match="webhook-timestamp"):
        verify(headers, b"{}", secret)
