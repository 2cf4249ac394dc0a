"""The OpenAPI document is enough to write a client: bearer auth declared once, every
operation's error codes, real media types and headers; /docs and /redoc work offline."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.openapi.utils import get_openapi
from fastapi.testclient import TestClient

from signoff.api.app import create_app
from signoff.api.openapi import operation_keys
from signoff.api.operation_errors import ERROR_CODES, NOT_PER_OPERATION
from signoff.errors import ErrorCode
from signoff.settings import Settings


@pytest.fixture(scope="module")
def app():  # type: ignore[no-untyped-def]
    return create_app(Settings(database_url="sqlite:///unused-by-these-tests.db"))


@pytest.fixture(scope="module")
def document(app) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    return dict(app.openapi())


def operations(document: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{method.upper()} {path}", operation)
        for path, methods in document["paths"].items()
        for method, operation in methods.items()
    ]


def test_every_operation_declares_its_error_codes(app) -> None:  # type: ignore[no-untyped-def]
    """Adding an operation? Give it a row in ERROR_CODES (src/signoff/api/operation_errors.py)."""
    missing = [key for key in operation_keys(app) if key not in ERROR_CODES]
    rows = "\n".join(
        f'    "{key}": (ErrorCode.FORBIDDEN, ErrorCode.…_NOT_FOUND),' for key in missing
    )
    assert not missing, (
        "these operations have no row in ERROR_CODES in src/signoff/api/operation_errors.py; "
        "add one per operation listing every error_code it can return (401, 503 and a "
        "body's 400/413/422 are added for you; () if it returns none of its own):\n" + rows
    )
    stale = sorted(set(ERROR_CODES) - set(operation_keys(app)))
    assert not stale, f"ERROR_CODES names operations the app no longer has: {stale}"


def test_statuses_a_route_declares_have_codes(app, document) -> None:  # type: ignore[no-untyped-def]
    """A status given in a route's ``responses=`` must be in the document with its codes."""
    raw = get_openapi(title=app.title, version=app.version, routes=app.routes)
    gaps = [
        f"{key} {status}"
        for key, operation in operations(raw)
        for status in operation.get("responses", {})
        if status.isdigit()
        and int(status) >= 400
        and int(status) not in (401, 403, 410, 422)
        and status
        not in document["paths"][key.split(" ", 1)[1]][key.split(" ")[0].lower()]["responses"]
    ]
    assert not gaps, (
        "add the error_codes of these statuses to ERROR_CODES in "
        f"src/signoff/api/operation_errors.py: {gaps}"
    )


def documented_codes(document: dict[str, Any]) -> list[tuple[str, int, str]]:
    """(operation, status, error_code) for every problem response of the document."""
    return [
        (key, int(status), code)
        for key, operation in operations(document)
        for status, response in operation["responses"].items()
        if int(status) >= 400 and not (key.endswith("/r/{token}") and status == "410")
        for code in response["content"]["application/problem+json"]["schema"]["allOf"][1][
            "properties"
        ]["error_code"]["enum"]
    ]


def test_every_documented_code_is_an_error_code_under_its_own_status(
    document: dict[str, Any],
) -> None:
    members = {code.value: code for code in ErrorCode}
    for key, status, code in documented_codes(document):
        assert code in members, (key, code)
        assert members[code].status == status, (key, status, code)


def test_every_error_code_is_documented_by_an_operation_or_listed_as_not_per_operation(
    document: dict[str, Any],
) -> None:
    documented = {code for _, _, code in documented_codes(document)}
    undocumented = sorted(
        c.value for c in ErrorCode if c not in documented and c not in NOT_PER_OPERATION
    )
    assert not undocumented, (
        "list these codes in the ERROR_CODES row of each operation that returns them, or in "
        f"NOT_PER_OPERATION (src/signoff/api/operation_errors.py): {undocumented}"
    )
    stale = sorted(code.value for code in NOT_PER_OPERATION if code in documented)
    assert not stale, f"documented by an operation, yet in NOT_PER_OPERATION: {stale}"


def test_the_claim_operations_document_the_lease_limit(document: dict[str, Any]) -> None:
    for path in ("/tasks/claim-next", "/tasks/{task_id}/claim"):
        conflict = document["paths"][path]["post"]["responses"]["409"]
        assert "ERR_CLAIM_LIMIT" in conflict["description"], path


