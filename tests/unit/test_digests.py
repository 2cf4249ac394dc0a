"""RFC 8785 digests and the precheck hash in sent order."""

from __future__ import annotations

import hashlib
import json

import pytest
import rfc8785

from signoff.domain.digests import (
    canonical_json,
    compact_json_in_sent_order,
    json_digest,
    precheck_hash_matches,
)


@pytest.mark.parametrize(
    ("value", "canonical"),
    [
        (1.0, b"1"),
        (1e21, b"1e+21"),
        (1e20, b"100000000000000000000"),
        (-0.0, b"0"),
        ({"\ue000": 1, "\U00010000": 2}, '{"\U00010000":2,"\ue000":1}'.encode()),
        ({"b": [1, {"d": 2, "c": 3}], "a": "x"}, b'{"a":"x","b":[1,{"c":3,"d":2}]}'),
    ],
)
def test_canonical_json_matches_rfc_8785_where_sorted_json_dumps_differs(value, canonical) -> None:
    assert canonical_json(value) == canonical == rfc8785.dumps(value)


def test_python_sorted_dumps_really_differs_on_those_vectors() -> None:
    for value in (1.0, 1e20, -0.0, {"\ue000": 1, "\U00010000": 2}):
        assert json.dumps(value, sort_keys=True, separators=(",", ":")).encode() != canonical_json(
            value
        )


def test_a_string_and_a_number_have_different_digests() -> None:
    assert json_digest("7") != json_digest(7)


def test_key_order_and_whitespace_never_change_a_digest() -> None:
    a = json.loads('{"a": 1, "b": [true, null, 2.50]}')
    b = json.loads('{ "b":[true,null,2.5],\n "a":1 }')
    assert json_digest(a) == json_digest(b)


def test_compact_json_in_sent_order_is_what_javascript_stringify_gives() -> None:
    value = json.loads('{"z": 1.0, "a": [1e21, "é\\n", -0.0], "m": {"y": null, "b": true}}')
    assert (
        compact_json_in_sent_order(value)
        == b'{"z":1,"a":[1e+21,"\xc3\xa9\\n",0],"m":{"y":null,"b":true}}'
    )


def test_the_contract_example_uses_the_canonical_hash() -> None:
    from tests.support import example_escalation

    body = example_escalation()
    actions = body["diagnostic_bundle"]["attempted_actions"]
    assert body["precheck_hash"] == hashlib.sha256(canonical_json(actions)).hexdigest()
    assert precheck_hash_matches(actions, body["precheck_hash"])
    assert not precheck_hash_matches(actions, "0" * 64)


# --- the compiled fast path (orjson) against the reference (rfc8785) -------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_floats = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [0.1, 1e-7, 1e-6, 3.39246939e-06, 1e-5, 123.456, 1e21, 1e20, 1.5e15, 2.5e-300, 5e-324]
)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | _floats
    | st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=12)
)
_keys = st.text(max_size=6) | st.text(alphabet=st.characters(max_codepoint=127), max_size=6)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=4),
    max_leaves=12,
)


def _sent_order_reference(value: object) -> bytes:
    """JSON.stringify by definition: keys as given, every scalar as RFC 8785 writes it."""
    if isinstance(value, dict):
        return (
            b"{"
            + b",".join(
                bytes(rfc8785.dumps(k)) + b":" + _sent_order_reference(v) for k, v in value.items()
            )
            + b"}"
        )
    if isinstance(value, list):
        return b"[" + b",".join(_sent_order_reference(v) for v in value) + b"]"
    return bytes(rfc8785.dumps(value))


@settings(max_examples=400, deadline=None)
@given(value=_values)
def test_canonical_json_is_byte_for_byte_rfc8785(value: object) -> None:
    assert canonical_json(value) == bytes(rfc8785.dumps(value))


@settings(max_examples=400, deadline=None)
@given(value=_values)
def test_the_sent_order_form_is_json_stringify(value: object) -> None:
    assert compact_json_in_sent_order(value) == _sent_order_reference(value)
