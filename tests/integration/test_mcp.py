"""``signoff mcp`` driven by the official MCP SDK's client over stdio, against a real
Signoff (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sys
import uuid
from pathlib import Path
from typing import Any

from mcp import Client, types
from mcp.client.stdio import StdioServerParameters

from signoff.client import digest
from tests.support import Client as HttpClient
from tests.support import LiveServer


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result
    content = result.structured_content
    assert isinstance(content, dict)
    return content.get("result", content) if set(content) == {"result"} else content


def refusal(result: Any) -> dict[str, Any]:
    """The JSON a refused tool call carries after ``Error executing tool X: ``."""
    assert result.is_error, result
    text = result.content[0].text
    prefix, _, payload = text.partition(": ")
    assert prefix.startswith("Error executing tool"), text
    answer: dict[str, Any] = json.loads(payload)
    return answer


def mcp_parameters(server: LiveServer, key: str, stderr: Path | None = None) -> Any:
    """``signoff mcp`` as an agent runtime starts it (its stderr into ``stderr``)."""
    command = shlex.join([sys.executable, "-m", "signoff", "mcp"])
    return StdioServerParameters(
        command="/bin/sh",
        args=["-c", f"exec {command} 2>>{shlex.quote(str(stderr or os.devnull))}"],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")},
            "SIGNOFF_URL": server.base_url,
            "SIGNOFF_API_KEY": key,
        },
    )


def decide(editor: HttpClient, task_id: str, decision: str = "APPROVED") -> None:
    claimed = editor.claim(task_id).json()
    resolved = editor.resolve(
        task_id,
        claimed["lease_token"],
        {
            "decision": decision,
            "notes": "checked",
            "revision": claimed["current_revision"],
            "digest": claimed["digest"],
        },
    )
    assert resolved.status_code == 200, resolved.text


def review_arguments(key: str, text: str, question: str = "May I send this?") -> dict[str, Any]:
    return {
        "key": key,
        "entity_type": "email",
        "entity_id": key,
        "question": question,
        "attempted_actions": [{"action": "policy_check", "result": "above the limit"}],
        "confidence": 0.5,
        "threshold": 0.9,
        "subject": {"text": text},
    }


def test_an_approval_is_never_reported_for_other_content(server: LiveServer) -> None:
    producer = server.new_client("producer")
    editor = server.new_client("reviewer")
    key = f"refund-{uuid.uuid4().hex[:8]}"
    small, large = "We will refund 50 EUR.", "We will refund 5000 EUR."

    async def agent() -> None:
        async with Client(mcp_parameters(server, str(producer.key))) as client:
            asked = structured(
                await client.call_tool("request_human_review", review_arguments(key, small))
            )
            decide(editor, asked["task_id"])
            approved = structured(
                await client.call_tool("request_human_review", review_arguments(key, small))
            )
            assert (approved["decided"], approved["decision"]) == (True, "APPROVED")

            # The same key with other content: a new revision, to be reviewed again.
            changed = structured(
                await client.call_tool("request_human_review", review_arguments(key, large))
            )
            assert changed["task_id"] == asked["task_id"]
            assert changed["decided"] is False
            assert changed["decision"] is None
            assert changed["status"] == "PENDING_REVIEW"
            assert (changed["revision"], changed["digest"]) == (2, digest({"text": large}))

            # Acting goes through the gate with what is about to be sent.
            for text, reason in ((large, "NOT_DECIDED"), (small, "APPROVAL_INVALIDATED")):
                gate = {
                    "task_id": asked["task_id"],
                    "subject": {"text": text},
                    "operation_id": "s1",
                }
                refused = refusal(await client.call_tool("begin_execution", gate))
                assert refused["error_code"] == "ERR_APPROVAL_NOT_VALID"
                assert refused["reason"] == reason

            waited = structured(
                await client.call_tool(
                    "wait_for_decision",
                    {"task_id": asked["task_id"], "timeout_seconds": 0, "revision": 2},
                )
            )
            assert (waited["decided"], waited["timed_out"]) == (False, True)
            decide(editor, asked["task_id"])
            got = structured(
                await client.call_tool("get_review", {"task_id": asked["task_id"], "revision": 2})
            )
            assert (got["decided"], got["decision"], got["digest"]) == (
                True,
                "APPROVED",
                digest({"text": large}),
            )
            gate = {
                "task_id": asked["task_id"],
                "subject": {"text": large},
                "operation_id": "send-2",
            }
            begun = structured(await client.call_tool("begin_execution", gate))
            assert begun["approved"] is True
            assert begun["digest"] == digest({"text": large})
            again = structured(await client.call_tool("begin_execution", gate))
            assert again == begun  # begun already in this session: the same grant
            done = structured(
                await client.call_tool(
                    "complete_execution",
                    {
                        "task_id": asked["task_id"],
                        "operation_id": "send-2",
                        "result": {"sent": True},
                    },
                )
            )
            assert done["execution_status"] == "COMPLETED"

            # Other content that is not the subject cannot be a revision: refused.
            other = refusal(
                await client.call_tool(
                    "request_human_review", review_arguments(key, large, question="Other?")
                )
            )
            assert other["error_code"] == "ERR_IDEMPOTENCY_KEY_REUSED"
            assert other["field"] == "question"  # the tool's own argument
            assert other["task_id"] == asked["task_id"]

    asyncio.run(agent())


def test_refusals_reach_the_model_with_their_code_and_field_and_never_the_key(
    server: LiveServer, tmp_path: Path
) -> None:
    producer = server.new_client("producer")
    key = str(producer.key)
    stderr = tmp_path / "stderr.log"

    async def agent() -> None:
        async with Client(mcp_parameters(server, key, stderr)) as client:
            missing = refusal(await client.call_tool("get_review", {"task_id": str(uuid.uuid4())}))
            assert missing["error_code"] == "ERR_TASK_NOT_FOUND"
            assert missing["status"] == 404
            assert missing["message"]
            invalid = review_arguments(f"k-{uuid.uuid4().hex[:8]}", "hello")
            invalid["entity_type"] = ""
            refused = refusal(await client.call_tool("request_human_review", invalid))
            assert refused["error_code"] == "ERR_VALIDATION"
            assert refused["field"] == "entity_type"
            # An id is one path segment: it never reaches another route with this key.
            for task_id in ("../webhook-endpoints", "..", "x/../../me"):
                escaped = refusal(await client.call_tool("get_review", {"task_id": task_id}))
                assert escaped["status"] == 404, escaped
            empty = refusal(await client.call_tool("get_review", {"task_id": " "}))
            assert (empty["error_code"], empty["field"]) == ("ERR_VALIDATION", "task_id")
            for answer in (missing, refused, escaped, empty):
                assert key not in json.dumps(answer)

    asyncio.run(agent())
    logged = stderr.read_text()
    assert "HTTP Request" not in logged
    assert key not in logged


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


def test_a_long_wait_opens_the_review_page_for_the_user_and_reports_progress(
    server: LiveServer,
) -> None:
    """URL-mode elicitation: the client is asked to open the task's console page; the
    person decides there (here: over HTTP, as the page would); the one call returns the
    decision, having reported progress meanwhile, and completes the elicitation."""
    producer = server.new_client("producer")
    editor = server.new_client("reviewer")
    key = f"page-{uuid.uuid4().hex[:8]}"
    opened: list[str] = []
    progress: list[tuple[float, float | None, str | None]] = []

    async def open_page(_context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestURLParams)
        opened.append(params.url)
        task_id = params.url.rsplit("/", 1)[-1]
        await asyncio.to_thread(decide, editor, task_id, "REJECTED")  # the person, on the page
        return types.ElicitResult(action="accept")

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async def agent() -> dict[str, Any]:
        async with Client(
            mcp_parameters(server, str(producer.key)),
            elicitation_callback=open_page,
            mode="legacy",  # the initialize handshake: requests from server to client mid-call
        ) as client:
            asked = structured(
                await client.call_tool("request_human_review", review_arguments(key, "Hi"))
            )
            waited = await client.call_tool(
                "wait_for_decision",
                {"task_id": asked["task_id"], "timeout_seconds": 120, "show_person": True},
                progress_callback=on_progress,
            )
            return asked | {"waited": structured(waited)}

    result = asyncio.run(agent())
    assert opened == [f"{server.base_url}/console/tasks/{result['task_id']}"]
    waited = result["waited"]
    assert (waited["decided"], waited["decision"], waited["timed_out"]) == (
        True,
        "REJECTED",
        False,
    )
    assert waited["page_opened"] is True
    assert progress
    assert progress[0][1] == 120
    assert progress[0][2] == "waiting for a person's decision"


def test_without_a_back_channel_the_answer_carries_the_review_url(server: LiveServer) -> None:
    """A client on the 2026-07-28 revision (no server-to-client request during a call), or
    one that cannot open links: the wait is the same, and the answer links the page."""
    producer = server.new_client("producer")
    key = f"nolink-{uuid.uuid4().hex[:8]}"

    async def agent() -> dict[str, Any]:
        async def refuse(_context: Any, _params: Any) -> types.ElicitResult:
            raise AssertionError("no page may be opened without a back-channel")

        async with Client(
            mcp_parameters(server, str(producer.key)), elicitation_callback=refuse
        ) as client:
            asked = structured(
                await client.call_tool("request_human_review", review_arguments(key, "Hi"))
            )
            waited = await client.call_tool(
                "wait_for_decision",
                {"task_id": asked["task_id"], "timeout_seconds": 0, "show_person": True},
            )
            return structured(waited)

    waited = asyncio.run(agent())
    assert (waited["decided"], waited["timed_out"], waited["page_opened"]) == (False, True, False)
    assert waited["review_url"] == f"{server.base_url}/console/tasks/{waited['task_id']}"
