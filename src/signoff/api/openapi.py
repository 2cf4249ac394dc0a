"""The OpenAPI document, finished in one place.

FastAPI derives paths, parameters and schemas from the routers; this module adds what a
client generator needs and FastAPI cannot know:

* HTTP bearer authentication, declared once (``components.securitySchemes`` and a
  top-level ``security``); public operations say ``security: []``.
* Every operation's error responses as RFC 9457 problems whose ``error_code`` is an enum
  per status, from :data:`signoff.api.operation_errors.ERROR_CODES` (which codes each
  operation can return), grouped by the status each code goes with.
* Response headers (``WWW-Authenticate``, ``Retry-After``, ``Idempotent-Replayed``,
  ``ETag``, ``Location``), the real media types of ``/metrics`` and the resume-link page,
  and examples.
"""

from __future__ import annotations

import copy
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.responses import JSONResponse

from signoff.api.operation_errors import ERROR_CODES
from signoff.domain.decisions import DECISION_RULES, NOTES_MAX_LENGTH, notes_rule
from signoff.errors import ErrorCode

BEARER = "bearerAuth"
PROBLEM_JSON = "application/problem+json"

#: Operations that need no API key. ``POST /r/{token}`` takes one optionally (JSON mode).
PUBLIC = {"GET /healthz", "GET /r/{token}", "GET /.well-known/jwks.json"}
OPTIONAL_KEY = {"POST /r/{token}"}
#: Operations that never touch the database.
NO_DATABASE = {"GET /healthz"}

STATUS_TEXT = {
    400: "Bad request",
    401: "Missing, unknown or revoked API key",
    403: "Not allowed for this caller",
    404: "Not found",
    409: "Conflict with the current state",
    410: "Gone",
    412: "Precondition failed (stale If-Match)",
    413: "Body larger than SIGNOFF_MAX_BODY_BYTES",
    422: "Invalid input",
    428: "Precondition required (If-Match)",
    429: "Too many attempts",
    503: "The database is not available; retry",
}


#: The titles the error tree gives each status (``signoff.errors``).
PROBLEM_TITLES = {
    400: "Bad request",
    401: "Unauthenticated",
    403: "Forbidden",
    404: "Not found",
    409: "Conflict",
    412: "Precondition failed",
    413: "Payload too large",
    422: "Unprocessable content",
    428: "Precondition required",
    429: "Too many requests",
    503: "Service not ready",
}


def _header(description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"description": description, "schema": schema or {"type": "string"}}


RESPONSE_HEADERS: dict[str, dict[str, dict[str, Any]]] = {
    "POST /tasks/escalate 201": {
        "Idempotent-Replayed": _header(
            "`true` when this is the stored first response for the same idempotency key "
            "and body, replayed byte for byte; absent on the first response.",
            {"type": "string", "enum": ["true"]},
        ),
        "Location": _header("The new task: `/tasks/{task_id}`."),
    },
    "GET /tasks/{task_id} 200": {
        "ETag": _header('`"<revision>"` of the subject, for `If-Match` (tasks with a subject).')
    },
    "PUT /tasks/{task_id}/subject 200": {
        "ETag": _header('`"<revision>"` of the subject just stored.')
    },
    "GET /tasks/{task_id}/revisions/{revision} 200": {"ETag": _header('`"<revision>"`.')},
    "POST /webhook-endpoints 201": {
        "Location": _header("The new endpoint: `/webhook-endpoints/{endpoint_id}`.")
    },
    "POST /escalation-policies 201": {
        "Location": _header("The new policy: `/escalation-policies/{name}`.")
    },
}

EXAMPLE_ESCALATION: dict[str, Any] = {
    "escalation_id": "3f6c2a8e-5b1d-4c7e-9a2f-1d8e7b6c5a40",
    "idempotency_key": "aml-bot-txn_88213-0001",
    "entity_type": "transaction",
    "entity_id": "txn_88213",
    "reason_code": "AML_RULE_FAILED",
    "precheck_hash": "a7f3b8c1d2e4f5061728394a5b6c7d8e9f0a1b2c3d4e5f60718293a4b5c6d7e8",
    "diagnostic_bundle": {
        "trace_id": "0af7651916cd43dd8448eb211c80319c",
        "attempted_actions": [
            {
                "action": "retry_payment_gateway",
                "executed_at": "2026-11-29T08:15:02Z",
                "result": "timeout after 3 attempts",
            }
        ],
        "input_snapshot": {"amount": "12500.00", "currency": "EUR"},
        "evaluator_verdict": {"confidence_score": 0.41, "threshold": 0.85},
    },
}

