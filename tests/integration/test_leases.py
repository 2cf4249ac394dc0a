"""Claims, leases and resolution under a live lease."""

from __future__ import annotations

import uuid

import pytest

from tests.support import Client, LiveServer, escalation


@pytest.fixture
def producer(server: LiveServer):  # type: ignore[no-untyped-def]
    with server.new_client("producer", "bot-1") as client:
        yield client


@pytest.fixture
def alice(server: LiveServer):  # type: ignore[no-untyped-def]
    with server.new_client("reviewer", "alice") as client:
        yield client


@pytest.fixture
def bob(server: LiveServer):  # type: ignore[no-untyped-def]
    with server.new_client("reviewer", "bob") as client:
        yield client


def new_task(producer: Client, **overrides: object) -> str:
    response = producer.escalate(escalation(**overrides))
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def test_a_claim_grants_a_lease_with_a_fresh_token(server: LiveServer, producer, alice) -> None:
    task_id = new_task(producer)
    response = alice.claim(task_id, operator_id="alice")
    assert response.status_code == 200
    grant = response.json()
    assert grant["id"] == task_id
    assert grant["status"] == "CLAIMED"
    assert grant["claimed_by"] == "alice"
    assert grant["version"] == 2
    assert uuid.UUID(grant["lease_token"])
    lease_seconds = server.settings.lease_seconds
    expected = server.clock.now().timestamp() + lease_seconds
    from datetime import datetime

    assert datetime.fromisoformat(grant["lease_expires_at"]).timestamp() == pytest.approx(expected)
    # The token is shown only in the claim response, and stored only as a hash.
    assert "lease_token" not in alice.get(f"/tasks/{task_id}").json()
    (row,) = server.rows("review_tasks")
    assert grant["lease_token"] not in str(row)


def test_a_live_claim_cannot_be_claimed_by_someone_else(producer, alice, bob) -> None:
    task_id = new_task(producer)
    alice.claim(task_id)
    response = bob.claim(task_id)
    assert response.status_code == 409
    assert response.json()["error_code"] == "ERR_STATE_CONFLICT"
    # (The holder claiming again gets a fresh token: tests/integration/test_claims.py.)


def test_claiming_an_unknown_or_malformed_id_is_not_found(alice) -> None:
    for task_id in (str(uuid.uuid4()), "not-a-uuid"):
        response = alice.claim(task_id)
        assert response.status_code == 404
        assert response.json()["error_code"] == "ERR_TASK_NOT_FOUND"


def test_an_operator_id_must_name_the_caller(producer, alice) -> None:
    task_id = new_task(producer)
    response = alice.claim(task_id, operator_id="bob")
    assert response.status_code == 403
    assert response.json()["error_code"] == "ERR_OPERATOR_MISMATCH"


def test_producers_cannot_claim(producer) -> None:
    task_id = new_task(producer)
    assert producer.claim(task_id).status_code == 403


def test_claim_next_takes_the_oldest_and_answers_204_when_empty(
    server, producer, alice, bob
) -> None:
    first = new_task(producer)
    server.clock.advance(1)
    second = new_task(producer)
    assert alice.post("/tasks/claim-next").json()["id"] == first
    assert bob.post("/tasks/claim-next", json={}).json()["id"] == second
    empty = alice.post("/tasks/claim-next")
    assert empty.status_code == 204
    assert empty.content == b""


def test_claim_next_honours_its_filters(server, producer, alice) -> None:
    new_task(producer, entity_type="transaction")
    server.clock.advance(1)
    wanted = new_task(producer, entity_type="invoice", reason_code="LOW_CONFIDENCE")
    response = alice.post(
        "/tasks/claim-next", json={"entity_type": "invoice", "reason_code": "LOW_CONFIDENCE"}
    )
    assert response.json()["id"] == wanted
    assert alice.post("/tasks/claim-next", json={"entity_type": "invoice"}).status_code == 204


def test_claim_next_takes_over_a_lapsed_lease(server, producer, alice, bob) -> None:
    task_id = new_task(producer)
    alice.claim(task_id)
    assert bob.post("/tasks/claim-next").status_code == 204
    server.clock.advance(server.settings.lease_seconds)
    grant = bob.post("/tasks/claim-next").json()
    assert grant["id"] == task_id
    assert grant["claimed_by"] == "bob"


