"""Broken escalations: every required field removed, every field's type swapped, formats
broken, on SQLite and PostgreSQL. Each must be a 422 naming exactly the broken field
(never a 5xx), and nothing may be written.

The mutations are enumerated exhaustively over the contract (so every field is covered on
every run); a Hypothesis test then swaps in arbitrary generated JSON of the wrong type.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.property.escalation_model import SCHEMA
from tests.support import Client, LiveServer, escalation

CONTEXT_PROOF = "ERR_INSUFFICIENT_CONTEXT_PROOF"
ACTIONS = "diagnostic_bundle.attempted_actions"
VERDICT = "diagnostic_bundle.evaluator_verdict"

#: A sample value of each JSON type.
SAMPLES: dict[str, Any] = {
    "null": None,
    "boolean": True,
    "integer": 7,
    "number": 1.5,
    "string": "text",
    "array": [],
    "object": {},
}


@dataclass(frozen=True)
class Mutation:
    """A change to a valid escalation and the documented refusal it must get."""

    name: str
    path: tuple[str | int, ...]
    value: Any  # REMOVE to delete the field
    error_code: str
    fields: frozenset[str]


REMOVE = object()


def dotted(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        out = f"{out}[{part}]" if isinstance(part, int) else (f"{out}.{part}" if out else part)
    return out or "(root)"


def contract_fields(
    schema: dict[str, Any], path: tuple[str | int, ...] = ()
) -> Iterator[tuple[tuple[str | int, ...], dict[str, Any], bool]]:
    """Every field the contract describes: ``(path, its schema, required?)``; array items
    appear as index 0 of the sample escalation."""
    required = set(schema.get("required", ()))
    for name, sub in schema.get("properties", {}).items():
        here = (*path, name)
        yield here, sub, name in required
        if sub.get("type") == "object":
            yield from contract_fields(sub, here)
        elif sub.get("type") == "array" and "items" in sub:
            yield (*here, 0), sub["items"], False
            yield from contract_fields(sub["items"], (*here, 0))


def accepts(schema: dict[str, Any], json_type: str) -> bool:
    declared = schema.get("type")
    return declared == json_type or (declared == "number" and json_type == "integer")


def context_proof_fields(path: tuple[str | int, ...], value: Any) -> frozenset[str] | None:
    """Rule 2 (docs/api.md): a missing/null bundle, actions or verdict, or empty actions,
    is refused as missing context proof before any other check."""
    empty_actions = path == ("diagnostic_bundle", "attempted_actions") and value == []
    if value is not REMOVE and value is not None and not empty_actions:
        return None
    if path == ("diagnostic_bundle",):
        return frozenset({ACTIONS, VERDICT})
    if path == ("diagnostic_bundle", "attempted_actions"):
        return frozenset({ACTIONS})
    if path == ("diagnostic_bundle", "evaluator_verdict"):
        return frozenset({VERDICT})
    return None


def expectation(name: str, path: tuple[str | int, ...], value: Any) -> Mutation:
    proof = context_proof_fields(path, value)
    if proof is not None:
        return Mutation(name, path, value, CONTEXT_PROOF, proof)
    return Mutation(name, path, value, "ERR_VALIDATION", frozenset({dotted(path)}))


def removals() -> Iterator[Mutation]:
    for path, _, required in contract_fields(SCHEMA):
        if required:
            yield expectation(f"remove {dotted(path)}", path, REMOVE)


def type_swaps() -> Iterator[Mutation]:
    yield from (expectation(f"root as {t}", (), v) for t, v in SAMPLES.items() if t != "object")
    for path, sub, _ in contract_fields(SCHEMA):
        for json_type, value in SAMPLES.items():
            if not accepts(sub, json_type):
                yield expectation(f"{dotted(path)} as {json_type}", path, value)


GOOD_ID = "3f6c2a8e-5b1d-4c7e-9a2f-1d8e7b6c5a40"
BROKEN_FORMATS: dict[tuple[str | int, ...], list[str]] = {
    ("escalation_id",): [
        "",
        "not-a-uuid",
        GOOD_ID[:-1],
        GOOD_ID + "0",
        GOOD_ID.replace("-", ""),
        "{" + GOOD_ID + "}",
        GOOD_ID.replace("a", "g"),
    ],
    ("diagnostic_bundle", "attempted_actions", 0, "executed_at"): [
        "",
        "yesterday",
        "2026-11-29",
        "2026-11-29T08:15:02",  # no offset
        "2026-02-30T08:15:02Z",
        "2026-11-29T24:00:01Z",
        "2026-11-29T08:61:02Z",
        "2026-11-29T08:15:02+25:00",
        "1764404102",
    ],
    ("precheck_hash",): [
        "",
        "A" * 64,  # uppercase hex
        "a" * 63,
        "a" * 65,
        "g" * 64,
        "sha256:" + "a" * 64,
    ],
    ("idempotency_key",): ["", "x" * 15],
}


def broken_formats() -> Iterator[Mutation]:
    for path, values in BROKEN_FORMATS.items():
        for value in values:
            yield expectation(f"{dotted(path)} = {value!r}", path, value)


def documented_rules() -> Iterator[Mutation]:
    """Rule 2's empty actions, then refusals after the schema (rules 4 and 5)."""
    yield expectation("empty attempted_actions", ("diagnostic_bundle", "attempted_actions"), [])
    for name in ("id", "status", "version", "lease_token", "decision", "created_at"):
        yield Mutation(f"send {name}", (name,), "x", "ERR_READ_ONLY_FIELD", frozenset({name}))
    for name in ("entity_type", "entity_id", "reason_code"):
        for value in ("", "x" * 256, "a\x00b"):
            yield Mutation(
                f"{name} = {value[:8]!r}…", (name,), value, "ERR_VALIDATION", frozenset({name})
            )
    for value in ("k" * 256, "k" * 20 + "\x00"):
        yield Mutation(
            f"idempotency_key = {value[:8]!r}…",
            ("idempotency_key",),
            value,
            "ERR_VALIDATION",
            frozenset({"idempotency_key"}),
        )


