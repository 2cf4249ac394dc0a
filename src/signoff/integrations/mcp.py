"""``signoff mcp``: Signoff's human review as Model Context Protocol tools, on stdio.

Install with ``pip install 'signoff[mcp]'``; the server talks to a running Signoff at
``SIGNOFF_URL`` with the producer key in ``SIGNOFF_API_KEY``. Tools:

* ``request_human_review`` — escalate (idempotent by ``key``); returns the task id. The same
  key with a changed ``subject`` submits a new revision of that task (it needs review
  again); other changed content is refused. The answer is about the content passed in.
* ``get_review`` — the task's status and, once a person decided, the decision and notes.
* ``wait_for_decision`` — wait (long-poll) up to ``timeout_seconds`` for the decision,
  reporting progress while it waits; with ``show_person``, a client that supports URL-mode
  elicitation is asked to open the task's review page for its user.
* ``begin_execution`` / ``complete_execution`` — pass the execution gate with the subject
  about to be acted on (its digest computed here), then report the outcome.

A refusal reaches the model as ``Error executing tool X: {"error_code", "message",
"field", …}`` (JSON). Register it with an agent runtime as the command ``signoff mcp``
with those two variables.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Literal

from mcp import types
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from signoff.client import (
    ApiError,
    AsyncExecutionRun,
    AsyncSignoff,
    DecisionTimeout,
    IdempotencyKeyReused,
    InvalidArgument,
    SignoffError,
    Task,
    digest,
)
from signoff.client import _execute_ops as execute_ops
from signoff.client import _ops as ops
from signoff.client._models import DECISIONS, Execution
from signoff.errors import ErrorCode

__all__ = ["build_server", "main"]

#: The longest one ``wait_for_decision`` call waits (agents call it again to wait on).
MAX_WAIT_SECONDS = 300
#: How often a long wait reports progress (clients that reset their timeout on progress
#: then keep the call open for as long as the person takes).
PROGRESS_EVERY_SECONDS = 10
#: The capability a client declares to open a URL for its user (URL-mode elicitation).
URL_ELICITATION = types.ClientCapabilities(
    elicitation=types.ElicitationCapability(url=types.UrlElicitationCapability())
)
#: The API's names of escalation fields → the tools' own argument names, so an error
#: names what the model passed (longest prefix first).
TOOL_FIELDS = (
    ("diagnostic_bundle.evaluator_verdict.confidence_score", "confidence"),
    ("diagnostic_bundle.evaluator_verdict.threshold", "threshold"),
    ("diagnostic_bundle.attempted_actions", "attempted_actions"),
    ("diagnostic_bundle.input_snapshot", "question"),  # the question and its context
    ("diagnostic_bundle.trace_id", "key"),
    ("timeout.after_seconds", "timeout_seconds"),
    ("timeout.outcome", "on_timeout"),
    ("timeout.group", "timeout_group"),
    ("idempotency_key", "key"),
    ("escalation_id", "key"),
)
#: Fields of a problem worth passing on to the model, besides code, message and field.
PROBLEM_DETAILS = ("reason", "task_id", "changed", "missing_fields", "current_revision")

INSTRUCTIONS = (
    "Ask a person to review work you are unsure about, or that needs a human's sign-off, "
    "before acting on it. request_human_review returns a task_id; wait_for_decision waits "
    f"for the person's decision ({', '.join(DECISIONS)}, with notes). "
    "Act only on APPROVED, and only on exactly what was reviewed: call begin_execution with "
    "the subject you are about to act on, act only if it succeeds, then complete_execution. "
    "When edited is true, a reviewer changed the subject and approved the change: act only "
    "on approved_subject. "
    "When changes_requested is true, change_request says what to change and why: call "
    "request_human_review again with the same key and the revised subject, and wait again."
)


def tool_field(field: str) -> str:
    """``field`` (as the API names it) as the tools' argument it came from."""
    for api_name, argument in TOOL_FIELDS:
        if field == api_name or field.startswith((f"{api_name}.", f"{api_name}[")):
            return argument + field[len(api_name) :]
    return field


