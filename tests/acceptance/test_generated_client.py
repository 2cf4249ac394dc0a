"""A client generated from ``/openapi.json`` by an independent generator
(``openapi-python-client``) runs the README round trip: keys, escalate, claim, resolve,
audit trail, and a typed problem for a refused call."""

from __future__ import annotations

import hashlib
import importlib
import json
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import rfc8785

from tests.acceptance.test_cli import serve

ROOT = Path(__file__).resolve().parents[2]
ADMIN = "acceptance-admin-key-0000"


def generate(base_url: str, into: Path) -> None:
    document = into / "openapi.json"
    document.write_text(httpx.get(f"{base_url}/openapi.json").text)
    generator = Path(sys.executable).with_name("openapi-python-client")
    result = subprocess.run(
        [
            str(generator),
            "generate",
            "--path",
            str(document),
            "--meta",
            "none",
            "--output-path",
            str(into / "signoff_generated"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=into,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (into / "signoff_generated" / "client.py").exists(), result.stdout


def test_a_generated_client_runs_the_round_trip(tmp_path: Path) -> None:
    with serve(tmp_path, env={"SIGNOFF_BOOTSTRAP_ADMIN_KEY": ADMIN}) as served:
        generate(served.base_url, tmp_path)
        sys.path.insert(0, str(tmp_path))
        try:
            run_round_trip(served.base_url)
        finally:
            sys.path.remove(str(tmp_path))
            for name in [m for m in sys.modules if m.startswith("signoff_generated")]:
                del sys.modules[name]


def run_round_trip(base_url: str) -> None:
    def api(name: str):  # type: ignore[no-untyped-def]
        return importlib.import_module(f"signoff_generated.api.{name}")

    def model(name: str):  # type: ignore[no-untyped-def]
        return importlib.import_module(f"signoff_generated.models.{name}")

    client_module = importlib.import_module("signoff_generated.client")

    def client(key: str):  # type: ignore[no-untyped-def]
        return client_module.AuthenticatedClient(base_url=base_url, token=key)

    create_key = api("api_keys.create_api_key_api_keys_post")
    key_request = model("create_api_key_api_keys_post_create_api_key_request")
    keys = {}
    for role, principal in (("producer", "aml-bot"), ("reviewer", "usr_op_771")):
        created = create_key.sync_detailed(
            client=client(ADMIN),
            body=key_request.CreateApiKeyApiKeysPostCreateApiKeyRequest.from_dict(
                {"role": role, "principal_id": principal}
            ),
        )
        assert created.status_code == 201, created.content
        keys[role] = created.parsed.key

    # The README's escalation, fresh, with the precheck hash over what the client sends.
    escalation = json.loads((ROOT / "tests/data/example-escalation.json").read_text())
    escalation |= {"escalation_id": str(uuid.uuid4()), "idempotency_key": f"gen-{uuid.uuid4()}"}
    escalate = api("tasks.escalate_tasks_escalate_post")
    request_model = model("escalate_tasks_escalate_post_hitl_escalation_request")
    body = request_model.EscalateTasksEscalatePostHITLEscalationRequest.from_dict(escalation)
    sent = body.to_dict()["diagnostic_bundle"]["attempted_actions"]
    body.precheck_hash = hashlib.sha256(rfc8785.dumps(sent)).hexdigest()
    created = escalate.sync_detailed(client=client(keys["producer"]), body=body)
    assert created.status_code == 201, created.content
    assert created.headers["location"] == f"/tasks/{created.parsed.id}"
    task_id = created.parsed.id

    claim = api("tasks.claim_tasks_task_id_claim_post")
    granted = claim.sync_detailed(task_id, client=client(keys["reviewer"]))
    assert granted.status_code == 200, granted.content
    lease_token = granted.parsed.lease_token

    resolve = api("tasks.resolve_tasks_task_id_resolve_post")
    resolve_model = model("resolve_tasks_task_id_resolve_post_resolve_request")
    decision = json.loads((ROOT / "tests/data/example-resolve.json").read_text())
    resolved = resolve.sync_detailed(
        task_id,
        client=client(keys["reviewer"]),
        body=resolve_model.ResolveTasksTaskIdResolvePostResolveRequest.from_dict(decision),
        x_lease_token=lease_token,
    )
    assert resolved.status_code == 200, resolved.content
    assert str(resolved.parsed.status) == "RESOLVED"
    assert str(resolved.parsed.decision) == "REJECTED"

    events = api("tasks.task_events_tasks_task_id_events_get")
    trail = events.sync_detailed(task_id, client=client(keys["reviewer"]))
    assert trail.status_code == 200, trail.content
    assert [e.type_ for e in trail.parsed.items][-1] == "task.resolved"

    # A refusal parses as the documented problem, its error_code one of the enum's.
    again = resolve.sync_detailed(
        task_id,
        client=client(keys["reviewer"]),
        body=resolve_model.ResolveTasksTaskIdResolvePostResolveRequest.from_dict(
            decision | {"decision": "APPROVED"}
        ),
        x_lease_token=lease_token,
    )
    assert again.status_code == 409, again.content
    assert str(again.parsed.error_code) in {"ERR_LEASE_LOST", "ERR_STATE_CONFLICT"}