def test_renew_and_release_need_the_lease_token_header(producer, alice) -> None:
    task_id = new_task(producer)
    alice.claim(task_id)
    for response in (
        alice.renew(task_id, None),
        alice.release(task_id, None),
        alice.resolve(task_id, None),
    ):
        assert response.status_code == 400
        assert response.json()["error_code"] == "ERR_LEASE_TOKEN_REQUIRED"


def test_renew_extends_the_lease_from_now(server, producer, alice) -> None:
    task_id = new_task(producer)
    token = alice.claim(task_id).json()["lease_token"]
    server.clock.advance(600)
    renewed = alice.renew(task_id, token)
    assert renewed.status_code == 200
    server.clock.advance(600)  # past the first lease, within the renewed one
    assert alice.get(f"/tasks/{task_id}").json()["status"] == "CLAIMED"
    assert alice.resolve(task_id, token).status_code == 200


def test_only_the_current_token_renews(producer, alice) -> None:
    task_id = new_task(producer)
    alice.claim(task_id)
    response = alice.renew(task_id, str(uuid.uuid4()))
    assert response.status_code == 409
    assert response.json()["error_code"] == "ERR_LEASE_LOST"


def test_another_principal_presenting_the_token_gets_nothing(producer, alice, bob) -> None:
    task_id = new_task(producer)
    token = alice.claim(task_id).json()["lease_token"]
    response = bob.resolve(task_id, token)
    # The same answer as a wrong token: a non-holder learns nothing about the token.
    assert response.status_code == 409
    assert response.json()["error_code"] == "ERR_LEASE_LOST"
    assert bob.renew(task_id, token).json()["error_code"] == "ERR_LEASE_LOST"
    assert alice.get(f"/tasks/{task_id}").json()["claimed_by"] == "alice"


def test_release_returns_the_task_to_the_queue(server, producer, alice, bob) -> None:
    task_id = new_task(producer)
    token = alice.claim(task_id).json()["lease_token"]
    released = alice.release(task_id, token)
    assert released.status_code == 200
    assert released.json()["status"] == "PENDING_REVIEW"
    assert released.json()["claimed_by"] is None
    assert alice.renew(task_id, token).json()["error_code"] == "ERR_LEASE_LOST"
    assert bob.claim(task_id).status_code == 200
    assert server.count("outbox_events", event_type="task.released") == 1


def test_resolve_records_the_decision(server, producer, alice) -> None:
    task_id = new_task(producer)
    token = alice.claim(task_id).json()["lease_token"]
    body = {
        "decision": "REJECTED",
        "notes": "Transaction format anomaly violates rule AML-04.",
        "resolution_payload": {"override_action": "BLOCK_TRANSACTION", "freeze_account": False},
        "operator_id": "alice",
    }
    response = alice.resolve(task_id, token, body)
    assert response.status_code == 200, response.text
    task = response.json()
    assert task["status"] == "RESOLVED"
    assert task["decision"] == "REJECTED"
    assert task["notes"] == body["notes"]
    assert task["resolution_payload"] == body["resolution_payload"]
    assert task["operator_id"] == "alice"
    assert task["resolved_at"] == server.clock.now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    (event,) = server.rows("outbox_events", event_type="task.resolved")
    assert event["payload"]["type"] == "task.resolved"
    # Events carry the producer's metadata too (reviewers' views do not).
    assert event["payload"]["data"] == task | {"metadata": None}


def test_resolve_after_the_lease_lapsed_needs_an_explicit_renewal(server, producer, alice) -> None:
    task_id = new_task(producer)
    token = alice.claim(task_id).json()["lease_token"]
    server.clock.advance(server.settings.lease_seconds)
    refused = alice.resolve(task_id, token)
    assert refused.status_code == 409
    assert refused.json()["error_code"] == "ERR_LEASE_EXPIRED"
    assert alice.get(f"/tasks/{task_id}").json()["decision"] is None
    assert alice.renew(task_id, token).status_code == 200
    assert alice.resolve(task_id, token).status_code == 200


