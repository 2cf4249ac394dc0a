"""Escalations generated from the contract's JSON Schema (hypothesis-jsonschema), sent to the
real HTTP server on SQLite and PostgreSQL.

Every generated instance is schema-valid. We fix up its precheck hash (so most are
accepted), sometimes make its ids unique, sometimes reuse an earlier escalation's key, id
or entity, and season it with U+0000, astral characters, huge, tiny and out-of-range
numbers and server-owned fields. :class:`EscalationModel` predicts the answer from
``docs/api.md``; the service must give exactly that answer (never a 5xx), and an accepted
escalation must read back byte-for-byte equal in meaning.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Iterator
from typing import Any

import rfc8785
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

from tests.property.escalation_model import (
    EXTENSION_FIELDS,
    INDEXED_TEXT,
    MAX_SAFE_INTEGER,
    READ_ONLY,
    SCHEMA,
    EscalationModel,
    Expected,
    compact_in_sent_order,
    jcs_hash,
    sha256_hex,
)
from tests.support import Client, LiveServer

EXAMPLES_PER_ENGINE = 100

valid_instances = from_schema(SCHEMA, custom_formats={"uuid": st.uuids().map(str)})
action_instances = from_schema(
    SCHEMA["properties"]["diagnostic_bundle"]["properties"]["attempted_actions"]["items"]
)

#: Strings the storage layers find interesting: U+0000, astral (4-byte UTF-8, surrogate
#: pairs when \\u-escaped), the last code point, line separators, combining marks.
edge_strings = st.sampled_from(
    ["\x00", "a\x00b", "😀", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "\U0010ffff", "\u2028\u2029", "e\u0301", "\\u0000", ""]
) | st.text(alphabet=st.characters(codec="utf-8"), max_size=20)
#: Numbers at the edges of what RFC 8785 represents, inside the allowed range.
edge_numbers = st.sampled_from(
    [
        1.7976931348623157e308,
        -1.7976931348623157e308,
        5e-324,
        -5e-324,
        2.2250738585072014e-308,
        1e21,
        1e-7,
        -0.0,
        2**53 - 1,
        -(2**53 - 1),
        0,
    ]
) | st.floats(allow_nan=False, allow_infinity=False)
#: Integers RFC 8785 cannot represent exactly (refused with ERR_VALIDATION).
out_of_range = st.sampled_from([2**53, -(2**53), 10**16 + 1, 10**30, -(10**100)])

edge_json = st.recursive(
    st.none() | st.booleans() | edge_numbers | edge_strings,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(edge_strings, children, max_size=4)
    ),
    max_leaves=12,
)


def one_in(n: int) -> st.SearchStrategy[bool]:
    """True with probability 1/n. ``False`` is the simplest choice (listed first), which
    Hypothesis favours while exploring, so rare seasonings stay rare."""
    return st.sampled_from([False] * (n - 1) + [True])


def nested(levels: int) -> Any:
    """A value ``levels`` levels deep: ``[[…[0]…]]``."""
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


def within_safe_integers(value: Any) -> Any:
    """``value`` with every integer beyond ±(2^53−1) folded into range: schema-generated
    integers are unbounded, and we want most examples to pass rule 1."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and abs(value) > MAX_SAFE_INTEGER:
        return value % MAX_SAFE_INTEGER * (1 if value > 0 else -1)
    if isinstance(value, dict):
        return {k: within_safe_integers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [within_safe_integers(v) for v in value]
    return value


@st.composite
def escalations(draw: st.DrawFn, model: EscalationModel, serials: Iterator[int]) -> dict[str, Any]:
    """A schema-generated escalation, adjusted as the module docstring says."""
    body: dict[str, Any] = draw(valid_instances)
    for name in EXTENSION_FIELDS:  # Hypothesis also draws names seen in the code under test
        body.pop(name, None)
    # Draw the same things whatever the model holds, so replays draw identically.
    mode = draw(st.sampled_from(["fresh"] * 4 + ["as generated", "reuse"]))
    reused = draw(st.sampled_from(["whole body", "idempotency_key", "escalation_id", "entity"]))
    pick = draw(st.integers(0, 2**16))
    # Hypothesis repeats drawn values on purpose; "fresh" ids must not collide.
    fresh = [uuid.uuid5(draw(st.uuids()), str(next(serials))) for _ in range(3)]
    replay = None
    if mode == "reuse" and model.accepted:
        earlier = model.accepted[pick % len(model.accepted)]
        event(f"reuse {reused}")
        if reused == "whole body":
            replay = json.loads(json.dumps(earlier))  # returned after the other draws
        elif reused == "entity":
            body["entity_type"], body["entity_id"] = earlier["entity_type"], earlier["entity_id"]
        else:
            body[reused] = earlier[reused]
    elif mode != "as generated":
        body["escalation_id"] = str(fresh[0])
        body["idempotency_key"] = fresh[1].hex + body["idempotency_key"][:100]
        body["entity_id"] = f"{body['entity_id'][:100]}#{fresh[2].hex}"
        # Schema-valid but refused by rule 5; "as generated" keeps such values.
        body["entity_type"] = body["entity_type"][:255] or "entity"
        body["reason_code"] = body["reason_code"][:255] or "REASON"
    body = within_safe_integers(body) if draw(one_in(4)) is False else body
    bundle = body["diagnostic_bundle"]
    if draw(st.booleans()):
        bundle["input_snapshot"]["edge"] = draw(edge_json)
    if draw(st.booleans()):
        bundle["evaluator_verdict"]["confidence_score"] = draw(edge_numbers)
    if bundle["attempted_actions"] and draw(st.booleans()):
        bundle["attempted_actions"][0]["result"] += draw(edge_strings)
    if draw(one_in(10)):
        bundle["input_snapshot"]["too_big"] = draw(out_of_range)
    if draw(one_in(15)):
        bundle["input_snapshot"]["deep"] = nested(draw(st.integers(60, 70)))
    if draw(one_in(10)):
        body[draw(st.sampled_from(list(INDEXED_TEXT)))] += draw(edge_strings)
    if draw(one_in(15)):
        body[draw(st.sampled_from(READ_ONLY))] = draw(edge_json)
    actions = bundle["attempted_actions"]
    if not actions and not draw(one_in(3)):
        actions.append(draw(action_instances))
    hashing = draw(st.sampled_from(["rfc8785"] * 4 + ["sent order", "as generated"]))
    try:
        if hashing == "rfc8785":
            body["precheck_hash"] = jcs_hash(actions)
        elif hashing == "sent order":
            body["precheck_hash"] = sha256_hex(compact_in_sent_order(actions))
    except rfc8785.CanonicalizationError:
        pass  # an integer out of range in an action: refused before the hash matters
    return replay if replay is not None else body


def encode(body: Any, style: str) -> bytes:
    """The request bytes: compact UTF-8, \\u-escaped ASCII, or indented with sorted keys
    (the fingerprint is over RFC 8785, so none of this may change the outcome)."""
    if style == "ascii":
        return json.dumps(body, ensure_ascii=True).encode()
    if style == "pretty":
        return json.dumps(body, ensure_ascii=False, indent=2, sort_keys=True).encode()
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def check(producer: Client, model: EscalationModel, raw: bytes) -> None:
    """Send one escalation and compare the answer with the model's prediction."""
    body = json.loads(raw)  # as sent: key order decides the sent-order precheck hash
    expected = model.expect(body)
    event(expected.rule)
    response = producer.post(
        "/tasks/escalate", content=raw, headers={"Content-Type": "application/json"}
    )
    assert response.status_code < 500, response.text
    assert response.status_code == expected.status, (expected, response.text)
    if expected.status == 201:
        assert_created(producer, model, body, expected, response.content)
        return
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["error_code"] == expected.error_code, (expected, problem)
    if expected.fields is not None:
        assert {e["field"] for e in problem["errors"]} == expected.fields, problem
    if expected.missing is not None:
        assert problem["missing_fields"] == list(expected.missing)
    if expected.task_id is not None:
        assert problem["task_id"] == expected.task_id


def assert_created(
    producer: Client, model: EscalationModel, body: Any, expected: Expected, content: bytes
) -> None:
    if expected.replay is not None:
        assert content == expected.replay
        return
    created = json.loads(content)
    assert created["id"] == created["task_id"] == expected.task_id
    assert created["status"] == "PENDING_REVIEW"
    assert created["version"] == 1
    for name in ("entity_type", "entity_id", "reason_code", "precheck_hash"):
        assert created[name] == body[name]
    assert created["diagnostic_bundle"] == body["diagnostic_bundle"]
    stored = producer.get(f"/tasks/{created['id']}")
    assert stored.status_code == 200
    assert stored.json()["diagnostic_bundle"] == body["diagnostic_bundle"]
    assert jcs_hash(stored.json()["diagnostic_bundle"]) == jcs_hash(body["diagnostic_bundle"])
    model.record_created(body, content)


def test_generated_escalations_get_exactly_the_documented_answer(server: LiveServer) -> None:
    model, serials = EscalationModel(), itertools.count()
    with server.new_client("producer") as producer:

        @settings(
            max_examples=EXAMPLES_PER_ENGINE,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
            # No shrinking: the server keeps what earlier examples wrote, so a shrunk
            # replay would meet another state; the first failing example is reported.
            phases=[Phase.explicit, Phase.reuse, Phase.generate],
            report_multiple_bugs=False,
        )
        @given(data=st.data(), style=st.sampled_from(["compact", "ascii", "pretty"]))
        def run(data: st.DataObject, style: str) -> None:
            body = data.draw(escalations(model, serials))
            check(producer, model, encode(body, style))

        run()
    # Most generated escalations are accepted, and the database agrees with the model.
    assert len(model.accepted) >= EXAMPLES_PER_ENGINE // 5
    assert server.count("review_tasks") == len(model.accepted)
    assert server.count("idempotency_keys") == len(model.accepted)
