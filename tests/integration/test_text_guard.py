"""One text guard at the request boundary: every documented string field of every
operation (read from /openapi.json), given U+0000, a lone surrogate or an over-long
value, gets a 4xx — never a 500 — on both engines (PostgreSQL is the one that refuses)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.integration.test_approvals import SUBJECT
from tests.support import LiveServer, escalation

BAD_TEXTS = {"nul": "a\x00b", "surrogate": "a\ud800b", "long": "€" * 3000}
BAD_PARAMETERS = {"nul": "a%00b", "surrogate": "a%ED%A0%80b", "long": "x" * 3000}


def _resolve(schema: dict[str, Any], document: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        schema = document["components"]["schemas"].get(name) or schema.get("$defs", {}).get(
            name, {}
        )
    return schema


def _is_string(schema: dict[str, Any]) -> bool:
    if schema.get("type") == "string":
        return True
    return any(option.get("type") == "string" for option in schema.get("anyOf", []))


def string_paths(
    schema: dict[str, Any], document: dict[str, Any], prefix: tuple[Any, ...] = ()
) -> list[tuple[Any, ...]]:
    """JSON paths of every string a body schema documents (array items as index 0)."""
    defs = schema.get("$defs", {})
    schema = _resolve(schema, document)
    if "$ref" in schema and defs:
        schema = defs[schema["$ref"].rsplit("/", 1)[1]]
    found: list[tuple[Any, ...]] = []
    if _is_string(schema) and prefix:
        found.append(prefix)
    options = [schema, *schema.get("anyOf", []), *schema.get("oneOf", [])]
    for option in options:
        option = _resolve(option, document)
        if "$ref" in option and defs:
            option = defs[option["$ref"].rsplit("/", 1)[1]]
        for name, child in option.get("properties", {}).items():
            child = {**child, "$defs": defs} if defs else child
            found += string_paths(child, document, (*prefix, name))
        if "items" in option:
            items = {**option["items"], "$defs": defs} if defs else option["items"]
            found += string_paths(items, document, (*prefix, 0))
    return sorted(set(found), key=str)


def set_at(node: Any, path: tuple[Any, ...], value: Any) -> Any:
    """A copy of ``node`` with ``value`` at ``path`` (containers made where missing)."""
    if not path:
        return value
    step, rest = path[0], path[1:]
    if isinstance(step, int):
        items = list(node) if isinstance(node, list) and node else [None]
        items[0] = set_at(items[0], rest, value)
        return items
    mapping = dict(node) if isinstance(node, dict) else {}
    mapping[step] = set_at(mapping.get(step), rest, value)
    return mapping


@pytest.fixture
def world(server: LiveServer) -> dict[str, Any]:
    admin = server.admin()
    producer = server.new_client("producer", "walker-producer")
    reviewer = server.new_client("reviewer", "walker-reviewer")
    task = producer.escalate(escalation(subject=copy.deepcopy(SUBJECT))).json()
    endpoint = admin.post("/webhook-endpoints", json={"url": "https://hooks.example.com/in"}).json()
    return {
        "clients": [admin, producer, reviewer],
        "ids": {
            "task_id": task["id"],
            "endpoint_id": endpoint.get("id", "x"),
            "action_id": "publish_article",
            "source_id": "S01",
            "name": "default",
            "key_id": "00000000-0000-0000-0000-000000000000",
            "delivery_id": "00000000-0000-0000-0000-000000000000",
            "principal_id": "walker-reviewer",
            "token": "t" * 32,
            "revision": "1",
        },
        "bodies": {
            ("post", "/tasks/escalate"): escalation(subject=copy.deepcopy(SUBJECT)),
            ("put", "/tasks/{task_id}/subject"): {"subject": SUBJECT},
            ("post", "/webhook-endpoints"): {"url": "https://hooks.example.com/x"},
            ("post", "/api-keys"): {"role": "reviewer", "principal_id": "p-walk"},
            ("post", "/tasks/{task_id}/resolve"): {"decision": "REJECTED", "notes": "No."},
            ("post", "/tasks/{task_id}/execute"): {
                "revision": 1,
                "digest": task["digest"],
                "operation_id": "op",
            },
            ("post", "/escalation-policies"): {
                "name": "walk",
                "levels": [{"after_seconds": 60, "action": "expire", "notify": []}],
            },
        },
    }


def _send(client: Any, method: str, url: str, body: Any) -> int:
    content = None if body is None else json.dumps(body).encode()  # ensure_ascii: \ud800
    headers = {"Content-Type": "application/json", "X-Lease-Token": "x", "If-Match": '"1"'}
    return int(client.request(method, url, content=content, headers=headers).status_code)


def test_every_documented_string_field_refuses_bad_text_with_a_4xx(
    server: LiveServer, world: dict[str, Any]
) -> None:
    document = server.admin().get("/openapi.json").json()
    failures = []
    for template, operations in document["paths"].items():
        for method, operation in operations.items():
            parameters = operation.get("parameters", [])
            path = template
            for name, value in world["ids"].items():
                path = path.replace("{" + name + "}", value)
            schema = (
                operation.get("requestBody", {})
                .get("content", {})
                .get("application/json", {})
                .get("schema")
            )
            base = world["bodies"].get((method, template), {} if schema else None)
            cases: list[tuple[str, Any]] = []
            for label, bad in BAD_TEXTS.items():
                for json_path in string_paths(schema, document) if schema else []:
                    cases.append((path, set_at(base, json_path, bad)))
                for parameter in parameters:
                    if parameter["in"] == "path":
                        wrong = template.replace(
                            "{" + parameter["name"] + "}", BAD_PARAMETERS[label]
                        )
                        for name, value in world["ids"].items():
                            wrong = wrong.replace("{" + name + "}", value)
                        cases.append((wrong, base))
                    elif parameter["in"] == "query":
                        query = f"{parameter['name']}={BAD_PARAMETERS[label]}"
                        cases.append((f"{path}?{query}", base))
            for url, body in cases:
                for client in world["clients"]:
                    status = _send(client, method.upper(), url, body)
                    if status >= 500:
                        failures.append((method, url[:80], status, str(body)[:120]))
    assert failures == []
