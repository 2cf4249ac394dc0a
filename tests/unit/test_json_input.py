"""Strict JSON parsing of request bodies."""

from __future__ import annotations

import pytest

from signoff.domain.json_input import MAX_SAFE_INTEGER, parse_json_strict
from signoff.errors import BadRequest, Unprocessable


def test_plain_json_parses() -> None:
    assert parse_json_strict(b'{"a": [1, 2.5, "\\u0000", null]}') == {"a": [1, 2.5, "\x00", None]}


def test_the_largest_safe_integers_are_accepted() -> None:
    assert parse_json_strict(str(MAX_SAFE_INTEGER).encode()) == MAX_SAFE_INTEGER
    assert parse_json_strict(str(-MAX_SAFE_INTEGER).encode()) == -MAX_SAFE_INTEGER


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'{"a": {"b": [0, NaN]}}', "a.b[1]"),
        (b"[-Infinity]", "[0]"),
        (b'{"a": 9007199254740992}', "a"),
        (b'{"a": 1e309}', "a"),
        (b'{"a": "\\udc00"}', "a"),
        (b'{"\\ud800x": 1}', "(root)"),
        (b'{"a": 1, "a": 1}', "a"),
    ],
)
def test_values_outside_rfc_8785_are_refused_with_their_path(raw: bytes, field: str) -> None:
    with pytest.raises(Unprocessable) as caught:
        parse_json_strict(raw)
    assert caught.value.error_code == "ERR_VALIDATION"
    assert caught.value.errors[0].field == field


@pytest.mark.parametrize("raw", [b"", b"{", b"\xff\xfe"])
def test_what_is_not_json_is_malformed(raw: bytes) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_json_strict(raw)
    assert caught.value.error_code == "ERR_MALFORMED_JSON"


@pytest.mark.parametrize("raw", [b"[" * 100_000, b"[" * 5_000 + b"]" * 5_000])
def test_nesting_far_deeper_than_the_limit_is_a_validation_error(raw: bytes) -> None:
    # The parser gives up on depth before it could see whether the brackets close.
    with pytest.raises(Unprocessable) as caught:
        parse_json_strict(raw)
    assert caught.value.error_code == "ERR_VALIDATION"
    assert "deeper than" in caught.value.errors[0].message