def test_a_lapsed_lease_taken_over_leaves_only_the_second_decision(
    server, producer, alice, bob
) -> None:
    task_id = new_task(producer)
    first_token = alice.claim(task_id).json()["lease_token"]
    server.clock.advance(server.settings.lease_seconds + 1)
    second_token = bob.claim(task_id).json()["lease_token"]
    assert second_token != first_token
    assert alice.renew(task_id, first_token).json()["error_code"] == "ERR_LEASE_LOST"
    approve = {"decision": "APPROVED", "notes": "alice says yes"}
    assert alice.resolve(task_id, first_token, approve).json()["error_code"] == "ERR_LEASE_LOST"
    assert (
        bob.resolve(
            task_id, second_token, {"decision": "REJECTED", "notes": "bob says no"}
        ).status_code
        == 200
    )
    final = bob.get(f"/tasks/{task_id}").json()
    assert (final["decision"], final["notes"], final["operator_id"]) == (
        "REJECTED",
        "bob says no",
        "bob",
    )
    assert server.count("task_events", event_type="task.resolved") == 1


def test_repeating_the_identical_resolve_returns_the_same_result_once(
    server, producer, alice
) -> None:
    task_id = new_task(producer)
    token = alice.claim(task_id).json()["lease_token"]
    first = alice.resolve(task_id, token)
    server.clock.advance(5)
    again = alice.resolve(task_id, token)
    assert again.status_code == 200
    assert again.json() == first.json()
    assert server.count("task_events", event_type="task.resolved") == 1
    other = alice.resolve(task_id, token, {"decision": "APPROVED"})
    assert other.status_code == 409


@pytest.mark.parametrize(
    "body",
    [
        {"decision": "MAYBE"},
        {"decision": "APPROVED", "notes": 5},
        {"decision": "APPROVED", "colour": "red"},
        {"decision": "APPROVED", "notes": "a\u0000b"},
        {"notes": "no decision"},
    ],
)
def test_a_malformed_resolve_is_refused_and_changes_nothing(server, producer, alice, body) -> None:
    task_id = new_task(producer)
    token = alice.claim(task_id).json()["lease_token"]
    response = alice.resolve(task_id, token, body)
    assert response.status_code == 422
    assert response.json()["errors"]
    assert alice.get(f"/tasks/{task_id}").json()["status"] == "CLAIMED"


def test_a_lapsed_claim_is_shown_and_filtered_as_pending(server, producer, alice) -> None:
    task_id = new_task(producer)
    alice.claim(task_id)
    assert [t["id"] for t in alice.get("/tasks", params={"status": "CLAIMED"}).json()["items"]] == [
        task_id
    ]
    server.clock.advance(server.settings.lease_seconds)
    shown = alice.get(f"/tasks/{task_id}").json()
    assert (shown["status"], shown["claimed_by"], shown["lease_expires_at"]) == (
        "PENDING_REVIEW",
        None,
        None,
    )
    assert alice.get("/tasks", params={"status": "CLAIMED"}).json()["items"] == []
    assert [
        t["id"] for t in alice.get("/tasks", params={"status": "PENDING_REVIEW"}).json()["items"]
    ] == [task_id]


def test_every_transition_is_in_the_audit_trail_with_its_outbox_event(
    server, producer, alice
) -> None:
    task_id = new_task(producer)
    token = alice.claim(task_id).json()["lease_token"]
    alice.renew(task_id, token)
    alice.release(task_id, token)
    token = alice.claim(task_id).json()["lease_token"]
    alice.resolve(task_id, token)
    trail = alice.get(f"/tasks/{task_id}/events").json()["items"]
    assert [(e["type"], e["actor_id"], e["version"]) for e in trail] == [
        ("task.created", "bot-1", 1),
        ("task.claimed", "alice", 2),
        ("task.lease_renewed", "alice", 3),
        ("task.released", "alice", 4),
        ("task.claimed", "alice", 5),
        ("task.resolved", "alice", 6),
    ]
    outbox = [
        e["event_type"]
        for e in sorted(server.rows("outbox_events"), key=lambda r: r["payload"]["data"]["version"])
    ]
    assert outbox == [
        "task.created",
        "task.claimed",
        "task.released",
        "task.claimed",
        "task.resolved",
    ]