REQUEST_EXAMPLES: dict[str, Any] = {
    "POST /tasks/escalate": EXAMPLE_ESCALATION,
    "POST /tasks/{task_id}/resolve": {
        "operator_id": "usr_op_771",
        "decision": "REJECTED",
        "notes": "Transaction format anomaly violates rule AML-04.",
        "resolution_payload": {"override_action": "BLOCK_TRANSACTION", "freeze_account": False},
    },
    "POST /api-keys": {"role": "reviewer", "principal_id": "usr_op_771", "groups": ["aml"]},
    "POST /webhook-endpoints": {
        "url": "https://orders.example.com/hooks/signoff",
        "event_types": ["task.resolved"],
    },
    "POST /tasks/claim-next": {"entity_type": "transaction"},
}

PROBLEM_EXAMPLE = {
    "type": f"urn:signoff:problem:{ErrorCode.TASK_NOT_FOUND}",
    "title": "Not found",
    "status": 404,
    "detail": "task 3f6c2a8e-5b1d-4c7e-9a2f-1d8e7b6c5a40 does not exist",
    "error_code": ErrorCode.TASK_NOT_FOUND,
    "message": "task 3f6c2a8e-5b1d-4c7e-9a2f-1d8e7b6c5a40 does not exist",
}

LINK_STATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["state", "message", "task"],
    "properties": {
        "state": {"type": "string", "enum": ["open", "decided", "gone"]},
        "message": {"type": ["string", "null"]},
        "task": {"type": ["object", "null"]},
    },
}
HTML_PAGE = {"text/html": {"schema": {"type": "string"}}}
DECISIONS = [d.value for d in DECISION_RULES]


def operation_keys(app: FastAPI) -> list[str]:
    """Every documented operation of ``app`` as ``"METHOD /path"``."""
    paths = app.openapi()["paths"]
    return [
        f"{method.upper()} {path}" for path, operations in paths.items() for method in operations
    ]


def error_codes(key: str, operation: dict[str, Any]) -> dict[int, list[ErrorCode]]:
    """The table's codes for one operation, plus the ones every operation of its kind has,
    by the status each goes with."""
    codes = list(ERROR_CODES.get(key, ()))

    def add(code: ErrorCode) -> None:
        if code not in codes:
            codes.append(code)

    if key not in PUBLIC:
        add(ErrorCode.UNAUTHENTICATED)
    if key not in NO_DATABASE:
        add(ErrorCode.NOT_READY)
    checked = [
        p
        for p in operation.get("parameters", [])
        if p.get("in") == "query" or p.get("schema", {}).get("type") not in (None, "string")
    ]
    if checked:  # FastAPI validates them: 422 with the parameter named in errors[]
        add(ErrorCode.VALIDATION)
    if "requestBody" in operation:
        add(ErrorCode.MALFORMED_JSON)
        add(ErrorCode.PAYLOAD_TOO_LARGE)
        add(ErrorCode.VALIDATION)
    return _by_status(codes)


def _by_status(codes: list[ErrorCode]) -> dict[int, list[ErrorCode]]:
    """``codes`` grouped by the status each goes with; one without a fixed status has no
    place in the document."""
    by_status: dict[int, list[ErrorCode]] = {}
    for code in codes:
        if code.status is not None:
            by_status.setdefault(code.status, []).append(code)
    return dict(sorted(by_status.items()))


def _problem_response(status: int, codes: list[ErrorCode]) -> dict[str, Any]:
    values = [code.value for code in codes]
    schema = {
        "allOf": [
            {"$ref": "#/components/schemas/Problem"},
            {
                "type": "object",
                "properties": {
                    "error_code": {"type": "string", "enum": values},
                    "status": {"type": "integer", "enum": [status]},
                },
            },
        ]
    }
    detail = f"why this request was refused ({values[0]})"
    example = {
        "type": f"urn:signoff:problem:{values[0]}",
        "title": PROBLEM_TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
        "error_code": values[0],
        "message": detail,
    }
    response: dict[str, Any] = {
        "description": STATUS_TEXT.get(status, "Error") + ": " + ", ".join(values),
        "content": {PROBLEM_JSON: {"schema": schema, "example": example}},
    }
    if status == 401:
        response["headers"] = {
            "WWW-Authenticate": _header('`Bearer realm="signoff"`: send an API key.')
        }
    if status in (429, 503):
        response["headers"] = {"Retry-After": _header("Seconds to wait before retrying.")}
    return response


