"""POST /tasks/escalate: the contract, deduplication and idempotency."""

from __future__ import annotations

import copy
import hashlib
import json
import uuid

import pytest

from signoff.domain.digests import canonical_json
from tests.support import LiveServer, escalation, example_escalation, precheck_hash


@pytest.fixture
def producer(server: LiveServer):  # type: ignore[no-untyped-def]
    with server.new_client("producer", "bot-1") as client:
        yield client


def assert_nothing_written(server: LiveServer) -> None:
    for table in ("review_tasks", "idempotency_keys", "task_events", "outbox_events"):
        assert server.count(table) == 0, table


def test_the_contract_example_is_accepted_as_is(server: LiveServer, producer) -> None:
    body = example_escalation()
    response = producer.escalate(body)
    assert response.status_code == 201, response.text
    task = response.json()
    assert task["task_id"] == task["id"] == body["escalation_id"]
    assert task["status"] == "PENDING_REVIEW"
    assert task["diagnostic_bundle"] == body["diagnostic_bundle"]
    assert task["producer_id"] == "bot-1"
    assert task["version"] == 1
    assert task["created_at"].endswith("Z")
    assert server.count("task_events", event_type="task.created") == 1
    assert server.count("outbox_events", event_type="task.created") == 1


def test_missing_context_proof_wins_over_other_validation_errors(
    server: LiveServer, producer
) -> None:
    body = escalation(escalation_id="not-a-uuid")
    body["diagnostic_bundle"]["attempted_actions"] = []
    del body["diagnostic_bundle"]["evaluator_verdict"]
    response = producer.escalate(body)
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["error_code"] == "ERR_INSUFFICIENT_CONTEXT_PROOF"
    assert problem["missing_fields"] == [
        "diagnostic_bundle.attempted_actions",
        "diagnostic_bundle.evaluator_verdict",
    ]
    assert_nothing_written(server)


def test_a_missing_bundle_is_insufficient_context_proof(producer) -> None:
    body = escalation()
    del body["diagnostic_bundle"]
    problem = producer.escalate(body).json()
    assert problem["error_code"] == "ERR_INSUFFICIENT_CONTEXT_PROOF"
    assert len(problem["missing_fields"]) == 2


def test_schema_violations_list_every_offending_field(server: LiveServer, producer) -> None:
    body = escalation(escalation_id="123", idempotency_key="short")
    body["diagnostic_bundle"]["attempted_actions"][0]["executed_at"] = "yesterday"
    body["diagnostic_bundle"]["evaluator_verdict"]["threshold"] = "high"
    del body["diagnostic_bundle"]["trace_id"]
    del body["reason_code"]
    response = producer.escalate(body)
    assert response.status_code == 422
    problem = response.json()
    assert problem["error_code"] == "ERR_VALIDATION"
    fields = {e["field"] for e in problem["errors"]}
    assert fields == {
        "escalation_id",
        "idempotency_key",
        "reason_code",
        "diagnostic_bundle.trace_id",
        "diagnostic_bundle.attempted_actions[0].executed_at",
        "diagnostic_bundle.evaluator_verdict.threshold",
    }
    assert_nothing_written(server)


def test_a_wrong_precheck_hash_is_refused(server: LiveServer, producer) -> None:
    response = producer.escalate(escalation(precheck_hash="0" * 64))
    assert response.status_code == 422
    assert response.json()["error_code"] == "ERR_PRECHECK_HASH_MISMATCH"
    assert_nothing_written(server)


def test_the_seed_era_hash_in_sent_key_order_is_accepted(producer) -> None:
    body = escalation()
    actions = [
        {"result": "timeout", "action": "retry", "executed_at": "2026-11-29T08:15:02Z", "n": 1.0}
    ]
    body["diagnostic_bundle"]["attempted_actions"] = actions
    as_javascript = (
        '[{"result":"timeout","action":"retry","executed_at":"2026-11-29T08:15:02Z","n":1}]'
    )
    seed_hash = hashlib.sha256(as_javascript.encode()).hexdigest()
    assert seed_hash != hashlib.sha256(canonical_json(actions)).hexdigest()
    body["precheck_hash"] = seed_hash
    assert producer.escalate(body).status_code == 201


