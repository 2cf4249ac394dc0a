"""The TypeScript examples (``examples/typescript``) run against a real ``signoff serve``
on both engines with a scripted model: the agent asks, a person decides in Signoff, the
agent resumes with the answer and the approved tool runs once — also when the run is
resumed twice, or by two processes at once."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.faults.harness import service_env
from tests.processes import Server, wait_for
from tests.support import ADMIN_KEY
from tests.typescript import EXAMPLES, build, node


@pytest.fixture(scope="module")
def built() -> None:
    build()


def _key(admin: httpx.Client, role: str, principal: str) -> str:
    made = admin.post("/api-keys", json={"role": role, "principal_id": principal})
    assert made.status_code == 201, made.text
    return str(made.json()["key"])


def _approve_the_pending(base_url: str, reviewer: str, entity_type: str) -> dict[str, object]:
    """Claim the one task of ``entity_type`` waiting for review and approve it."""
    headers = {"Authorization": f"Bearer {reviewer}"}
    with httpx.Client(base_url=base_url, headers=headers) as r:

        def pending() -> list[dict[str, object]]:
            query = {"status": "PENDING_REVIEW", "entity_type": entity_type}
            return list(r.get("/tasks", params=query).json()["items"])

        wait_for(pending, what=f"a {entity_type} task to review")
        (task,) = pending()
        lease = r.post(f"/tasks/{task['id']}/claim").json()
        body = {
            "decision": "APPROVED",
            "revision": lease["current_revision"],
            "digest": lease["digest"],
        }
        resolved = r.post(
            f"/tasks/{task['id']}/resolve",
            json=body,
            headers={"X-Lease-Token": lease["lease_token"]},
        )
        assert resolved.status_code == 200, resolved.text
        return dict(lease)


def test_the_vercel_ai_example_resumes_with_the_persons_approval(
    built: None, database_url: str, tmp_path: Path
) -> None:
    with Server(service_env(database_url), tmp_path / "serve.log") as server:
        with httpx.Client(
            base_url=server.base_url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}
        ) as a:
            producer, reviewer = _key(a, "producer", "refund-agent"), _key(a, "reviewer", "rita")
        env = {
            **os.environ,
            "SIGNOFF_URL": server.base_url,
            "SIGNOFF_API_KEY": producer,
            "RUN_ID": "ci",
        }
        run = subprocess.Popen(
            ["node", "vercel_ai_refund.mjs"],
            cwd=EXAMPLES,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            lease = _approve_the_pending(server.base_url, reviewer, "refund")
            output, _ = run.communicate(timeout=120)
        finally:
            if run.poll() is None:
                run.kill()
        assert run.returncode == 0, output
        assert json.loads(output.strip().splitlines()[-1]) == {
            "approved": [True],
            "refunds": [{"customer": "c-17", "amount_eur": 50}],
            "text": "Done.",
        }
        with httpx.Client(
            base_url=server.base_url, headers={"Authorization": f"Bearer {producer}"}
        ) as p:
            task = p.get(f"/tasks/{lease['id']}").json()
            approved = p.get(f"/tasks/{lease['id']}/revisions/1").json()["subject"]
        assert task["execution_status"] == "COMPLETED"
        # What the person approved is the tool call, input and all.
        assert approved == {"tool": "refund", "input": {"customer": "c-17", "amount_eur": 50}}


def _agents_env(server: Server, tmp_path: Path) -> tuple[dict[str, str], str]:
    """The example's environment with a fresh producer key, and a reviewer's key."""
    with httpx.Client(
        base_url=server.base_url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}
    ) as a:
        producer, reviewer = _key(a, "producer", "agents"), _key(a, "reviewer", "rita")
    env = {
        **os.environ,
        "SIGNOFF_URL": server.base_url,
        "SIGNOFF_API_KEY": producer,
        "STATE_FILE": str(tmp_path / "run-state.json"),
        "RUN_ID": "ci",
    }
    return env, reviewer


def _resume(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["node", "openai_agents_refund.mjs", "resume"],
        cwd=EXAMPLES,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )


def _outcome(process: subprocess.Popen[str]) -> dict[str, Any]:
    try:
        output, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output
    return dict(json.loads(output.strip().splitlines()[-1]))


def _completions(base_url: str, producer: str, task_id: object) -> list[object]:
    """The task's completed actions (their audit events) and its execution status."""
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {producer}"}) as p:
        task = p.get(f"/tasks/{task_id}").json()
        events = p.get(f"/tasks/{task_id}/events").json()["items"]
    done = [e["details"]["result"] for e in events if e["type"] == "task.action_completed"]
    return [task["execution_status"], *done]


REFUNDED = {"customer": "c-17", "amount_eur": 50}


def test_the_openai_agents_example_resumes_in_another_process_with_the_decision(
    built: None, database_url: str, tmp_path: Path
) -> None:
    with Server(service_env(database_url), tmp_path / "serve.log") as server:
        env, reviewer = _agents_env(server, tmp_path)
        asked = node("openai_agents_refund.mjs", "ask", env=env, cwd=EXAMPLES)
        assert json.loads(asked.strip().splitlines()[-1]) == {"asked": 1}
        # The asking process has ended; a new one restores the run state and waits.
        resumed = _resume(env)
        lease = _approve_the_pending(server.base_url, reviewer, "refund")
        assert _outcome(resumed) == {
            "decisions": ["APPROVED"],
            "refunds": [REFUNDED],
            "outputs": ["refunded 50 EUR"],
            "text": "Done.",
        }
        # Resuming the same saved state again finds the call already run: the model gets
        # the recorded output, and nothing is refunded twice.
        assert _outcome(_resume(env)) == {
            "decisions": ["APPROVED"],
            "refunds": [],
            "outputs": ["refunded 50 EUR"],
            "text": "Done.",
        }
        completions = _completions(server.base_url, env["SIGNOFF_API_KEY"], lease["id"])
        assert completions == ["COMPLETED", {"output": "refunded 50 EUR"}]


def test_two_processes_resuming_the_openai_agents_example_refund_once(
    built: None, database_url: str, tmp_path: Path
) -> None:
    with Server(service_env(database_url), tmp_path / "serve.log") as server:
        env, reviewer = _agents_env(server, tmp_path)
        node("openai_agents_refund.mjs", "ask", env=env, cwd=EXAMPLES)
        both = [_resume(env), _resume(env)]  # both wait for the same decision
        lease = _approve_the_pending(server.base_url, reviewer, "refund")
        outcomes = [_outcome(process) for process in both]
        assert [o["outputs"] for o in outcomes] == [["refunded 50 EUR"]] * 2
        assert sorted(len(o["refunds"]) for o in outcomes) == [0, 1]
        completions = _completions(server.base_url, env["SIGNOFF_API_KEY"], lease["id"])
        assert completions == ["COMPLETED", {"output": "refunded 50 EUR"}]
