"""The compiled contract validator (jsonschema-rs) never accepts what jsonschema refuses.

The escalation path trusts the compiled validator's "valid" and asks jsonschema to
judge and describe everything else, so the answers stay jsonschema's as long as every
body the compiled one accepts, jsonschema accepts too. (The other way round is harmless:
jsonschema then has the last word. It happens: Python's ``$`` in the precheck hash's
``pattern`` also matches before a final newline, ECMA 262's does not; such a hash then
fails the precheck-hash comparison instead.) Checked on generated valid bodies (both
must accept), on bodies with any field swapped for arbitrary JSON, and on hand-picked
format edges.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

from signoff.domain.escalation import _fast_validator, _validator, contract_schema

EXAMPLE = json.loads(
    (Path(__file__).parents[1] / "data" / "example-escalation.json").read_text("utf-8")
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=80),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)


def same_verdict(body: Any) -> None:
    """The fast validator's "valid" implies jsonschema's."""
    if _fast_validator().is_valid(body):
        assert not list(_validator().iter_errors(body)), body


def leaf_paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    paths = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            paths += leaf_paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            paths += leaf_paths(item, (*path, index))
    return paths


def replaced(body: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    out = copy.deepcopy(body)
    target = out
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return out


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=from_schema(contract_schema(), custom_formats={"uuid": st.uuids().map(str)}))
def test_generated_valid_bodies(body: Any) -> None:
    assert _fast_validator().is_valid(body)
    assert not list(_validator().iter_errors(body))


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(path=st.sampled_from(leaf_paths(EXAMPLE)), value=json_values)
def test_any_field_swapped_for_arbitrary_json(path: tuple[Any, ...], value: Any) -> None:
    same_verdict(replaced(EXAMPLE, path, value))


UUID_PATH = ("escalation_id",)
TIME_PATH = ("diagnostic_bundle", "attempted_actions", 0, "executed_at")
HASH_PATH = ("precheck_hash",)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (UUID_PATH, "3F6C2A8E-5B1D-4C7E-9A2F-1D8E7B6C5A40"),
        (UUID_PATH, "3f6c2a8e5b1d4c7e9a2f1d8e7b6c5a40"),
        (UUID_PATH, "{3f6c2a8e-5b1d-4c7e-9a2f-1d8e7b6c5a40}"),
        (UUID_PATH, "urn:uuid:3f6c2a8e-5b1d-4c7e-9a2f-1d8e7b6c5a40"),
        (UUID_PATH, "3f6c2a8e-5b1d-4c7e-9a2f-1d8e7b6c5a4"),
        (UUID_PATH, "3f6c2a8e-5b1d-4c7e-9a2f-1d8e7b6c5a40\n"),
        (TIME_PATH, "2026-11-29T08:15:02z"),
        (TIME_PATH, "2026-11-29t08:15:02Z"),
        (TIME_PATH, "2026-11-29 08:15:02Z"),
        (TIME_PATH, "2026-11-29T08:15:02"),
        (TIME_PATH, "2026-11-29T08:15:02.123456789+05:30"),
        (TIME_PATH, "2026-02-30T08:15:02Z"),
        (TIME_PATH, "2026-11-29T24:00:00Z"),
        (TIME_PATH, "2026-11-29T23:59:60Z"),
        (TIME_PATH, "2026-11-29T08:15:02Z\n"),
        (HASH_PATH, EXAMPLE["precheck_hash"] + "\n"),
        (HASH_PATH, EXAMPLE["precheck_hash"].upper()),
        (("idempotency_key",), "x" * 15),
        (("idempotency_key",), "é" * 16),
        (("diagnostic_bundle", "evaluator_verdict", "threshold"), True),
        (("diagnostic_bundle", "evaluator_verdict", "threshold"), 1),
        (("diagnostic_bundle", "evaluator_verdict", "threshold"), 10**30),
    ],
)
def test_edges(path: tuple[Any, ...], value: Any) -> None:
    same_verdict(replaced(EXAMPLE, path, value))