def _finish_operation(key: str, operation: dict[str, Any]) -> None:
    # Authentication is declared once at the top; say only where it differs.
    operation.pop("security", None)
    operation["parameters"] = [
        p
        for p in operation.get("parameters", [])
        if not (p.get("in") == "header" and p.get("name", "").lower() == "authorization")
    ]
    if not operation["parameters"]:
        del operation["parameters"]
    if key in PUBLIC:
        operation["security"] = []
    elif key in OPTIONAL_KEY:
        operation["security"] = [{}, {BEARER: []}]

    responses = operation.setdefault("responses", {})
    for status in [s for s in responses if s.isdigit() and int(s) >= 400]:
        if key.endswith("/r/{token}") and status == "410":
            continue  # a page or a link state, not a problem (set below)
        del responses[status]
    for status, codes in error_codes(key, operation).items():
        responses[str(status)] = _problem_response(status, codes)
    for status, response in responses.items():
        headers = RESPONSE_HEADERS.get(f"{key} {status}")
        if headers:
            response.setdefault("headers", {}).update(headers)

    example = REQUEST_EXAMPLES.get(key)
    body = operation.get("requestBody", {}).get("content", {}).get("application/json")
    if example is not None and body is not None:
        body["example"] = example


def _special_media_types(paths: dict[str, Any]) -> None:
    metrics = paths.get("/metrics", {}).get("get")
    if metrics:
        metrics["responses"]["200"]["content"] = {
            "text/plain": {
                "schema": {"type": "string"},
                "example": "# TYPE signoff_tasks_created_total counter\n"
                'signoff_tasks_created_total{entity_type="transaction"} 1.0\n',
            }
        }
    link = paths.get("/r/{token}", {})
    use = link.get("post")
    if use:
        # Its bodies (set below) are read by the route itself: the usual body refusals.
        body_refusals = [
            ErrorCode.MALFORMED_JSON,
            ErrorCode.PAYLOAD_TOO_LARGE,
            ErrorCode.VALIDATION,
        ]
        for status, codes in _by_status(body_refusals).items():
            use["responses"].setdefault(str(status), _problem_response(status, codes))
    page_or_state = {**HTML_PAGE, "application/json": {"schema": LINK_STATE_SCHEMA}}
    for method in ("get", "post"):
        operation = link.get(method)
        if not operation:
            continue
        operation["responses"]["200"] = {
            "description": "The decision page (HTML), or with `Accept: application/json` "
            "(GET) / a JSON body (POST) the link's state as JSON.",
            "content": copy.deepcopy(page_or_state),
        }
        operation["responses"]["410"] = {
            "description": "Expired, cancelled or withdrawn: a page, or the state as JSON.",
            "content": copy.deepcopy(page_or_state),
        }
        for status, response in operation["responses"].items():
            if status.isdigit() and int(status) >= 400 and status != "410":
                response["content"] = {**HTML_PAGE, **response["content"]}
    if use:
        use["requestBody"] = {
            "required": True,
            "content": {
                "application/x-www-form-urlencoded": {
                    "schema": {
                        "type": "object",
                        "required": ["decision", "csrf"],
                        "properties": {
                            "decision": {"type": "string", "enum": DECISIONS},
                            "notes": {
                                "type": "string",
                                "maxLength": NOTES_MAX_LENGTH,
                                "description": notes_rule(),
                            },
                            "csrf": {
                                "type": "string",
                                "description": "The form token from the page (GET /r/{token}).",
                            },
                            "revision": {
                                "type": "string",
                                "pattern": "^[0-9]{1,9}$",
                                "description": "The subject revision shown on the page.",
                            },
                        },
                    }
                },
                "application/json": {
                    "schema": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["decision"],
                        "properties": {
                            "decision": {"type": "string", "enum": DECISIONS},
                            "notes": {
                                "type": "string",
                                "maxLength": NOTES_MAX_LENGTH,
                                "description": notes_rule(),
                            },
                            "revision": {
                                "type": "integer",
                                "minimum": 1,
                                "maximum": 2**31 - 1,
                                "description": "Required on a task with a subject.",
                            },
                        },
                    },
                    "example": {"decision": "APPROVED"},
                },
            },
        }


def build_openapi(app: FastAPI) -> dict[str, Any]:
    """The finished document (cached on the app)."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            _finish_operation(f"{method.upper()} {path}", operation)
    _special_media_types(schema["paths"])
    components = schema.setdefault("components", {})
    components["securitySchemes"] = {
        BEARER: {
            "type": "http",
            "scheme": "bearer",
            "description": "An API key (`signoff_…`), sent as `Authorization: Bearer <key>`. "
            "`signoff serve` prints the first admin key; admins create the others.",
        }
    }
    schema["security"] = [{BEARER: []}]
    schemas = components.setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    if "Problem" in schemas:
        schemas["Problem"]["example"] = PROBLEM_EXAMPLE
    app.openapi_schema = schema
    return schema


def openapi_bytes(app: FastAPI) -> bytes:
    """The document as ``GET /openapi.json`` serves it, built and encoded once per
    process: serialising it costs about a tenth of a second of the event loop, and the
    route needs no key."""
    cached: bytes | None = getattr(app.state, "openapi_bytes", None)
    if cached is None:
        cached = bytes(JSONResponse(app.openapi()).body)
        app.state.openapi_bytes = cached
    return cached