def test_bearer_auth_is_declared_once(document: dict[str, Any]) -> None:
    schemes = document["components"]["securitySchemes"]
    assert list(schemes) == ["bearerAuth"]
    assert schemes["bearerAuth"]["type"] == "http"
    assert schemes["bearerAuth"]["scheme"] == "bearer"
    assert document["security"] == [{"bearerAuth": []}]
    for key, operation in operations(document):
        names = [p["name"].lower() for p in operation.get("parameters", [])]
        assert "authorization" not in names, key
        if key in ("GET /healthz", "GET /r/{token}", "GET /.well-known/jwks.json"):
            assert operation["security"] == [], key
        elif key == "POST /r/{token}":
            assert operation["security"] == [{}, {"bearerAuth": []}]
        else:
            assert "security" not in operation, key  # the top-level requirement applies
            assert "401" in operation["responses"], key


def test_every_error_response_is_a_problem_with_an_error_code_enum(
    document: dict[str, Any],
) -> None:
    for key, operation in operations(document):
        for status, response in operation["responses"].items():
            if int(status) < 400 or (key.endswith("/r/{token}") and status == "410"):
                continue
            schema = response["content"]["application/problem+json"]["schema"]
            codes = schema["allOf"][1]["properties"]["error_code"]["enum"]
            assert codes, (key, status)
            assert all(re.fullmatch(r"ERR_[A-Z_]+", code) for code in codes), (key, codes)
        if key != "GET /healthz":
            assert "ERR_NOT_READY" in str(operation["responses"]["503"]), key


def test_media_types_are_what_the_service_sends(document: dict[str, Any]) -> None:
    paths = document["paths"]
    assert list(paths["/metrics"]["get"]["responses"]["200"]["content"]) == ["text/plain"]
    page = paths["/r/{token}"]["get"]["responses"]["200"]["content"]
    assert set(page) == {"text/html", "application/json"}
    body = paths["/r/{token}"]["post"]["requestBody"]["content"]
    assert set(body) == {"application/x-www-form-urlencoded", "application/json"}


def test_response_headers_and_examples(document: dict[str, Any]) -> None:
    paths = document["paths"]
    escalate = paths["/tasks/escalate"]["post"]
    assert {"Idempotent-Replayed", "Location"} <= set(escalate["responses"]["201"]["headers"])
    assert "example" in escalate["requestBody"]["content"]["application/json"]
    assert "ETag" in paths["/tasks/{task_id}"]["get"]["responses"]["200"]["headers"]
    assert "WWW-Authenticate" in escalate["responses"]["401"]["headers"]
    assert "Retry-After" in escalate["responses"]["503"]["headers"]
    resolve = paths["/tasks/{task_id}/resolve"]["post"]
    assert "example" in resolve["requestBody"]["content"]["application/json"]


def test_task_status_lists_every_status(document: dict[str, Any]) -> None:
    status = document["components"]["schemas"]["TaskOut"]["properties"]["status"]
    assert set(status["enum"]) == {"PENDING_REVIEW", "CLAIMED", "RESOLVED", "EXPIRED", "CANCELLED"}


def test_fields_that_refuse_null_do_not_offer_it(document: dict[str, Any]) -> None:
    paths = document["paths"]
    for path, method, field in (
        ("/webhook-endpoints/{endpoint_id}", "patch", "enabled"),
        ("/webhook-endpoints/{endpoint_id}", "patch", "url"),
        ("/tasks/{task_id}/subject", "put", "source_revisions"),
    ):
        body = paths[path][method]["requestBody"]["content"]["application/json"]["schema"]
        assert "null" not in str(body["properties"][field]), (path, field)


def test_the_document_speaks_the_products_language(document: dict[str, Any]) -> None:
    text = str(document)
    assert not re.search(r"\bseed\b", text, re.IGNORECASE)
    assert "shared/" not in text


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_load_nothing_from_another_host(app, page: str) -> None:  # type: ignore[no-untyped-def]
    client = TestClient(app)
    html = client.get(page).text
    references = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)""", html)
    references += re.findall(r"""(?:url|openapi_url)\s*:\s*["']([^"']+)""", html)
    assert references
    external = [ref for ref in references if re.match(r"^(https?:)?//", ref)]
    assert not external, external
    for reference in references:
        if reference.startswith("/docs-assets/"):
            assert client.get(reference).status_code == 200, reference
    if page == "/docs":
        assert "persistAuthorization" in html