def test_fields_the_server_owns_are_refused(server: LiveServer, producer) -> None:
    response = producer.escalate(escalation(status="RESOLVED", version=7, lease_token="x"))
    assert response.status_code == 422
    problem = response.json()
    assert problem["error_code"] == "ERR_READ_ONLY_FIELD"
    assert {e["field"] for e in problem["errors"]} == {"status", "version", "lease_token"}
    assert_nothing_written(server)


def test_a_second_active_task_for_the_entity_conflicts_and_names_the_first(
    server, producer
) -> None:
    first = producer.escalate(escalation("txn_1")).json()
    response = producer.escalate(escalation("txn_1"))
    assert response.status_code == 409
    assert response.json()["error_code"] == "ERR_TASK_CONFLICT"
    assert response.json()["task_id"] == first["id"]
    assert "an active task for transaction/txn_1 is already in the queue" in response.text
    assert server.count("review_tasks") == 1
    assert server.count("idempotency_keys") == 1


def test_the_same_escalation_id_with_another_key_conflicts(server, producer) -> None:
    body = escalation()
    assert producer.escalate(body).status_code == 201
    again = dict(body, idempotency_key="another-key-0000000001", entity_id="txn_other")
    response = producer.escalate(again)
    assert response.status_code == 409
    assert response.json() | {"task_id": body["escalation_id"]} == response.json()
    assert f"escalation {body['escalation_id']} already exists" in response.text
    assert server.count("review_tasks") == 1


def test_the_same_key_and_body_replays_the_first_response(server, producer) -> None:
    body = escalation()
    first = producer.escalate(body)
    # Key order and whitespace do not change the body's fingerprint.
    replay = producer.post(
        "/tasks/escalate",
        content=json.dumps(dict(reversed(list(body.items()))), indent=2),
        headers={"content-type": "application/json"},
    )
    assert replay.status_code == 201
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.content == first.content
    assert "Idempotent-Replayed" not in first.headers
    assert server.count("review_tasks") == 1
    assert server.count("task_events") == 1


def test_the_same_key_with_another_body_is_refused(server, producer) -> None:
    body = escalation()
    producer.escalate(body)
    other = escalation(idempotency_key=body["idempotency_key"])
    response = producer.escalate(other)
    assert response.status_code == 422
    assert response.json()["error_code"] == "ERR_IDEMPOTENCY_KEY_REUSED"
    assert server.count("review_tasks") == 1


def test_an_expired_idempotency_key_may_be_used_afresh(server, producer) -> None:
    body = escalation()
    producer.escalate(body)
    server.clock.advance(server.settings.idempotency_ttl_seconds - 1)
    other = escalation(idempotency_key=body["idempotency_key"])
    assert producer.escalate(other).json()["error_code"] == "ERR_IDEMPOTENCY_KEY_REUSED"
    server.clock.advance(1)
    response = producer.escalate(other)
    assert response.status_code == 201
    assert response.json()["id"] == other["escalation_id"]
    assert server.count("review_tasks") == 2
    assert server.count("idempotency_keys") == 1


def test_idempotency_keys_are_scoped_to_the_producer(server, producer) -> None:
    body = escalation()
    assert producer.escalate(body).status_code == 201
    with server.new_client("producer", "bot-2") as other_producer:
        other = escalation(idempotency_key=body["idempotency_key"])
        response = other_producer.escalate(other)
    assert response.status_code == 201
    assert "Idempotent-Replayed" not in response.headers


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ('{"n": NaN}', "n"),
        ('{"n": Infinity}', "n"),
        ('{"n": 1e400}', "n"),
        ('{"n": 9007199254740993}', "n"),
        ('{"n": -' + "9" * 5000 + "}", "n"),
        ('{"s": "\\ud800"}', "s"),
        ('{"k": 1, "k": 2}', "k"),
    ],
)
def test_values_rfc_8785_cannot_represent_are_refused_with_their_path(
    server, producer, raw, field
) -> None:
    body = escalation()
    text = json.dumps(body)[:-1] + ', "diagnostic_bundle_extra": ' + raw + "}"
    response = producer.post(
        "/tasks/escalate", content=text, headers={"content-type": "application/json"}
    )
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] == f"diagnostic_bundle_extra.{field}"
    assert_nothing_written(server)