def review_view(
    task: Task,
    *,
    revision: int | None = None,
    subject_digest: str | None = None,
    console_url: str = "",
) -> dict[str, Any]:
    """What an agent needs to know about a review. A decision is shown only when it is about
    ``revision`` and the subject of ``subject_digest``, when given. ``review_url``: the
    page where a person decides it."""
    bound = (revision is None or task.current_revision == revision) and (
        subject_digest is None or task.digest == subject_digest
    )
    # A reviewer's edit of the revision waited on (the edit is the next revision).
    bound = bound or (
        task.edited and revision is not None and task.current_revision == revision + 1
    )
    decided = task.status == "RESOLVED" and task.decision is not None and bound
    return {
        "task_id": task.id,
        "status": task.status,
        "decided": decided,
        "decision": task.decision if decided else None,
        "notes": task.notes if decided else None,
        "resolution_payload": task.resolution_payload if decided else None,
        "revision": task.current_revision,
        "digest": task.digest,
        "decided_by": task.operator_id if decided else None,
        # Approved as a reviewer edited it: act only on ``approved_subject`` (its digest is
        # what begin_execution must be given).
        "edited": decided and task.edited,
        # Sent back for changes: its own outcome, with what to change and why; revise the
        # subject (request_human_review again with the new subject) to return it to review.
        "changes_requested": decided and task.changes_requested,
        "change_request": (
            task.change_request.model_dump(mode="json")
            if decided and task.changes_requested and task.change_request
            else None
        ),
        "entity_type": task.entity_type,
        "entity_id": task.entity_id,
        "headline": task.headline.title if task.headline is not None else None,
        "review_url": f"{console_url.rstrip('/')}/console/tasks/{task.id}",
    }


def error_payload(error: SignoffError) -> dict[str, Any]:
    """A refusal as the model reads it: the stable code, the message, the offending field."""
    if isinstance(error, ApiError):
        payload: dict[str, Any] = {
            "error_code": error.error_code,
            "status": error.status,
            "message": error.message,
        }
        errors = [
            {**e, "field": tool_field(str(e["field"]))}
            for e in error.errors
            if isinstance(e, dict) and e.get("field")
        ]
        if errors:
            payload["field"] = errors[0]["field"]
            payload["errors"] = errors
        payload |= {k: error.problem[k] for k in PROBLEM_DETAILS if error.problem.get(k)}
        for listed in ("missing_fields", "changed"):
            if payload.get(listed):
                payload[listed] = [tool_field(str(f)) for f in payload[listed]]
        return payload
    if isinstance(error, InvalidArgument):
        return {
            "error_code": ErrorCode.VALIDATION.value,
            "message": error.message,
            "field": error.field,
        }
    return {"error_code": type(error).__name__, "message": error.message}


