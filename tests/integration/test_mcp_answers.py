"""MCP: an agent asked for changes revises and resubmits; a reviewer's edit comes back as
what to act on (SQLite and PostgreSQL, through ``signoff mcp`` over stdio)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from mcp import Client

from signoff.domain.digests import json_digest
from tests.integration.test_mcp import mcp_parameters, review_arguments, structured
from tests.support import LiveServer


def test_an_agent_revises_on_feedback_then_acts_on_the_reviewers_edit(
    server: LiveServer,
) -> None:
    producer = server.new_client("producer")
    editor = server.new_client("reviewer", "editor-1")
    key = f"mcp-{uuid.uuid4().hex[:8]}"
    first = {"text": "Pay 100 EUR to ACME", "memo": ""}
    second = {"text": "Pay 100 EUR to ACME Ltd", "memo": ""}
    edited = {"text": "Pay 100 EUR to ACME Ltd", "memo": "invoice 7"}

    def decide(body: dict[str, Any]) -> None:
        claimed = editor.claim(task_id).json()
        pin = {"revision": claimed["current_revision"], "digest": claimed["digest"]}
        answer = editor.resolve(task_id, claimed["lease_token"], pin | body)
        assert answer.status_code == 200, answer.text

    async def wait(client: Client, revision: int) -> dict[str, Any]:
        arguments = {"task_id": task_id, "timeout_seconds": 30, "revision": revision}
        return structured(await client.call_tool("wait_for_decision", arguments))

    async def agent() -> tuple[dict[str, Any], dict[str, Any]]:
        nonlocal task_id
        async with Client(mcp_parameters(server, str(producer.key))) as client:
            arguments = review_arguments(key, "") | {"subject": first, "editable": ["/memo"]}
            asked = structured(await client.call_tool("request_human_review", arguments))
            task_id = asked["task_id"]
            await asyncio.to_thread(
                decide,
                {"decision": "REVISION_REQUESTED", "notes": "Full name, please.",
                 "fields": [{"path": "/text", "reason": "the payee's legal name"}]},
            )  # fmt: skip
            sent_back = await wait(client, 1)
            arguments["subject"] = second
            resubmitted = structured(await client.call_tool("request_human_review", arguments))
            assert (resubmitted["task_id"], resubmitted["revision"]) == (task_id, 2)
            await asyncio.to_thread(decide, {"decision": "APPROVED_WITH_EDITS", "subject": edited})
            return sent_back, await wait(client, 2)

    task_id = ""
    sent_back, approved = asyncio.run(agent())
    assert (sent_back["decided"], sent_back["changes_requested"]) == (True, True)
    assert sent_back["change_request"]["fields"] == [
        {"path": "/text", "reason": "the payee's legal name"}
    ]
    assert (approved["decided"], approved["edited"], approved["decision"]) == (
        True,
        True,
        "APPROVED_WITH_EDITS",
    )
    assert approved["approved_subject"] == edited
    assert approved["digest"] == json_digest(edited)