def test_nul_characters_in_the_bundle_are_stored_and_returned_intact(server, producer) -> None:
    body = escalation()
    body["diagnostic_bundle"]["input_snapshot"] = {
        "memo": "a\u0000b",
        "emoji": "\U0001f600",
        "tiny": 5e-324,
    }
    response = producer.escalate(body)
    assert response.status_code == 201, response.text
    stored = producer.get(f"/tasks/{body['escalation_id']}").json()
    assert stored["diagnostic_bundle"]["input_snapshot"] == {
        "memo": "a\u0000b",
        "emoji": "\U0001f600",
        "tiny": 5e-324,
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("entity_id", "a\u0000b"),
        ("entity_id", ""),
        ("entity_type", "x" * 256),
        ("reason_code", "\u0000"),
    ],
)
def test_indexed_text_fields_are_bounded_and_nul_free(server, producer, field, value) -> None:
    response = producer.escalate(escalation(**{field: value}))
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == field
    assert_nothing_written(server)


def test_malformed_json_is_a_400(producer) -> None:
    response = producer.post(
        "/tasks/escalate", content=b'{"a": ', headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["error_code"] == "ERR_MALFORMED_JSON"


def test_bodies_over_one_mebibyte_are_refused(server, producer) -> None:
    body = escalation()
    body["diagnostic_bundle"]["input_snapshot"] = {"blob": "x" * (1024 * 1024)}
    response = producer.escalate(body)
    assert response.status_code == 413
    assert response.json()["error_code"] == "ERR_PAYLOAD_TOO_LARGE"
    assert_nothing_written(server)


def test_uppercase_uuids_name_the_same_task(producer) -> None:
    body = escalation()
    body["escalation_id"] = body["escalation_id"].upper()
    created = producer.escalate(body).json()
    assert created["id"] == str(uuid.UUID(body["escalation_id"]))
    assert producer.get(f"/tasks/{body['escalation_id']}").status_code == 200


def test_only_producers_escalate(server) -> None:
    with server.new_client("reviewer") as reviewer:
        response = reviewer.escalate(escalation())
    assert response.status_code == 403
    assert response.json()["error_code"] == "ERR_FORBIDDEN"


def test_the_stored_bundle_is_the_one_sent(server, producer) -> None:
    body = escalation()
    body["diagnostic_bundle"]["extra"] = {"nested": [1, 2.5, None, True]}
    producer.escalate(body)
    (row,) = server.rows("review_tasks")
    assert row["diagnostic_bundle"] == copy.deepcopy(body["diagnostic_bundle"])
    assert row["idempotency_key"] == body["idempotency_key"]


def test_nesting_deeper_than_the_limit_is_refused_with_its_path(server, producer) -> None:
    body = escalation()
    deep: object = "leaf"
    for _ in range(316):
        deep = [deep]
    body["diagnostic_bundle"]["attempted_actions"][0]["extra"] = deep
    response = producer.escalate(body)
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"].startswith(
        "diagnostic_bundle.attempted_actions[0].extra[0]"
    )
    assert "nested deeper" in response.json()["errors"][0]["message"]
    assert_nothing_written(server)


def test_reasonable_nesting_is_accepted(producer) -> None:
    body = escalation()
    deep: object = "leaf"
    for _ in range(50):
        deep = {"next": deep}
    body["diagnostic_bundle"]["attempted_actions"][0]["extra"] = deep
    body["precheck_hash"] = precheck_hash(body["diagnostic_bundle"]["attempted_actions"])
    assert producer.escalate(body).status_code == 201


@pytest.mark.parametrize("engine", ["postgresql"], indirect=True)
def test_a_replay_leaves_the_key_row_untouched(server, producer) -> None:
    """A replay only reads: the key's row is not even locked (``xmax`` stays 0), so the
    replay's transaction writes nothing to the WAL. (SQLite has no row locks.)"""
    from sqlalchemy import text

    from signoff.store.runtime.database import Database, create_engine
    from tests.support import run

    body = escalation()
    assert producer.escalate(body).status_code == 201
    assert producer.escalate(body).headers["Idempotent-Replayed"] == "true"

    async def xmax() -> list[str]:
        database = Database(create_engine(server.settings))
        try:
            async with database.transaction(write=False) as uow:
                rows = await uow.connection.execute(text("SELECT xmax::text FROM idempotency_keys"))
                return [row[0] for row in rows]
        finally:
            await database.dispose()

    assert run(xmax()) == ["0"]