def _json_object(value: Any, field: str) -> dict[str, Any]:
    """``value`` when it is a JSON object (None: empty); else the tool's own refusal."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidArgument(
            f"{field} must be a JSON object, not {type(value).__name__}", field=field
        )
    return value


@contextmanager
def reporting(api_key: str) -> Iterator[None]:
    """Turn the SDK's exceptions into a :class:`ToolError` the model can read (any other
    exception the MCP server hides behind "Error executing tool"). Never the key."""
    try:
        yield
    except SignoffError as error:
        text = json.dumps(error_payload(error), default=str)
        if api_key:
            text = text.replace(api_key, "[redacted]")
        raise ToolError(text) from None


def _granted(call: ops.Call) -> ops.Op[Execution]:
    """One call whose answer is an execution grant."""
    response = yield call
    return Execution.model_validate(response.json())


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def build_server(
    client: AsyncSignoff, api_key: str = "", console_url: str = "http://127.0.0.1:8000"
) -> MCPServer:
    """The tools, bound to ``client``; review pages are linked under ``console_url``."""
    server = MCPServer("signoff", instructions=INSTRUCTIONS, log_level="WARNING")
    console_url = console_url.rstrip("/")
    redact = api_key
    #: Executions begun in this session, by (task id, operation id).
    runs: dict[tuple[str, str], AsyncExecutionRun] = {}

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
        approval_rule: dict[str, Any] | str | None = None,
        requested_by: str | None = None,
        metadata: dict[str, Any] | None = None,
        headline: dict[str, Any] | None = None,
        editable: list[str] | None = None,
    ) -> dict[str, Any]:
        """Ask a person to review something, once per ``key`` (calling again with the same
        key and content returns the same review; with a changed ``subject`` it submits a
        new revision, which needs review again). ``attempted_actions``: what you already
        tried, each ``{"action", "result"}``. ``subject``: the exact thing to approve (what
        you will act on), if any. ``confidence``/``threshold``: your confidence and the
        level below which a person must decide. ``timeout_seconds``: if nobody decides
        within it, the review is rejected (``on_timeout`` ``reject``), expires
        (``expire``) or goes to the group ``timeout_group`` (``escalate``); it is never
        approved for you. ``approval_rule``: decided by votes instead of one person
        (``{"approvals": 2}``, or an admin's rule by name), ``requested_by`` the person
        asking (never one of the voters). ``metadata``: your own correlation data, returned
        with the review and its events. ``headline``: what the person sees first, a
        ``title`` template over the subject by JSON Pointer (``"Refund {/amount} to
        {/customer}"``) and 2-6 labelled ``fields`` (``{"label", "pointer", "type"}``, type
        ``money``, ``date``, ``person``, ``link`` or ``text``). ``editable``: JSON Pointers
        into ``subject`` the person may edit before approving (then act on
        ``approved_subject``)."""
        now = _now()
        actions = [
            {
                "action": str(a.get("action", "")),
                "executed_at": str(a.get("executed_at") or now),
                "result": str(a.get("result", "")),
            }
            for a in attempted_actions
        ]
        with reporting(redact):
            try:
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
                    approval_rule=approval_rule,
                    requested_by=requested_by,
                    metadata=metadata,
                    headline=headline,
                    editable=editable,
                )
            except IdempotencyKeyReused as reused:
                existing = reused.task
                if subject is None or reused.changed != ["subject"] or existing is None:
                    raise
                # Only the subject changed: a new revision of the key's task.
                task = await client.revise(
                    existing, subject, expected_revision=existing.current_revision or 1
                )
            wanted = digest(subject) if subject is not None else None
            return review_view(
                task,
                revision=task.current_revision,
                subject_digest=wanted,
                console_url=console_url,
            )

    @server.tool()
    async def get_review(task_id: str, revision: int | None = None) -> dict[str, Any]:
        """The review's status; once a person decided, the decision and their notes. Pass the
        ``revision`` request_human_review answered: a decision about another is not one."""
        with reporting(redact):
            task = await client.get_task(task_id)
            return review_view(task, revision=revision, console_url=console_url)

    @server.tool()
    async def wait_for_decision(
        task_id: str,
        ctx: Context,
        timeout_seconds: int = 45,
        revision: int | None = None,
        show_person: bool = False,
    ) -> dict[str, Any]:
        """Wait up to ``timeout_seconds`` (at most 300) for the person's decision (about
        ``revision``, when given), reporting progress every 10 s meanwhile. When ``decided``
        is false, call again to keep waiting. ``show_person``: ask your user to open the
        review page (if this client can open links), so they can decide themselves; else
        show them ``review_url``."""
        timeout = max(0, min(timeout_seconds, MAX_WAIT_SECONDS))
        with reporting(redact):
            shown = await _show_person(ctx, task_id) if show_person else None
            task, timed_out = await _wait_reporting(ctx, task_id, timeout, revision)
            if shown is not None and not timed_out:
                await ctx.request_context.session.send_elicit_complete(shown)
            view = review_view(task, revision=revision, console_url=console_url)
            if view["edited"]:  # what the approval covers is the reviewer's edit: run that
                view["approved_subject"] = await client.approved_subject(task)
            return view | {"timed_out": timed_out, "page_opened": shown is not None}

    async def _show_person(ctx: Context, task_id: str) -> str | None:
        """Ask the client to open the review page; the elicitation's id when it did. A
        client must declare URL-mode elicitation, and the session must carry requests from
        server to client during a call (the initialize handshake does; a session on the
        2026-07-28 protocol revision does not: its answers carry ``review_url`` instead)."""
        session = ctx.request_context.session
        if not (session.check_client_capability(URL_ELICITATION) and session.can_send_request):
            return None
        task = await client.get_task(task_id)
        elicitation = f"signoff-review-{task.id}"
        answer = await ctx.elicit_url(
            message=(
                f"A person's decision is needed on {task.entity_type} {task.entity_id} "
                f"({task.reason_code}). Open the review page to decide."
            ),
            url=f"{console_url}/console/tasks/{task.id}",
            elicitation_id=elicitation,
        )
        return elicitation if answer.action == "accept" else None

    async def _wait_reporting(
        ctx: Context, task_id: str, seconds: float, revision: int | None
    ) -> tuple[Task, bool]:
        """The task once settled (or after ``seconds``), and whether the time ran out."""
        loop_started = datetime.now(UTC)
        while True:
            elapsed = (datetime.now(UTC) - loop_started).total_seconds()
            await ctx.report_progress(elapsed, seconds, "waiting for a person's decision")
            chunk = max(0.0, min(PROGRESS_EVERY_SECONDS, seconds - elapsed))
            try:
                task = await client.wait_for_decision(task_id, timeout=chunk, revision=revision)
            except DecisionTimeout as waited:
                if elapsed + chunk >= seconds:
                    return waited.task, True
            else:
                return task, False

    @server.tool()
    async def begin_execution(
        task_id: str, subject: dict[str, Any], operation_id: str
    ) -> dict[str, Any]:
        """Before acting: pass the execution gate with ``subject``, exactly what you are about
        to act on. It succeeds only when a person approved this very content (and the
        approval still holds); otherwise the error says why (``reason``). Act only after it
        succeeds, once per ``operation_id``, then call complete_execution."""
        with reporting(redact):
            run = runs.get((task_id, operation_id))
            if run is None or run.digest != digest(subject):  # else: begun already
                run = client.execution(
                    task_id, subject=subject, operation_id=operation_id, wait_for_lease=0
                )
                await run.__aenter__()
                runs[(task_id, operation_id)] = run
            return {
                "approved": True,
                "task_id": run.task_id,
                "operation_id": operation_id,
                "revision": run.revision,
                "digest": run.digest,
                "pending_actions": run.pending,
                "already_completed": run.completed,
                "execution_token": run.token,
                "review_url": f"{console_url}/console/tasks/{run.task_id}",
            }

    @server.tool()
    async def complete_execution(
        task_id: str,
        operation_id: str,
        succeeded: bool = True,
        result: Any = None,
        execution_token: str | None = None,
    ) -> dict[str, Any]:
        """After acting on what begin_execution allowed: report that it ``succeeded`` (or
        not), with ``result`` a JSON object (what you did, or the error). From another
        session than begin_execution's, pass the ``execution_token`` it answered."""
        with reporting(redact):
            outcome = _json_object(result, "result")  # refused before anything is closed
            run = runs.get((task_id, operation_id))
            if run is None:
                execution = await _complete_elsewhere(
                    task_id, operation_id, execution_token, succeeded, outcome
                )
            else:
                execution = None
                for action_id in run.pending:
                    if succeeded:
                        execution = await run.complete(action_id, outcome)
                    else:
                        execution = await run.fail(action_id, outcome)
                runs.pop((task_id, operation_id), None)
                await run.__aexit__(None, None, None)
            return {
                "task_id": task_id,
                "operation_id": operation_id,
                "execution_status": execution.execution_status if execution else "COMPLETED",
                "review_url": f"{console_url}/console/tasks/{task_id}",
            }

    async def _complete_elsewhere(
        task_id: str,
        operation_id: str,
        token: str | None,
        succeeded: bool,
        outcome: dict[str, Any],
    ) -> Execution | None:
        """Report an execution begun in another session, under its fencing token."""
        if not token:
            raise InvalidArgument(
                "no execution of this task and operation_id was begun in this session; "
                "pass the execution_token begin_execution answered, or call it first",
                field="execution_token",
            )
        runner = client._runner  # the SDK's own operations, by token
        # The token proves this caller holds the live execution (a fenced one is refused);
        # the same operation then takes it back with its actions, as a restarted executor
        # does, for the revision and digest the gate approved.
        await runner.run(execute_ops.renew_execution(task_id, token))
        task = await client.get_task(task_id)
        body = {"revision": task.approved_revision, "digest": task.approved_digest,
                "operation_id": operation_id}  # fmt: skip
        segment = ops.segment(task_id, "task_id")
        grant = ops.Call("POST", f"/tasks/{segment}/execute", json=body, retry=True, has_body=True)
        execution: Execution = await runner.run(_granted(grant))
        for action in [a for a in execution.actions if a.status != "COMPLETED"]:
            execution = await runner.run(
                execute_ops.finish_action(
                    task_id, action.id, succeeded=succeeded, operation_id=operation_id,
                    result=outcome, token=execution.execution_token or token,
                )
            )  # fmt: skip
        return execution

    return server


def main() -> None:
    """Serve on stdio until the client closes it."""
    url = os.environ.get("SIGNOFF_URL", "http://127.0.0.1:8000")
    key = os.environ.get("SIGNOFF_API_KEY", "")
    if not key.strip():
        raise SystemExit("SIGNOFF_API_KEY (a producer key) is required")
    # Where people open review pages: the public address, when the API is reached another way.
    console = os.environ.get("SIGNOFF_CONSOLE_URL") or url
    server = build_server(AsyncSignoff(url, key), key, console)
    # The HTTP client's request lines are not the agent's business (stdout is the
    # protocol; stderr is the runtime's log).
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)
    server.run("stdio")
