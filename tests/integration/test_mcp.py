"""``signoff mcp`` driven by the official MCP SDK's client over stdio, against a real
Signoff (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.support import LiveServer


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result
    content = result.structured_content
    assert isinstance(content, dict)
    return content.get("result", content) if set(content) == {"result"} else content


def test_an_agent_asks_for_review_over_mcp_and_gets_the_decision(server: LiveServer) -> None:
    producer = server.new_client("producer")
    editor = server.new_client("reviewer")
    entity = f"draft-{uuid.uuid4().hex[:8]}"
    parameters = StdioServerParameters(
        command=sys.executable,
        args=["-m", "signoff", "mcp"],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")},
            "SIGNOFF_URL": server.base_url,
            "SIGNOFF_API_KEY": str(producer.key),
        },
    )

    async def agent() -> dict[str, Any]:
        async with Client(parameters) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            assert {"request_human_review", "get_review", "wait_for_decision"} <= tools
            arguments = {
                "key": f"mcp-{entity}",
                "entity_type": "email",
                "entity_id": entity,
                "question": "May I send this refund e-mail?",
                "attempted_actions": [{"action": "policy_check", "result": "refund above 500"}],
                "confidence": 0.5,
                "threshold": 0.9,
                "subject": {"to": "customer@example.com", "body": "Your refund of 620 EUR"},
            }
            asked = structured(await client.call_tool("request_human_review", arguments))
            again = structured(await client.call_tool("request_human_review", arguments))
            assert again["task_id"] == asked["task_id"]  # the same key: the same review
            assert asked["status"] == "PENDING_REVIEW"
            assert asked["decided"] is False

            waited = structured(
                await client.call_tool(
                    "wait_for_decision", {"task_id": asked["task_id"], "timeout_seconds": 0}
                )
            )
            assert waited["timed_out"] is True

            # A person decides (outside MCP), then the agent reads it.
            claimed = editor.claim(asked["task_id"]).json()
            resolved = editor.resolve(
                asked["task_id"],
                claimed["lease_token"],
                {
                    "decision": "REJECTED",
                    "notes": "check the amount with finance first",
                    "revision": claimed["current_revision"],
                    "digest": claimed["digest"],
                },
            )
            assert resolved.status_code == 200, resolved.text
            decided = structured(
                await client.call_tool(
                    "wait_for_decision", {"task_id": asked["task_id"], "timeout_seconds": 30}
                )
            )
            got = structured(await client.call_tool("get_review", {"task_id": asked["task_id"]}))
            assert got["decision"] == decided["decision"]
            return decided

    decided = asyncio.run(agent())
    assert decided["decided"] is True
    assert decided["decision"] == "REJECTED"
    assert decided["notes"] == "check the amount with finance first"
    assert decided["timed_out"] is False
