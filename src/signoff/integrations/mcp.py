"""``signoff mcp``: Signoff's human review as Model Context Protocol tools, on stdio.

Install with ``pip install 'signoff[mcp]'``; the server talks to a running Signoff at
``SIGNOFF_URL`` with the producer key in ``SIGNOFF_API_KEY``. Tools:

* ``request_human_review`` — escalate (idempotent by ``key``); returns the task id.
* ``get_review`` — the task's status and, once a person decided, the decision and notes.
* ``wait_for_decision`` — wait (long-poll) up to ``timeout_seconds`` for the decision.

Register it with an agent runtime as the command ``signoff mcp`` with those two variables.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any, Literal

from mcp.server import MCPServer

from signoff.client import AsyncSignoff, DecisionTimeout, Task
from signoff.client._models import DECISIONS

__all__ = ["build_server", "main"]

#: The longest one ``wait_for_decision`` call waits (agents call it again to wait on).
MAX_WAIT_SECONDS = 300

INSTRUCTIONS = (
    "Ask a person to review work you are unsure about, or that needs a human's sign-off, "
    "before acting on it. request_human_review returns a task_id; wait_for_decision waits "
    f"for the person's decision ({', '.join(DECISIONS)}, with notes). "
    "Act only on APPROVED, and only on exactly what was reviewed."
)


def review_view(task: Task) -> dict[str, Any]:
    """What an agent needs to know about a review."""
    return {
        "task_id": task.id,
        "status": task.status,
        "decided": task.status == "RESOLVED",
        "decision": task.decision,
        "notes": task.notes,
        "resolution_payload": task.resolution_payload,
        "revision": task.current_revision,
        "digest": task.digest,
        "decided_by": task.operator_id,
        "entity_type": task.entity_type,
        "entity_id": task.entity_id,
    }


def build_server(client: AsyncSignoff) -> MCPServer:
    server = MCPServer("signoff", instructions=INSTRUCTIONS)

    @server.tool()
    async def request_human_review(
        key: str,
        entity_type: str,
        entity_id: str,
        question: str,
        attempted_actions: list[dict[str, str]],
        confidence: float,
        threshold: float,
        reason_code: str = "AGENT_REVIEW",
        subject: dict[str, Any] | None = None,
        context: dict[str, Any] | None = None,
        timeout_seconds: int | None = None,
        on_timeout: Literal["reject", "expire", "escalate"] = "reject",
        timeout_group: str | None = None,
    ) -> dict[str, Any]:
        """Ask a person to review something, once per ``key`` (calling again with the same
        key returns the same review). ``attempted_actions``: what you already tried, each
        ``{"action", "result"}``. ``subject``: the exact thing to approve (what you will
        act on), if any. ``confidence``/``threshold``: your confidence and the level below
        which a person must decide. ``timeout_seconds``: if nobody decides within it, the
        review is rejected (``on_timeout`` ``reject``), expires (``expire``) or goes to
        the group ``timeout_group`` (``escalate``); it is never approved for you."""
        now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        actions = [
            {
                "action": str(a.get("action", "")),
                "executed_at": str(a.get("executed_at") or now),
                "result": str(a.get("result", "")),
            }
            for a in attempted_actions
        ]
        task = await client.escalate(
            key=key,
            entity_type=entity_type,
            entity_id=entity_id,
            reason_code=reason_code,
            attempted_actions=actions,
            evaluator_verdict={"confidence_score": confidence, "threshold": threshold},
            input_snapshot={"question": question, **(context or {})},
            trace_id=f"mcp-{key}",
            subject=subject,
            timeout_seconds=timeout_seconds,
            on_timeout=on_timeout,
            timeout_group=timeout_group,
        )
        return review_view(task)

    @server.tool()
    async def get_review(task_id: str) -> dict[str, Any]:
        """The review's status; once a person decided, the decision and their notes."""
        return review_view(await client.get_task(task_id))

    @server.tool()
    async def wait_for_decision(task_id: str, timeout_seconds: int = 45) -> dict[str, Any]:
        """Wait up to ``timeout_seconds`` (at most 300; many MCP clients give up on a call
        after 60) for the person's decision. When ``decided`` is false, call again to keep
        waiting."""
        timeout = max(0, min(timeout_seconds, MAX_WAIT_SECONDS))
        try:
            task = await client.wait_for_decision(task_id, timeout=timeout)
        except DecisionTimeout as waited:
            return review_view(waited.task) | {"timed_out": True}
        return review_view(task) | {"timed_out": False}

    return server


def main() -> None:
    """Serve on stdio until the client closes it."""
    url = os.environ.get("SIGNOFF_URL", "http://127.0.0.1:8000")
    key = os.environ.get("SIGNOFF_API_KEY")
    if not key:
        raise SystemExit("SIGNOFF_API_KEY (a producer key) is required")
    server = build_server(AsyncSignoff(url, key))
    server.run("stdio")
