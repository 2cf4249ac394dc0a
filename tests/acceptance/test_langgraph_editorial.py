"""``examples/langgraph_editorial.py demo`` against a real ``signoff serve``: a LangGraph
agent with a SQLite checkpointer; revision 1 approved, a figure changes after the approval,
the gate refuses, revision 2 is approved and published exactly once, although the agent is
killed between the gate and its report and the approval's webhook arrives twice."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx

from tests.acceptance.test_cli import serve

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "langgraph_editorial.py"
ADMIN_KEY = "langgraph-editorial-admin-key"
SERVE_ENV = {
    "SIGNOFF_BOOTSTRAP_ADMIN_KEY": ADMIN_KEY,
    "SIGNOFF_WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
    "SIGNOFF_DISPATCHER_POLL_SECONDS": "0.1",
    "SIGNOFF_WEBHOOK_RETRY_SCHEDULE": "0,1,1,1,2,2,5,10",
    # The killed agent's execution lease lapses quickly, so its successor may take over.
    "SIGNOFF_EXECUTION_LEASE_SECONDS": "2",
}


def test_the_editorial_agent_publishes_the_approved_revision_exactly_once(tmp_path: Path) -> None:
    workdir = tmp_path / "newsroom"
    with serve(tmp_path, env=SERVE_ENV) as served:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
        result = subprocess.run(
            [sys.executable, str(EXAMPLE), "demo", "--signoff-url", served.base_url,
             "--admin-key", ADMIN_KEY, "--workdir", str(workdir), "--wait-seconds", "60"],
            cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        output = result.stdout + result.stderr
        assert result.returncode == 0, output
        task_id = re.search(r"approved revision 1 of task (\S+)", output).group(1)  # type: ignore[union-attr]
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        task = httpx.get(f"{served.base_url}/tasks/{task_id}", headers=admin).json()
        events = httpx.get(f"{served.base_url}/tasks/{task_id}/events", headers=admin).json()

    # Signoff's side: revision 2 approved and executed; revision 1's approval refused at the
    # gate once the figure changed, and invalidated by the new revision.
    assert (task["status"], task["decision"], task["current_revision"]) == (
        "RESOLVED",
        "APPROVED",
        2,
    )
    assert task["execution_status"] == "COMPLETED"
    types = [e["type"] for e in events["items"]]
    refused = [e for e in events["items"] if e["type"] == "task.execution_refused"]
    assert [e["details"].get("reason") for e in refused] == ["STALE_DIGEST"]
    assert types.index("task.execution_refused") < types.index("task.approval_invalidated")
    assert types.count("task.action_completed") == 1
    # The killed agent's execution lease lapsed and its successor took the execution over.
    assert types.count("task.execution_started") == 2

    # The story as the demo told it.
    assert "the gate refused: STALE_DIGEST" in output
    assert "killed between the gate and reporting the publication" in output
    assert "restarted; continuing the thread from its checkpoint" in output

    # The agent's side: one publication, of revision 2, although the side effect ran twice
    # (before the kill, and again by the restarted agent) and the approval arrived twice.
    newsroom = sqlite3.connect(workdir / "newsroom.db")
    published = newsroom.execute("SELECT operation_id, revision, body FROM publications").fetchall()
    assert len(published) == 1
    assert published[0][1] == 2
    assert "2.3%" in published[0][2]
    calls = [o for (o,) in newsroom.execute("SELECT outcome FROM publish_calls ORDER BY at")]
    assert calls == ["published", "already published"]
    delivered = re.search(r"approval of revision 2 \(\S+\) arrived (\d+) times", output)
    assert delivered is not None
    assert int(delivered.group(1)) >= 2
    summary = re.search(r"summary: publications: (.*)", output)
    assert summary is not None
    assert json.loads(summary.group(1))[0][1] == 2
