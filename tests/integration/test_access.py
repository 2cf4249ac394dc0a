"""Authentication, roles, API keys, reads and the service's own documents."""

from __future__ import annotations

import base64
import hashlib
import json
import uuid

import pytest

from tests.support import ADMIN_KEY, LiveServer, escalation


def test_healthz_needs_no_key_and_readyz_checks_the_database(server: LiveServer) -> None:
    with server.client(None) as anonymous:
        assert anonymous.get("/healthz").json() == {"status": "ok"}
        assert anonymous.get("/readyz").status_code == 401
    with server.admin() as admin:
        ready = admin.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["database"] in {"sqlite", "postgresql"}


@pytest.mark.parametrize("header", [None, "Bearer nope-nope-nope", "Basic abc", "Bearer"])
def test_requests_without_a_valid_key_are_unauthenticated(server: LiveServer, header) -> None:
    with server.client(None) as client:
        headers = {"Authorization": header} if header else {}
        response = client.get("/tasks", headers=headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["error_code"] == "ERR_UNAUTHENTICATED"


def test_keys_are_shown_once_and_stored_hashed(server: LiveServer) -> None:
    with server.admin() as admin:
        created = admin.post("/api-keys", json={"role": "reviewer", "principal_id": "usr_op_771"})
        assert created.status_code == 201
        secret = created.json()["key"]
        listed = admin.get("/api-keys").json()["items"]
    assert secret not in str(listed)
    assert {"role": "reviewer", "principal_id": "usr_op_771"}.items() <= next(
        k for k in listed if k["id"] == created.json()["id"]
    ).items()
    stored = [row["key_hash"] for row in server.rows("api_keys")]
    assert hashlib.sha256(secret.encode()).hexdigest() in stored
    assert secret not in stored


def test_only_admins_manage_keys(server: LiveServer) -> None:
    with server.new_client("supervisor") as supervisor:
        response = supervisor.post("/api-keys", json={"role": "admin", "principal_id": "me"})
    assert response.status_code == 403
    assert response.json()["error_code"] == "ERR_FORBIDDEN"


@pytest.mark.parametrize(
    "body",
    [
        {"role": "overlord", "principal_id": "x"},
        {"role": "reviewer"},
        {"role": "reviewer", "principal_id": ""},
        {"role": "reviewer", "principal_id": "x", "email": "a\u0000b@example.org"},
        {"role": "reviewer", "principal_id": "x", "groups": ["ok", "bad\u0000"]},
    ],
)
def test_a_bad_key_request_names_the_field(server: LiveServer, body) -> None:
    with server.admin() as admin:
        response = admin.post("/api-keys", json=body)
    assert response.status_code == 422
    field = response.json()["errors"][0]["field"]  # e.g. "groups[1]" for one bad group
    assert field.split("[")[0] in {"role", "principal_id", "email", "groups"}


def test_a_revoked_key_stops_working_at_once(server: LiveServer) -> None:
    reviewer = server.new_client("reviewer")
    assert reviewer.get("/tasks").status_code == 200
    key_id = next(
        k["id"]
        for k in server.admin().get("/api-keys").json()["items"]
        if k["principal_id"] == reviewer.principal_id
    )
    with server.admin() as admin:
        assert admin.delete(f"/api-keys/{key_id}").status_code == 204
        assert admin.delete(f"/api-keys/{key_id}").status_code == 404
        assert admin.delete("/api-keys/not-a-uuid").status_code == 404
    assert reviewer.get("/tasks").status_code == 401
    reviewer.close()


def test_the_bootstrap_admin_key_works_as_configured(server: LiveServer) -> None:
    with server.client(ADMIN_KEY) as admin:
        assert admin.get("/api-keys").status_code == 200


def test_producers_read_only_their_own_tasks(server: LiveServer) -> None:
    with server.new_client("producer", "bot-a") as a, server.new_client("producer", "bot-b") as b:
        mine = a.escalate(escalation()).json()["id"]
        theirs = b.escalate(escalation()).json()["id"]
        assert a.get(f"/tasks/{mine}").status_code == 200
        assert a.get(f"/tasks/{theirs}").status_code == 404
        assert a.get(f"/tasks/{theirs}/events").status_code == 404
        assert [t["id"] for t in a.get("/tasks").json()["items"]] == [mine]
    with server.new_client("supervisor") as supervisor:
        assert {t["id"] for t in supervisor.get("/tasks").json()["items"]} == {mine, theirs}


def test_listing_filters_and_pages_with_a_cursor(server: LiveServer) -> None:
    with server.new_client("producer") as producer, server.new_client("reviewer") as reviewer:
        ids = []
        for index in range(5):
            ids.append(
                producer.escalate(
                    escalation(entity_type="invoice" if index % 2 else "transaction")
                ).json()["id"]
            )
            server.clock.advance(1)
        seen, cursor = [], None
        while True:
            params = {"limit": 2} | ({"cursor": cursor} if cursor else {})
            page = reviewer.get("/tasks", params=params).json()
            seen += [t["id"] for t in page["items"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == ids
        invoices = reviewer.get("/tasks", params={"entity_type": "invoice"}).json()["items"]
        assert [t["id"] for t in invoices] == [ids[1], ids[3]]
        entity = invoices[0]["entity_id"]
        assert [
            t["id"] for t in reviewer.get("/tasks", params={"entity_id": entity}).json()["items"]
        ] == [ids[1]]
        assert reviewer.get("/tasks", params={"reason_code": "NOPE"}).json()["items"] == []


def _cursor(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": 201}, "limit"),
        ({"limit": 0}, "limit"),
        ({"status": "DONE"}, "status"),
        ({"cursor": "%%%"}, "cursor"),
        ({"cursor": _cursor(["2026-11-30T12:00:00+00:00", 123])}, "cursor"),
        ({"cursor": _cursor(["0001-01-01T00:00:00+05:00", str(uuid.uuid4())])}, "cursor"),
        ({"cursor": _cursor(["9999-12-31T23:59:59-05:00", str(uuid.uuid4())])}, "cursor"),
        ({"cursor": _cursor({"not": "a list"})}, "cursor"),
        ({"entity_id": "a\x00b"}, "entity_id"),
        ({"reason_code": "\x00"}, "reason_code"),
    ],
)
def test_bad_listing_parameters_are_named(server: LiveServer, params, field) -> None:
    with server.new_client("reviewer") as reviewer:
        response = reviewer.get("/tasks", params=params)
    assert response.status_code == 422
    assert response.json()["error_code"] == "ERR_VALIDATION"
    assert response.json()["errors"][0]["field"] == field


def test_unknown_routes_are_problem_documents(server: LiveServer) -> None:
    with server.admin() as admin:
        response = admin.get("/nowhere")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"


def test_openapi_documents_every_endpoint_body_and_error(server: LiveServer) -> None:
    with server.client(None) as anonymous:
        spec = anonymous.get("/openapi.json").json()
    paths = spec["paths"]
    for path, method in [
        ("/tasks/escalate", "post"),
        ("/tasks/claim-next", "post"),
        ("/tasks/{task_id}/claim", "post"),
        ("/tasks/{task_id}/lease/renew", "post"),
        ("/tasks/{task_id}/release", "post"),
        ("/tasks/{task_id}/resolve", "post"),
        ("/tasks", "get"),
        ("/tasks/{task_id}", "get"),
        ("/tasks/{task_id}/events", "get"),
        ("/api-keys", "post"),
        ("/api-keys/{key_id}", "delete"),
        ("/healthz", "get"),
        ("/readyz", "get"),
    ]:
        operation = paths[path][method]
        assert operation["summary"]
        if path != "/healthz":
            assert "401" in operation["responses"], path
    escalate = paths["/tasks/escalate"]["post"]
    schema = escalate["requestBody"]["content"]["application/json"]["schema"]
    assert schema["title"] == "HITLEscalationRequest"
    assert {"409", "413", "422"} <= set(escalate["responses"])
    resolve_body = paths["/tasks/{task_id}/resolve"]["post"]["requestBody"]["content"][
        "application/json"
    ]["schema"]
    assert set(resolve_body["properties"]) == {
        "decision",
        "notes",
        "resolution_payload",
        "operator_id",
        "revision",
        "digest",
        "fields",
        "subject",
        "remember_seconds",
    }


def test_the_openapi_document_is_built_once_and_served_as_the_same_bytes(
    server: LiveServer,
) -> None:
    built = 0
    build = server.app.openapi

    def counted() -> dict[str, object]:
        nonlocal built
        built += 1
        return build()

    server.app.openapi = counted  # type: ignore[method-assign]
    with server.client(None) as anonymous:
        first = anonymous.get("/openapi.json")
        second = anonymous.get("/openapi.json")
    assert first.status_code == second.status_code == 200
    assert first.headers["content-type"] == "application/json"
    assert first.content == second.content
    assert json.loads(first.content)["openapi"].startswith("3.")
    assert built == 1


def test_a_wrong_method_is_a_405_problem(server: LiveServer) -> None:
    with server.admin() as admin:
        response = admin.put("/tasks/escalate")
    assert response.status_code == 405
    assert response.json()["status"] == 405
    assert response.json()["error_code"] == "ERR_METHOD_NOT_ALLOWED"
    assert "POST" in response.headers["allow"]


def test_conflicts_name_only_the_callers_own_tasks(server: LiveServer) -> None:
    with server.new_client("producer", "bot-a") as a, server.new_client("producer", "bot-b") as b:
        mine = a.escalate(escalation("txn_shared")).json()["id"]
        own = a.escalate(escalation("txn_shared")).json()
        other = b.escalate(escalation("txn_shared")).json()
    assert own["task_id"] == mine
    assert own["status"] == 409
    assert other["error_code"] == "ERR_TASK_CONFLICT"
    assert "task_id" not in other
    assert mine not in json.dumps(other)


def test_a_missing_database_is_503_not_500(engine: str, make_settings, clock) -> None:
    from tests.support import LiveServer as Server

    if engine == "sqlite":
        settings = make_settings(
            database_url="sqlite:////nonexistent-dir/signoff.db", run_workers=False
        )
    else:
        settings = make_settings(
            database_url="postgresql://postgres@127.0.0.1:5432/signoff_no_such_db",
            run_workers=False,
        )
    server = Server(settings, clock)
    server.start()
    try:
        with server.admin() as admin:
            for response in (
                admin.get("/readyz"),
                admin.get("/tasks"),
                admin.post("/tasks/claim-next"),
            ):
                assert response.status_code == 503, response.text
                assert response.json()["error_code"] == "ERR_NOT_READY"
                assert response.headers["retry-after"] == "1"
    finally:
        server.stop()


def test_metrics_count_transitions_for_operators_only(server: LiveServer) -> None:
    with server.new_client("producer") as producer:
        producer.escalate(escalation())
    with server.admin() as admin:
        response = admin.get("/metrics")
    assert response.status_code == 200
    line = next(
        line
        for line in response.text.splitlines()
        if line.startswith('signoff_transitions_total{event="task.created"}')
    )
    assert float(line.split()[-1]) >= 1
    with server.new_client("reviewer") as reviewer:
        assert reviewer.get("/metrics").status_code == 403
