"""``signoff mcp`` at the SDK's level, through the official MCP client: approval rules,
requesters and metadata; a JSON ``result`` (a wrong type refused in the tools' own JSON,
the execution still completable); an execution completed from another session by its
operation id and token; ``review_url`` in every answer; errors in the tools' own words."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from mcp import Client

from tests.integration.test_mcp import (
    decide,
    mcp_parameters,
    refusal,
    review_arguments,
    structured,
)
from tests.support import LiveServer


def _url(server: LiveServer, task_id: str) -> str:
    return f"{server.base_url}/console/tasks/{task_id}"


def test_reviews_take_rules_requesters_and_metadata_and_every_answer_links_the_page(
    server: LiveServer,
) -> None:
    key = str(server.new_client("producer", "mcp-agent").key)
    voters = [server.new_client("reviewer", f"voter-{n}") for n in range(2)]
    entity = f"vote-{uuid.uuid4().hex[:8]}"

    async def agent() -> dict[str, Any]:
        async with Client(mcp_parameters(server, key)) as client:
            arguments = review_arguments(entity, "wire 5,000 EUR") | {
                "approval_rule": {"approvals": 2},
                "requested_by": "rita",
                "metadata": {"run": "r-9"},
            }
            asked = structured(await client.call_tool("request_human_review", arguments))
            assert asked["review_url"] == _url(server, asked["task_id"])
            for voter in voters:
                task = voter.get(f"/tasks/{asked['task_id']}").json()
                body = {"decision": "APPROVED", "revision": task["current_revision"],
                        "digest": task["digest"]}  # fmt: skip
                voted = voter.post(f"/tasks/{asked['task_id']}/votes", json=body)
                assert voted.status_code == 200, voted.text
            got = structured(await client.call_tool("get_review", {"task_id": asked["task_id"]}))
            assert got["review_url"] == _url(server, asked["task_id"])
            return got

    got = asyncio.run(agent())
    assert (got["decided"], got["decision"]) == (True, "APPROVED")
    with server.client(key) as producer:
        task = producer.get(f"/tasks/{got['task_id']}").json()
    assert task["approval_rule"]
    assert task["approval_progress"]["required"] == 2
    assert task["requested_by"] == "rita"
    assert task["metadata"] == {"run": "r-9"}
    assert len(task["votes"]) == 2


def test_an_execution_begun_in_one_session_is_completed_from_another(
    server: LiveServer,
) -> None:
    key = str(server.new_client("producer").key)
    editor = server.new_client("reviewer")
    entity = f"send-{uuid.uuid4().hex[:8]}"
    subject = {"text": "Your refund is on its way."}

    async def first_session() -> dict[str, Any]:
        async with Client(mcp_parameters(server, key)) as client:
            arguments = review_arguments(entity, subject["text"])
            asked = structured(await client.call_tool("request_human_review", arguments))
            decide(editor, asked["task_id"])
            gate = {"task_id": asked["task_id"], "subject": subject, "operation_id": entity}
            begun = structured(await client.call_tool("begin_execution", gate))
            assert begun["review_url"] == _url(server, asked["task_id"])
            # A result that is not a JSON object: refused in the tools' own JSON, and the
            # execution stays open for a corrected report.
            wrong = refusal(
                await client.call_tool(
                    "complete_execution",
                    {"task_id": asked["task_id"], "operation_id": entity, "result": "sent"},
                )
            )
            assert (wrong["error_code"], wrong["field"]) == ("ERR_VALIDATION", "result")
            return begun

    async def second_session(begun: dict[str, Any]) -> dict[str, Any]:
        async with Client(mcp_parameters(server, key)) as client:
            report = {"task_id": begun["task_id"], "operation_id": entity,
                      "result": {"message_id": "m-1"}}  # fmt: skip
            without = refusal(await client.call_tool("complete_execution", report))
            assert without["field"] == "execution_token"
            report["execution_token"] = begun["execution_token"]
            return structured(await client.call_tool("complete_execution", report))

    begun = asyncio.run(first_session())
    assert begun["execution_token"]
    done = asyncio.run(second_session(begun))
    assert done["execution_status"] == "COMPLETED"
    assert done["review_url"] == _url(server, begun["task_id"])
    with server.client(key) as producer:
        task = producer.get(f"/tasks/{begun['task_id']}").json()
    assert task["execution_status"] == "COMPLETED"


def test_errors_name_the_tools_own_arguments(server: LiveServer) -> None:
    key = str(server.new_client("producer").key)

    async def agent() -> dict[str, Any]:
        async with Client(mcp_parameters(server, key)) as client:
            arguments = review_arguments(f"k-{uuid.uuid4().hex[:8]}", "hello")
            arguments["attempted_actions"] = []
            return refusal(await client.call_tool("request_human_review", arguments))

    refused = asyncio.run(agent())
    assert refused["error_code"] == "ERR_INSUFFICIENT_CONTEXT_PROOF"
    assert refused["field"] == "attempted_actions"
    assert refused["missing_fields"] == ["attempted_actions"]


def test_a_review_takes_a_headline_and_every_answer_names_it(server: LiveServer) -> None:
    key = str(server.new_client("producer").key)
    entity = f"wire-{uuid.uuid4().hex[:8]}"

    async def agent() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with Client(mcp_parameters(server, key)) as client:
            arguments = review_arguments(entity, "wire 5,000 EUR") | {
                "headline": {"title": "Send “{/text}”"}
            }
            asked = structured(await client.call_tool("request_human_review", arguments))
            got = structured(await client.call_tool("get_review", {"task_id": asked["task_id"]}))
            broken = refusal(
                await client.call_tool(
                    "request_human_review",
                    review_arguments(f"{entity}-2", "x") | {"headline": {"title": "{/nope}"}},
                )
            )
            return asked, got, broken

    asked, got, broken = asyncio.run(agent())
    assert asked["headline"] == got["headline"] == "Send “wire 5,000 EUR”"
    assert broken["error_code"] == "ERR_HEADLINE_FIELD"
    with server.client(key) as producer:
        task = producer.get(f"/tasks/{asked['task_id']}").json()
    assert task["headline"]["title"] == "Send “wire 5,000 EUR”"
