"""Supervisors stepping in: force release, reassign (API), on both engines."""

from __future__ import annotations

import uuid

from tests.support import Client, LiveServer, escalation, example_resolve


def _task(producer: Client, **extra: object) -> str:
    response = producer.escalate(escalation(**extra))
    assert response.status_code == 201, response.text
    return str(response.json()["task_id"])


def test_a_supervisor_force_releases_a_lease_and_the_holders_token_stops_working(
    server: LiveServer,
) -> None:
    producer = server.new_client("producer", "bot")
    alice = server.new_client("reviewer", "alice")
    sue = server.new_client("supervisor", "sue")
    task_id = _task(producer)
    token = alice.claim(task_id).json()["lease_token"]

    response = sue.post(f"/tasks/{task_id}/force-release", json={"holder": "alice"})
    assert response.status_code == 200, response.text
    assert (response.json()["status"], response.json()["claimed_by"]) == ("PENDING_REVIEW", None)

    assert alice.renew(task_id, token).json()["error_code"] == "ERR_LEASE_LOST"
    refused = alice.resolve(task_id, token, example_resolve() | {"operator_id": "alice"})
    assert refused.json()["error_code"] == "ERR_LEASE_LOST"
    (audit,) = [
        e
        for e in server.rows("task_events", task_id=uuid.UUID(task_id))
        if e["action"] == "force_release"
    ]
    assert (audit["actor_id"], audit["event_type"]) == ("sue", "task.released")
    assert audit["details"] == {"forced": True, "previous_holder": "alice"}
    assert server.count("outbox_events", event_type="task.released") == 1
    assert alice.claim(task_id).status_code == 200  # back in the queue


def test_force_release_is_for_supervisors_and_admins_and_only_on_a_claimed_task(
    server: LiveServer,
) -> None:
    producer = server.new_client("producer", "bot")
    alice = server.new_client("reviewer", "alice")
    bob = server.new_client("reviewer", "bob")
    task_id = _task(producer)
    with server.admin() as admin:
        pending = admin.post(f"/tasks/{task_id}/force-release")
        assert pending.status_code == 409
        assert pending.json()["error_code"] == "ERR_STATE_CONFLICT"
        alice.claim(task_id)
        assert bob.post(f"/tasks/{task_id}/force-release").status_code == 403
        assert producer.post(f"/tasks/{task_id}/force-release").status_code == 403
        other = admin.post(f"/tasks/{task_id}/force-release", json={"holder": "bob"})
        assert other.status_code == 409  # not the holder the caller saw
        assert admin.post(f"/tasks/{task_id}/force-release").status_code == 200
        missing = admin.post("/tasks/00000000-0000-4000-8000-000000000000/force-release")
        assert missing.json()["error_code"] == "ERR_TASK_NOT_FOUND"
        unknown_field = admin.post(f"/tasks/{task_id}/force-release", json={"who": "x"})
        assert unknown_field.status_code == 422


def test_a_supervisor_reassigns_a_task_to_a_group(server: LiveServer) -> None:
    producer = server.new_client("producer", "bot")
    alice = server.new_client("reviewer", "alice")
    sue = server.new_client("supervisor", "sue")
    task_id = _task(producer)
    token = alice.claim(task_id).json()["lease_token"]

    # A group nobody is in and no policy names would strand the task: refused, the task
    # unchanged. A member makes it known.
    typo = sue.post(f"/tasks/{task_id}/reassign", json={"group": "am1"})
    assert typo.status_code == 422, typo.text
    assert typo.json()["error_code"] == "ERR_UNKNOWN_GROUP"
    assert [e["field"] for e in typo.json()["errors"]] == ["group"]
    assert alice.renew(task_id, token).status_code == 200
    with server.admin() as admin:
        member = {"role": "reviewer", "principal_id": "amir", "groups": ["aml"]}
        assert admin.post("/api-keys", json=member).status_code == 201

    moved = sue.post(f"/tasks/{task_id}/reassign", json={"group": "aml"})
    assert moved.status_code == 200, moved.text
    assert (moved.json()["assigned_group"], moved.json()["status"]) == ("aml", "PENDING_REVIEW")
    # The lease ended with the hand-over (and the task is now another group's).
    assert alice.renew(task_id, token).json()["error_code"] == "ERR_TASK_NOT_FOUND"
    # alice's key has no groups: a task assigned to "aml" is not hers to see or claim.
    assert alice.claim(task_id).json()["error_code"] == "ERR_TASK_NOT_FOUND"
    assert alice.post(f"/tasks/{task_id}/reassign", json={"group": "x"}).status_code == 403
    assert sue.post(f"/tasks/{task_id}/reassign", json={"group": ""}).status_code == 422
    assert server.count("outbox_events", event_type="task.reassigned") == 1


def test_the_groups_a_task_can_be_handed_to_are_those_someone_names(server: LiveServer) -> None:
    producer = server.new_client("producer", "bot")
    sue = server.new_client("supervisor", "sue")
    task_id = _task(producer)

    def reassign(group: str) -> str:
        answer = sue.post(f"/tasks/{task_id}/reassign", json={"group": group})
        return "moved" if answer.status_code == 200 else str(answer.json()["error_code"])

    assert reassign("legal") == "ERR_UNKNOWN_GROUP"
    assert reassign("supervisors") == "moved"  # the default policy reassigns to it
    policy = {
        "name": "legal-review",
        "levels": [
            {"after_seconds": 60, "action": "remind", "notify": ["group:legal"]},
            {"after_seconds": 60, "action": "expire", "notify": []},
        ],
    }
    with server.admin() as admin:
        created_policy = admin.post("/escalation-policies", json=policy)
        assert created_policy.status_code == 201, created_policy.text
        assert reassign("legal") == "moved"  # a stored policy notifies it
        member = {"role": "reviewer", "principal_id": "tom", "groups": ["tax"]}
        created = admin.post("/api-keys", json=member)
        assert reassign("tax") == "moved"  # an API key is in it
        assert admin.delete(f"/api-keys/{created.json()['id']}").status_code in (200, 204)
    assert reassign("tax") == "ERR_UNKNOWN_GROUP"  # revoked: nobody is in it now
