"""LangGraph glue: a person approves the exact version a graph is about to act on.

Install with ``pip install 'signoff[langgraph]'``. Three pieces:

* :func:`request_approval` — call it inside a node. It escalates once per thread and node
  (a re-run never makes a second task), revises the task when the subject changed, then
  ``interrupt()``s. On resume it reads the task again and returns only a decision about
  *this* task and *this* revision; a stale or foreign resume interrupts again.
* :class:`WebhookReceiver` — an ASGI app (mount it in FastAPI/Starlette, or serve it with
  uvicorn). It verifies the signature, de-duplicates by ``webhook-id``, maps the task to its
  thread through the task's ``metadata``, checks that the thread waits on that task, and
  resumes it with ``Command(resume=...)``.
* :func:`resume_when_decided` — the long-poll alternative for an agent without a public
  address: wait for the decision the thread waits on, then resume it.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from langchain_core.runnables import RunnableConfig
from langgraph.config import get_config
from langgraph.types import Command, interrupt

from signoff.client import (
    AsyncSignoff,
    IdempotencyKeyReused,
    Revision,
    Signoff,
    Task,
    WebhookEvent,
    WebhookVerificationFailed,
    digest,
    verify_event,
)
from signoff.integrations.langgraph_seen import MemorySeen, Seen, SqliteSeen

__all__ = [
    "INTERRUPT_KIND",
    "MemorySeen",
    "SqliteSeen",
    "WebhookReceiver",
    "apending_approval",
    "arequest_approval",
    "aresume_when_decided",
    "continue_interrupted",
    "pending_approval",
    "request_approval",
    "resume_value",
    "resume_when_decided",
    "thread_config",
]

#: ``interrupt()`` values made by :func:`request_approval` carry this ``kind``.
INTERRUPT_KIND = "signoff.approval"
#: Events after which a waiting thread may go on.
DECISION_EVENTS = frozenset({"task.resolved", "task.expired", "task.cancelled"})
SETTLED = frozenset({"EXPIRED", "CANCELLED"})
BUSY = "busy: the thread is running; deliver again later"


class _Graph(Protocol):
    def get_state(self, config: Any, *, subgraphs: bool = False) -> Any: ...

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any: ...


def thread_config(thread_id: str) -> RunnableConfig:
    """The config that names a thread, for ``graph.invoke(..., config)``."""
    return {"configurable": {"thread_id": thread_id}}


def resume_value(task: Task) -> dict[str, Any]:
    """What a resumed :func:`request_approval` receives (it re-reads the task anyway)."""
    return {
        "task_id": task.id,
        "version": task.version,
        "status": task.status,
        "decision": task.decision,
        "revision": task.current_revision,
    }


def _decided_for(task: Task, wanted_digest: str) -> bool:
    if task.status in SETTLED:
        return True
    return task.status == "RESOLVED" and task.decision is not None and task.digest == wanted_digest


def _escalation(
    *,
    subject: Mapping[str, Any],
    entity: tuple[str, str],
    reason: str,
    attempted: Sequence[Mapping[str, Any]],
    verdict: Mapping[str, Any],
    input_snapshot: Mapping[str, Any] | None,
    key: str | None,
    trace_id: str | None,
    metadata: Mapping[str, Any] | None,
    **optional: Any,
) -> tuple[dict[str, Any], str, str]:
    """The escalation for the running node: keyed by thread and node, the thread named in
    ``metadata``. Returns ``(escalate() arguments, thread id, node)``."""
    config = get_config()
    thread_id = str(config["configurable"]["thread_id"])
    node = str(config.get("metadata", {}).get("langgraph_node", "approval"))
    entity_type, entity_id = entity
    correlation = {"langgraph": {"thread_id": thread_id, "node": node}}
    arguments = {
        "key": key or f"langgraph:{thread_id}:{node}",
        "entity_type": entity_type,
        "entity_id": entity_id,
        "reason_code": reason,
        "attempted_actions": attempted,
        "evaluator_verdict": verdict,
        "input_snapshot": input_snapshot
        if input_snapshot is not None
        else {"thread_id": thread_id},
        "trace_id": trace_id or f"langgraph-{thread_id}",
        "subject": subject,
        "metadata": {**(metadata or {}), **correlation},
        **optional,
    }
    return arguments, thread_id, node


def _to_revise(reused: IdempotencyKeyReused) -> Task:
    """The node's task when only its subject changed (it gets a new revision below);
    anything else that changed is another escalation under the same key: raise."""
    if isinstance(reused.task, Task) and reused.changed == ["subject"]:
        return reused.task
    raise reused


def _edit_of(task: Task, wanted: str, get_revision: Callable[[Task, int], Revision]) -> bool:
    """A reviewer edited exactly this subject and approved the edit: the decision (the
    node runs what :meth:`Signoff.approved_subject` returns), not a reason to revise."""
    if not task.edited or not task.current_revision or task.current_revision < 2:
        return False
    return get_revision(task, task.current_revision - 1).digest == wanted


def _needs_revision(task: Task, wanted: str) -> bool:
    """The subject changed since the task last saw it: a new revision, back to review."""
    return task.digest != wanted and task.status not in SETTLED


def _waiting_on(task: Task, wanted: str, thread_id: str, node: str) -> dict[str, Any]:
    return {
        "kind": INTERRUPT_KIND,
        "task_id": task.id,
        "revision": task.current_revision,
        "digest": wanted,
        "version": task.version,
        "thread_id": thread_id,
        "node": node,
    }


def request_approval(
    client: Signoff,
    *,
    subject: Mapping[str, Any],
    entity: tuple[str, str],
    reason: str,
    attempted: Sequence[Mapping[str, Any]],
    verdict: Mapping[str, Any],
    input_snapshot: Mapping[str, Any] | None = None,
    key: str | None = None,
    trace_id: str | None = None,
    material_paths: Sequence[str] | None = None,
    source_revisions: Sequence[str] | None = None,
    deadline: datetime | str | None = None,
    assigned_group: str | None = None,
    summary: Mapping[str, Any] | None = None,
    policy: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    timeout_seconds: int | None = None,
    on_timeout: str = "reject",
    timeout_group: str | None = None,
    editable: Sequence[str] | None = None,
) -> Task:
    """Inside a LangGraph node: have a person decide on ``subject``; return the decided task.

    The escalation is keyed by the thread and the node (or ``key``), and its ``metadata``
    names the thread, so a webhook can find it. When the node runs again with a changed
    subject (a figure moved after the approval), the task gets a new revision and goes back
    to review. Returns a task that is RESOLVED about exactly this subject (check
    ``task.decision``; ``task.changes_requested``: route back here with the revised
    subject; ``task.edited``: a reviewer edited it, run ``client.approved_subject(task)``),
    or EXPIRED/CANCELLED. For async nodes: :func:`arequest_approval`.

    ``timeout_seconds`` is the producer's time limit on the server, as in
    :meth:`Signoff.escalate`: nobody decided within it, the task is rejected
    (``on_timeout="reject"``; ``task.timed_out`` tells it from a person's rejection),
    expires (``"expire"``) or goes to ``timeout_group`` (``"escalate"``); never approved.
    The graph waits in an interrupt, not in a local wait, so nothing is cancelled when the
    caller stops: the thread resumes with whatever the task became.
    """
    arguments, thread_id, node = _escalation(
        subject=subject, entity=entity, reason=reason, attempted=attempted, verdict=verdict,
        input_snapshot=input_snapshot, key=key, trace_id=trace_id, metadata=metadata,
        material_paths=material_paths, source_revisions=source_revisions, deadline=deadline,
        assigned_group=assigned_group, summary=summary, policy=policy,
        timeout_seconds=timeout_seconds, on_timeout=on_timeout, timeout_group=timeout_group,
        editable=editable,
    )  # fmt: skip
    try:
        task = client.escalate(**arguments)
    except IdempotencyKeyReused as reused:
        task = _to_revise(reused)
    wanted = digest(subject)
    while True:
        task = client.get_task(task.id)
        if _edit_of(task, wanted, client.get_revision):
            return task
        if _needs_revision(task, wanted):
            revision = task.current_revision or 1
            task = client.revise(
                task.id, subject, expected_revision=revision, source_revisions=source_revisions
            )
        if _decided_for(task, wanted):
            return task
        interrupt(_waiting_on(task, wanted, thread_id, node))
        # Resumed: whatever the resume value says, the task itself is read again above.


async def arequest_approval(
    client: AsyncSignoff,
    *,
    subject: Mapping[str, Any],
    entity: tuple[str, str],
    reason: str,
    attempted: Sequence[Mapping[str, Any]],
    verdict: Mapping[str, Any],
    input_snapshot: Mapping[str, Any] | None = None,
    key: str | None = None,
    trace_id: str | None = None,
    material_paths: Sequence[str] | None = None,
    source_revisions: Sequence[str] | None = None,
    deadline: datetime | str | None = None,
    assigned_group: str | None = None,
    summary: Mapping[str, Any] | None = None,
    policy: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    timeout_seconds: int | None = None,
    on_timeout: str = "reject",
    timeout_group: str | None = None,
    editable: Sequence[str] | None = None,
) -> Task:
    """:func:`request_approval` for async nodes, with an :class:`AsyncSignoff`."""
    arguments, thread_id, node = _escalation(
        subject=subject, entity=entity, reason=reason, attempted=attempted, verdict=verdict,
        input_snapshot=input_snapshot, key=key, trace_id=trace_id, metadata=metadata,
        material_paths=material_paths, source_revisions=source_revisions, deadline=deadline,
        assigned_group=assigned_group, summary=summary, policy=policy,
        timeout_seconds=timeout_seconds, on_timeout=on_timeout, timeout_group=timeout_group,
        editable=editable,
    )  # fmt: skip
    try:
        task = await client.escalate(**arguments)
    except IdempotencyKeyReused as reused:
        task = _to_revise(reused)
    wanted = digest(subject)
    while True:
        task = await client.get_task(task.id)
        if task.edited and task.current_revision and task.current_revision > 1:
            edited_from = await client.get_revision(task, task.current_revision - 1)
            if edited_from.digest == wanted:
                return task
        if _needs_revision(task, wanted):
            revision = task.current_revision or 1
            task = await client.revise(
                task.id, subject, expected_revision=revision, source_revisions=source_revisions
            )
        if _decided_for(task, wanted):
            return task
        interrupt(_waiting_on(task, wanted, thread_id, node))


def pending_approval(graph: _Graph, config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The approval a thread waits on (the value its ``interrupt()`` carried), or None."""
    return _approval_of(graph.get_state(dict(config)))


def _approval_of(state: Any) -> dict[str, Any] | None:
    for pending in getattr(state, "interrupts", ()) or ():
        value = getattr(pending, "value", None)
        if isinstance(value, dict) and value.get("kind") == INTERRUPT_KIND:
            return value
    return None


async def apending_approval(graph: Any, config: Mapping[str, Any]) -> dict[str, Any] | None:
    """:func:`pending_approval` for graphs with an async checkpointer (``aget_state``)."""
    return _approval_of(await graph.aget_state(dict(config)))


async def aresume_when_decided(
    graph: Any,
    config: Mapping[str, Any],
    client: AsyncSignoff,
    *,
    timeout: float,  # noqa: ASYNC109 (the same signature as resume_when_decided)
) -> Any:
    """:func:`resume_when_decided` for async graphs (``ainvoke``) and :class:`AsyncSignoff`."""
    waiting = await apending_approval(graph, config)
    if waiting is None:
        return None
    task = await client.wait_for_decision(
        waiting["task_id"], timeout=timeout, revision=waiting.get("revision")
    )
    return await graph.ainvoke(Command(resume=resume_value(task)), dict(config))


def resume_when_decided(
    graph: _Graph, config: Mapping[str, Any], client: Signoff, *, timeout: float
) -> Any:
    """Long-poll for the decision the thread waits on, then resume the thread with it.

    Returns what ``graph.invoke`` returns, or None when the thread waits on no approval.
    Raises :class:`signoff.client.DecisionTimeout` when no decision came in time.
    """
    waiting = pending_approval(graph, config)
    if waiting is None:
        return None
    task = client.wait_for_decision(
        waiting["task_id"], timeout=timeout, revision=waiting.get("revision")
    )
    return graph.invoke(Command(resume=resume_value(task)), dict(config))


def continue_interrupted(graph: _Graph, config: Mapping[str, Any]) -> Any:
    """At start-up: finish a thread whose run was cut short (the process died inside a
    node). LangGraph re-runs that node from its last checkpoint; a node that executes
    through :meth:`Signoff.execution` with a stable ``operation_id`` then waits for the
    dead process's execution lease to lapse and reports the action once.

    Returns what ``graph.invoke`` returns, or None when the thread had nothing left to run
    or waits on an interrupt."""
    state = graph.get_state(dict(config))
    to_run = tuple(getattr(state, "next", None) or ())
    interrupted = tuple(getattr(state, "interrupts", None) or ())
    if not to_run or interrupted:
        return None
    return graph.invoke(None, dict(config))


# --- webhooks -----------------------------------------------------------------------------


Resume = Callable[[Command[Any], RunnableConfig], Any]
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class WebhookReceiver:
    """An ASGI app resuming LangGraph threads from Signoff's webhooks.

    ``graph`` is the compiled graph (with its checkpointer); ``secrets`` the endpoint's
    secrets, newest first. Each delivery is answered 400 (bad signature), 503 while the
    thread is still running (Signoff delivers again later), or 200 with ``{"outcome": ...}``:
    ``resumed``, ``duplicate``, or ``ignored: <why>``. The resume runs before the answer,
    one delivery at a time per thread, so a failed resume answers 500 and Signoff delivers
    again. Keep what runs after an approval short (Signoff gives an attempt
    ``SIGNOFF_WEBHOOK_TIMEOUT_SECONDS``), or hand long work to a queue of your own.
    """

    def __init__(
        self,
        graph: _Graph,
        *,
        secrets: Sequence[str],
        seen: Seen | None = None,
        resume: Resume | None = None,
        on_outcome: Callable[[WebhookEvent, str], None] | None = None,
    ) -> None:
        self.graph = graph
        self.secrets = list(secrets)
        self.seen = seen or MemorySeen()
        self._resume = resume or (lambda command, config: graph.invoke(command, config))
        self._on_outcome = on_outcome
        self._locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()

    def _thread_lock(self, event: WebhookEvent) -> threading.Lock:
        """One delivery at a time per LangGraph thread (others go on in parallel)."""
        correlation = event.metadata.get("langgraph")
        thread = str(correlation.get("thread_id")) if isinstance(correlation, dict) else ""
        with self._locks_lock:
            return self._locks.setdefault(thread, threading.Lock())

    def handle(self, headers: Mapping[str, str], body: bytes) -> tuple[int, str]:
        """Verify and act on one delivery: ``(HTTP status, outcome)``. Blocking."""
        try:
            event = verify_event(headers, body, self.secrets)
        except WebhookVerificationFailed:
            return 400, "bad signature"
        status = 200
        with self._thread_lock(event):
            if not self.seen.add(event.dedupe_key):
                outcome = "duplicate"
            else:
                try:
                    outcome = self._apply(event)
                except BaseException:
                    self._forget(event.dedupe_key)  # let Signoff's retry try again
                    raise
                if outcome == BUSY:
                    self._forget(event.dedupe_key)
                    status = 503
        if self._on_outcome is not None:
            self._on_outcome(event, outcome)
        return status, outcome

    def _forget(self, webhook_id: str) -> None:
        forget = getattr(self.seen, "forget", None)
        if forget is not None:
            forget(webhook_id)

    def _apply(self, event: WebhookEvent) -> str:
        if event.type not in DECISION_EVENTS:
            return f"ignored: {event.type}"
        correlation = event.metadata.get("langgraph")
        if not isinstance(correlation, dict) or not correlation.get("thread_id"):
            return "ignored: not a LangGraph task"
        config = thread_config(str(correlation["thread_id"]))
        state = self.graph.get_state(config)
        waiting = pending_approval(self.graph, config)
        if waiting is None and tuple(getattr(state, "next", None) or ()):
            # The thread is running (about to interrupt, or cut short by a crash): answer
            # 503 so Signoff delivers again later instead of the decision being dropped.
            return BUSY
        # LangGraph starts a new run on a thread that waits on nothing: never resume blindly.
        if waiting is None or waiting.get("task_id") != event.task.id:
            return "ignored: the thread does not wait on this task"
        if event.task.version <= int(waiting.get("version") or 0):
            return "ignored: older than what the thread waits for"
        self._resume(Command(resume=resume_value(event.task)), config)
        return "resumed"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        if scope.get("method") != "POST":
            await _answer(send, 405, {"outcome": "POST only"})
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            status, outcome = await asyncio.to_thread(self.handle, headers, b"".join(chunks))
        except Exception as error:
            await _answer(send, 500, {"outcome": f"error: {type(error).__name__}"})
            return
        await _answer(send, status, {"outcome": outcome})


async def _answer(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", b"%d" % len(data)),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})