def all_mutations() -> list[Mutation]:
    return [*removals(), *type_swaps(), *broken_formats(), *documented_rules()]


def mutate(body: dict[str, Any], path: tuple[str | int, ...], value: Any) -> Any:
    if not path:
        return value
    body = copy.deepcopy(body)
    parent: Any = body
    for part in path[:-1]:
        parent = parent[part]
    if value is REMOVE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return body


def refusal_problem(producer: Client, body: Any, mutation: Mutation) -> str | None:
    """Send ``body``; ``None`` if the answer is the expected refusal, else what was wrong."""
    response = producer.post(
        "/tasks/escalate",
        content=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    if response.status_code != 422:
        return f"{mutation.name}: {response.status_code} {response.text[:300]}"
    problem = response.json()
    fields = {e["field"] for e in problem.get("errors") or ()}
    if problem["error_code"] != mutation.error_code or fields != mutation.fields:
        return f"{mutation.name}: {problem['error_code']} {sorted(fields)}"
    if mutation.error_code == CONTEXT_PROOF and set(problem["missing_fields"]) != mutation.fields:
        return f"{mutation.name}: missing_fields {problem['missing_fields']}"
    return None


def test_every_mutation_is_refused_with_its_field(server: LiveServer) -> None:
    mutations = all_mutations()
    assert len(mutations) > 150  # the enumeration really covers the contract
    with server.new_client("producer") as producer:
        problems = [
            refusal_problem(producer, mutate(escalation(), m.path, m.value), m) for m in mutations
        ]
    assert [p for p in problems if p] == []
    for table in ("review_tasks", "idempotency_keys", "task_events", "outbox_events"):
        assert server.count(table) == 0, table


def test_two_broken_fields_are_both_reported(server: LiveServer) -> None:
    body = escalation()
    del body["entity_type"]
    body["diagnostic_bundle"]["attempted_actions"][1]["executed_at"] = "soon"
    body["diagnostic_bundle"]["evaluator_verdict"]["threshold"] = "high"
    with server.new_client("producer") as producer:
        response = producer.escalate(body)
    assert response.status_code == 422
    assert {e["field"] for e in response.json()["errors"]} == {
        "entity_type",
        "diagnostic_bundle.attempted_actions[1].executed_at",
        "diagnostic_bundle.evaluator_verdict.threshold",
    }


#: Texts without NUL and lone surrogates: those are refused by the text guard and the
#: strict parser before the contract is checked, at the text's own path inside the
#: value (``escalation_id[0]``), which tests/integration/test_text_guard.py and
#: tests/unit/test_json_input.py hold; here the wrong *type* must be what is refused.
PLAIN = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
plain_text = st.text(alphabet=PLAIN, max_size=10)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | plain_text,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text(alphabet=PLAIN, max_size=5), children, max_size=3)
    ),
    max_leaves=8,
) | st.floats(allow_nan=False, allow_infinity=False)


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


FIELDS = [(path, sub) for path, sub, _ in contract_fields(SCHEMA)]


def wrong_values(field: tuple[tuple[str | int, ...], dict[str, Any]]) -> st.SearchStrategy[Any]:
    """Generated JSON values the field's schema type does not accept."""
    path, sub = field
    return json_values.filter(
        lambda v: (
            not accepts(sub, json_type(v)) and not (path[-1] == "attempted_actions" and v == [])
        )
    )


def test_generated_wrong_types_are_refused_with_their_field(server: LiveServer) -> None:
    sent = []
    with server.new_client("producer") as producer:

        @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(data=st.data(), field=st.sampled_from(FIELDS))
        def run(data: st.DataObject, field: tuple[tuple[str | int, ...], dict[str, Any]]) -> None:
            path = field[0]
            value = data.draw(wrong_values(field))
            mutation = expectation(f"{dotted(path)} = {value!r}", path, value)
            assert refusal_problem(producer, mutate(escalation(), path, value), mutation) is None
            sent.append(mutation)

        run()
    assert len(sent) >= 50  # every example was a real mutation, sent and refused
    assert server.count("review_tasks") == 0
