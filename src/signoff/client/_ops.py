"""Every SDK operation, written once, without I/O.

An operation is a generator: it yields :class:`Call` (an HTTP request) or :class:`Pause`
(wait this long) and receives the response for each call, or has the call's
:class:`ApiError` thrown in. :class:`signoff.client.Signoff` drives operations with a
blocking ``httpx.Client``, :class:`signoff.client.AsyncSignoff` with an
``httpx.AsyncClient``; both behave identically because the logic lives here.
"""

from __future__ import annotations

import math
import random
import time
import urllib.parse
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any, Literal, TypeVar

import httpx

from signoff.client._digests import _plain, digest, escalation_ids, precheck_hash
from signoff.client._errors import (
    AlreadyExecuting,
    ApiError,
    ConnectionFailed,
    DecisionTimeout,
    IdempotencyKeyReused,
    InvalidArgument,
    NotFound,
    TaskConflict,
)
from signoff.client._models import (
    AuditEvent,
    Decision,
    Diff,
    Execution,
    Revision,
    Task,
    TaskPage,
    WebhookEndpoint,
)

T = TypeVar("T")

#: The longest a server holds one long-poll request.
MAX_WAIT_SECONDS = 60
#: Statuses after which no decision will come.
SETTLED_STATUSES = frozenset({"RESOLVED", "EXPIRED", "CANCELLED"})

OnConflict = Literal["raise", "adopt"]


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    params: Mapping[str, Any] | None = None
    json: Any = None
    headers: Mapping[str, str] | None = None
    #: Safe to send again after a connection error or a 5xx (idempotent on the server).
    retry: bool = False
    #: Seconds the server may legitimately hold the request (long-poll), added to the timeout.
    hold: float = 0.0
    has_body: bool = field(default=False)


@dataclass(frozen=True)
class Pause:
    seconds: float


Op = Generator[Call | Pause, Any, T]


def _call(method: str, path: str, *, json: Any = None, has_body: bool = False, **kw: Any) -> Call:
    return Call(method, path, json=json, has_body=has_body or json is not None, **kw)


def _task(response: httpx.Response) -> Task:
    return Task.model_validate(response.json())


def segment(value: object, name: str) -> str:
    """``value`` as one path segment: percent-encoded whole (``/``, ``.``, ``?``, ``#``…),
    so an id can never name another route (``../webhook-endpoints``); empty is refused."""
    text = str(value)
    if not text.strip():
        raise InvalidArgument(f"{name} must not be empty", field=name)
    return urllib.parse.quote(text, safe="").replace(".", "%2E")


def _id(task: str | Task) -> str:
    """The task's id, as a path segment."""
    return segment(task.id if isinstance(task, Task) else task, "task_id")


# --- reading ------------------------------------------------------------------------------


def get_task(task_id: str | Task) -> Op[Task]:
    response = yield _call("GET", f"/tasks/{_id(task_id)}", retry=True)
    return _task(response)


def list_page(filters: Mapping[str, Any], cursor: str | None, limit: int) -> Op[TaskPage]:
    params = {k: v for k, v in filters.items() if v is not None}
    params["limit"] = limit
    if cursor:
        params["cursor"] = cursor
    response = yield _call("GET", "/tasks", params=params, retry=True)
    return TaskPage.model_validate(response.json())


def task_events(task_id: str | Task) -> Op[list[AuditEvent]]:
    response = yield _call("GET", f"/tasks/{_id(task_id)}/events", retry=True)
    return [AuditEvent.model_validate(item) for item in response.json()["items"]]


def revisions(task_id: str | Task) -> Op[list[Revision]]:
    response = yield _call("GET", f"/tasks/{_id(task_id)}/revisions", retry=True)
    return [Revision.model_validate(item) for item in response.json()["items"]]


def get_revision(task_id: str | Task, revision: int | None) -> Op[Revision]:
    """One revision of the subject; None: the current one."""
    if revision is None:
        task = yield from get_task(task_id)
        revision = task.current_revision or 1
    response = yield _call("GET", f"/tasks/{_id(task_id)}/revisions/{int(revision)}", retry=True)
    return Revision.model_validate(response.json())


def diff(task_id: str | Task, start: int, end: int) -> Op[Diff]:
    params = {"from": int(start), "to": int(end)}
    response = yield _call("GET", f"/tasks/{_id(task_id)}/diff", params=params, retry=True)
    return Diff.model_validate(response.json())


def _settled(task: Task, revision: int | None) -> bool:
    if task.status not in SETTLED_STATUSES:
        return False
    return revision is None or task.status != "RESOLVED" or task.current_revision == revision


#: Answers that mean "the server is restarting or overloaded": a wait tries again.
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
#: The longest pause between two reconnection attempts of a wait.
MAX_RECONNECT_PAUSE = 5.0


def reconnect_pause(attempt: int) -> float:
    """Full-jitter exponential backoff: 0.25 s, 0.5 s, 1 s … up to 5 s, each drawn at random
    below its cap, so the waiters of a restarted server do not all come back at once."""
    cap: float = min(MAX_RECONNECT_PAUSE, 0.25 * 2.0 ** min(attempt, 10))
    return cap * (0.2 + 0.8 * random.random())  # noqa: S311 - spreading load, not a secret


def _transient(error: Exception) -> bool:
    if isinstance(error, ConnectionFailed):
        return True
    return isinstance(error, ApiError) and error.status in TRANSIENT_STATUSES


def _reconnecting(
    make: Callable[[], Op[T]], *, deadline: float, clock: Callable[[], float]
) -> Op[T]:
    """Run ``make()``; after a lost connection or a restarting server, run it again with
    backoff and jitter until ``deadline``. Any other refusal is raised at once."""
    attempt = 0
    while True:
        try:
            return (yield from make())
        except (ConnectionFailed, ApiError) as error:
            remaining = deadline - clock()
            if not _transient(error) or remaining <= 0:
                raise
            attempt += 1
            yield Pause(min(remaining, reconnect_pause(attempt)))


def wait_for_decision(
    task_id: str | Task,
    *,
    timeout: float,
    revision: int | None = None,
    poll_interval: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
) -> Op[Task]:
    """Long-poll until the task is decided (or expired, or cancelled).

    With ``revision``, a decision about another revision does not count (the subject
    changed since): keep waiting for the decision about this one. A server restart, a
    dropped connection or a 5xx/429 answer does not end the wait: it reconnects with
    backoff and jitter until ``timeout`` has passed.
    """
    deadline = clock() + timeout
    task = yield from _reconnecting(lambda: get_task(task_id), deadline=deadline, clock=clock)
    while not _settled(task, revision):
        if deadline - clock() <= 0:
            raise DecisionTimeout(
                f"no decision on task {task.id} within {timeout} s (status {task.status})",
                task=task,
            )
        started = clock()
        try:
            fresh = yield from _reconnecting(
                partial(_long_poll, task, deadline, clock), deadline=deadline, clock=clock
            )
        except (ConnectionFailed, ApiError) as error:
            if not _transient(error):
                raise
            # Out of time while the server could not be reached: a timeout like any other,
            # with the last state seen (the next wait reconnects again).
            raise DecisionTimeout(
                f"no decision on task {task.id} within {timeout} s (status {task.status}; "
                f"the server could not be reached at the end: {error.message})",
                task=task,
            ) from error
        if fresh.version == task.version and clock() - started < 0.5:
            # The server answered at once with nothing new: it does not hold requests
            # (an older Signoff), or it is shutting down. Poll gently instead of spinning.
            yield Pause(min(poll_interval, max(0.0, deadline - clock())))
        task = fresh
    return task


def _long_poll(task: Task, deadline: float, clock: Callable[[], float]) -> Op[Task]:
    """One long-poll, held by the server at most until ``deadline``."""
    wait = max(1, min(MAX_WAIT_SECONDS, math.ceil(deadline - clock())))
    response = yield _call(
        "GET",
        f"/tasks/{_id(task)}",
        params={"wait": wait, "after_version": task.version},
        retry=True,
        hold=wait,
    )
    return task if response.status_code == 304 else _task(response)


# --- producing ----------------------------------------------------------------------------


def escalation_body(
    *,
    entity_type: str,
    entity_id: str,
    reason_code: str,
    attempted_actions: Sequence[Mapping[str, Any]],
    evaluator_verdict: Mapping[str, Any],
    input_snapshot: Mapping[str, Any],
    trace_id: str,
    subject: Mapping[str, Any] | None = None,
    source_revisions: Sequence[str] | None = None,
    material_paths: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    deadline: datetime | str | None = None,
    assigned_group: str | None = None,
    summary: Mapping[str, Any] | None = None,
    policy: str | None = None,
    approval_ttl_seconds: int | None = None,
    timeout_seconds: int | None = None,
    on_timeout: str = "reject",
    timeout_group: str | None = None,
    approval_rule: Mapping[str, Any] | str | None = None,
    requested_by: str | None = None,
    headline: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The escalation request without its ids (:func:`escalate` derives them from the
    caller's key), the precheck hash computed. ``timeout_seconds`` sets the producer's time
    limit, ``on_timeout`` what happens at it (``reject``, ``expire`` or ``escalate`` to
    ``timeout_group``)."""
    actions = _plain(list(attempted_actions))
    body: dict[str, Any] = {
        "entity_type": entity_type,
        "entity_id": entity_id,
        "reason_code": reason_code,
        "precheck_hash": precheck_hash(actions),
        "diagnostic_bundle": {
            "trace_id": trace_id,
            "attempted_actions": actions,
            "input_snapshot": _plain(dict(input_snapshot)),
            "evaluator_verdict": _plain(dict(evaluator_verdict)),
        },
    }
    optional = {
        "subject": subject,
        "source_revisions": source_revisions,
        "material_paths": material_paths,
        "metadata": metadata,
        "deadline": deadline,
        "assigned_group": assigned_group,
        "summary": summary,
        "policy": policy,
        "approval_ttl_seconds": approval_ttl_seconds,
        "approval_rule": approval_rule,
        "requested_by": requested_by,
        "headline": headline,
    }
    body.update({name: _plain(value) for name, value in optional.items() if value is not None})
    if timeout_seconds is not None:
        timeout: dict[str, Any] = {"after_seconds": timeout_seconds, "outcome": on_timeout}
        if timeout_group is not None:
            timeout["group"] = timeout_group
        body["timeout"] = timeout
    for name in ("source_revisions", "material_paths"):
        if name in body:
            body[name] = list(body[name])
    return body


def who_am_i() -> Op[str]:
    """The caller's principal id (``GET /me``)."""
    response = yield _call("GET", "/me", retry=True)
    return str(response.json()["principal_id"])


def escalate(
    body: dict[str, Any],
    *,
    key: str,
    identity: dict[str, str],
    on_conflict: OnConflict,
    traceparent: str | None = None,
) -> Op[Task]:
    """Send an escalation (retried with the same key); recognise it when it already exists.

    ``identity`` caches the caller's principal id (asked once per client) that scopes the
    ids derived from ``key``."""
    if "principal_id" not in identity:
        identity["principal_id"] = yield from who_am_i()
    escalation_id, idempotency_key = escalation_ids(key, identity["principal_id"])
    body = {"escalation_id": escalation_id, "idempotency_key": idempotency_key, **body}
    headers = {"traceparent": traceparent} if traceparent else None
    try:
        response = yield _call("POST", "/tasks/escalate", json=body, headers=headers, retry=True)
        return _task(response)
    except IdempotencyKeyReused as reused:
        # The same key with another body: a re-run whose attempted actions carry fresh
        # timestamps is the same escalation; other content is not (its decision is none
        # about this content).
        existing = yield from _find(escalation_id)
        if existing is None:
            raise
        return _same_content(existing, body, reused)
    except TaskConflict as conflict:
        if conflict.task_id == escalation_id:  # this very escalation, escalated before
            return _same_content((yield from get_task(escalation_id)), body, conflict)
        if on_conflict != "adopt":
            raise
        if conflict.task_id:
            return (yield from get_task(conflict.task_id))
        existing = yield from _find(escalation_id)
        if existing is not None:
            return existing
        page = yield from list_page(
            {"entity_type": body["entity_type"], "entity_id": body["entity_id"]}, None, 200
        )
        for task in page.items:
            if task.is_active:
                return task
        raise


def content_changes(task: Task, body: Mapping[str, Any]) -> list[str]:
    """The fields of an escalation ``body`` that a person decides on and that differ from
    what ``task`` holds: the entity, the reason, the input snapshot, the subject (its
    current revision). The evidence (attempted actions, verdict, trace id) may differ."""
    changed = [
        name
        for name in ("entity_type", "entity_id", "reason_code")
        if getattr(task, name) != body[name]
    ]
    snapshot = task.diagnostic_bundle.get("input_snapshot")
    sent = body["diagnostic_bundle"]["input_snapshot"]
    if snapshot is not None and digest(snapshot) != digest(sent):
        changed.append("diagnostic_bundle.input_snapshot")
    if task.digest != (digest(body["subject"]) if "subject" in body else None):
        changed.append("subject")
    return changed


def _same_content(task: Task, body: Mapping[str, Any], refusal: ApiError) -> Task:
    """``task`` when it holds the content of ``body``; else :class:`IdempotencyKeyReused`."""
    changed = content_changes(task, body)
    if not changed:
        return task
    message = (
        f"this key was used with different content ({', '.join(changed)}); submit a new "
        f"revision to task {task.id} or use a new key"
    )
    problem = {
        "status": 422,
        "error_code": "ERR_IDEMPOTENCY_KEY_REUSED",
        "message": message,
        "task_id": task.id,
        "changed": changed,
        "errors": [{"field": name, "message": "differs from the key's task"} for name in changed],
    }
    error = IdempotencyKeyReused(
        message, status=422, error_code="ERR_IDEMPOTENCY_KEY_REUSED", problem=problem
    )
    error.task = task
    raise error from refusal


def _find(task_id: str) -> Op[Task | None]:
    try:
        return (yield from get_task(task_id))
    except NotFound:
        return None


def revise(
    task_id: str | Task,
    subject: Mapping[str, Any],
    *,
    expected_revision: int,
    source_revisions: Sequence[str] | None = None,
) -> Op[Task]:
    body: dict[str, Any] = {"subject": _plain(dict(subject))}
    if source_revisions is not None:
        body["source_revisions"] = list(source_revisions)
    response = yield _call(
        "PUT",
        f"/tasks/{_id(task_id)}/subject",
        json=body,
        headers={"If-Match": f'"{expected_revision}"'},
    )
    return _task(response)


def cancel(task_id: str | Task) -> Op[Task]:
    response = yield _call("POST", f"/tasks/{_id(task_id)}/cancel")
    return _task(response)


# --- reviewing ----------------------------------------------------------------------------


def claim(task_id: str | Task) -> Op[Task]:
    response = yield _call("POST", f"/tasks/{_id(task_id)}/claim")
    return _task(response)


def claim_next(entity_type: str | None, reason_code: str | None) -> Op[Task | None]:
    body = {k: v for k, v in {"entity_type": entity_type, "reason_code": reason_code}.items() if v}
    response = yield _call("POST", "/tasks/claim-next", json=body or None)
    return None if response.status_code == 204 else _task(response)


def _lease(task: str | Task, lease_token: str | None) -> dict[str, str]:
    token = lease_token or (task.lease_token if isinstance(task, Task) else None)
    if not token:
        raise ValueError("a lease token is needed (the claimed task, or lease_token=)")
    return {"X-Lease-Token": token}


def renew(task_id: str | Task, lease_token: str | None) -> Op[Task]:
    headers = _lease(task_id, lease_token)
    response = yield _call(
        "POST", f"/tasks/{_id(task_id)}/lease/renew", headers=headers, retry=True
    )
    return _task(response)


def release(task_id: str | Task, lease_token: str | None) -> Op[Task]:
    headers = _lease(task_id, lease_token)
    response = yield _call("POST", f"/tasks/{_id(task_id)}/release", headers=headers)
    return _task(response)


def resolve(
    task_id: str | Task,
    *,
    lease_token: str | None,
    decision: Decision,
    notes: str | None,
    resolution_payload: Mapping[str, Any] | None,
    revision: int | None,
    digest: str | None,
) -> Op[Task]:
    """Resolve under the lease. Given the claimed :class:`Task`, the revision and digest the
    reviewer saw are taken from it (the identical resolve repeated is idempotent)."""
    headers = _lease(task_id, lease_token)
    if isinstance(task_id, Task) and task_id.current_revision is not None:
        revision = revision if revision is not None else task_id.current_revision
        digest = digest if digest is not None else task_id.digest
    body: dict[str, Any] = {"decision": decision}
    optional = {
        "notes": notes,
        "resolution_payload": resolution_payload,
        "revision": revision,
        "digest": digest,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    response = yield _call(
        "POST", f"/tasks/{_id(task_id)}/resolve", json=body, headers=headers, retry=True
    )
    return _task(response)


def vote(
    task_id: str | Task,
    *,
    decision: Decision,
    notes: str | None,
    revision: int | None,
    digest: str | None,
) -> Op[Task]:
    """Vote on a task with an approval rule (no lease). Given a :class:`Task`, the revision
    and digest it shows are the ones voted on; the identical vote repeated is idempotent."""
    if isinstance(task_id, Task) and task_id.current_revision is not None:
        revision = revision if revision is not None else task_id.current_revision
        digest = digest if digest is not None else task_id.digest
    body: dict[str, Any] = {"decision": decision}
    optional = {"notes": notes, "revision": revision, "digest": digest}
    body.update({k: v for k, v in optional.items() if v is not None})
    response = yield _call("POST", f"/tasks/{_id(task_id)}/votes", json=body, retry=True)
    return _task(response)


# --- executing ----------------------------------------------------------------------------


def _seconds_until(moment: str | None, clock_now: datetime) -> float | None:
    if not moment:
        return None
    try:
        when = datetime.fromisoformat(moment.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (when - clock_now).total_seconds()


def _revision_of(task: Task, local_digest: str) -> Op[int | None]:
    """The revision to name at the gate for a subject of ``local_digest``: the current or
    the approved one when it is theirs, else the latest earlier revision with that digest
    (so the gate can say its approval was invalidated), else the current one."""
    if task.digest == local_digest or task.current_revision is None:
        return task.current_revision
    if task.approved_digest == local_digest:
        return task.approved_revision
    response = yield _call("GET", f"/tasks/{_id(task)}/revisions", retry=True)
    earlier = [
        int(item["revision"])
        for item in response.json().get("items", [])
        if item.get("digest") == local_digest
    ]
    return max(earlier, default=task.current_revision)


#: With ``wait_for_lease=None``: how long after the other executor's lease lapses (as
#: the server reports it, renewals included) the wait ends.
LAPSE_MARGIN_SECONDS = 5.0


def execute(
    task_id: str | Task,
    *,
    subject: Mapping[str, Any],
    operation_id: str,
    wait_for_lease: float | None,
    clock: Callable[[], float] = time.monotonic,
) -> Op[tuple[Execution, Task, str]]:
    """Pass the execution gate for ``subject`` as it is now (its digest computed here).

    When another executor holds the execution lease, wait for its outcome: a long-poll on
    the task wakes on its next change (the other executor completed, failed or renewed)
    and the gate is asked again; a lease that lapses (say, its executor crashed) is taken
    over. ``wait_for_lease`` caps the wait in seconds; ``None`` waits as long as the other
    lease lives (following its renewals) and a little more. A retry of this very
    ``operation_id`` is never refused for its own lease: it takes the lease over.
    """
    local_digest = digest(subject)
    task = yield from get_task(task_id)
    revision = yield from _revision_of(task, local_digest)
    body = {"revision": revision or 1, "digest": local_digest, "operation_id": operation_id}
    deadline = None if wait_for_lease is None else clock() + wait_for_lease
    seen = task
    while True:
        try:
            response = yield _call("POST", f"/tasks/{_id(task)}/execute", json=body, retry=True)
            return Execution.model_validate(response.json()), task, local_digest
        except AlreadyExecuting as busy:
            lapse = _seconds_until(busy.lease_expires_at, datetime.now(UTC))
            if lapse is None:
                raise  # no lease to wait out: another operation completed the execution
            # Never shorter than the lease it waits for (renewals move it on).
            remaining = lapse + LAPSE_MARGIN_SECONDS if deadline is None else deadline - clock()
            if remaining <= 0:
                raise
            # Wake on the task's next change after the read that preceded this refusal,
            # so an outcome recorded in between is not missed; else at the lapse.
            wait = min(float(MAX_WAIT_SECONDS), max(0.05, min(lapse + 0.05, remaining)))
            started = clock()
            polled = yield _call(
                "GET",
                f"/tasks/{_id(task)}",
                params={"wait": round(wait, 3), "after_version": seen.version},
                retry=True,
                hold=wait,
            )
            fresh = seen if polled.status_code == 304 else _task(polled)
            if fresh.version == seen.version and clock() - started < wait / 2:
                yield Pause(wait)  # a server that does not hold requests
            seen = fresh


def renew_execution(task_id: str, token: str) -> Op[Execution]:
    response = yield _call(
        "POST",
        f"/tasks/{_id(task_id)}/execution/renew",
        headers={"X-Execution-Token": token},
        has_body=False,
        retry=True,
    )
    return Execution.model_validate(response.json())


def finish_action(
    task_id: str,
    action_id: str,
    *,
    succeeded: bool,
    operation_id: str,
    result: Any,
    token: str | None,
) -> Op[Execution]:
    headers = {"X-Execution-Token": token} if token else None
    response = yield _call(
        "POST",
        f"/tasks/{_id(task_id)}/actions/{segment(action_id, 'action_id')}/"
        + ("complete" if succeeded else "fail"),
        json={"operation_id": operation_id, "result": _plain(result)},
        headers=headers,
        retry=True,  # idempotent by operation_id
    )
    return Execution.model_validate(response.json())


# --- webhook endpoints --------------------------------------------------------------------


def create_webhook_endpoint(
    url: str,
    *,
    event_types: Sequence[str] | None,
    entity_types: Sequence[str] | None,
    description: str | None,
) -> Op[WebhookEndpoint]:
    body: dict[str, Any] = {"url": url}
    if event_types is not None:
        body["event_types"] = list(event_types)
    if entity_types is not None:
        body["entity_types"] = list(entity_types)
    if description is not None:
        body["description"] = description
    response = yield _call("POST", "/webhook-endpoints", json=body)
    return WebhookEndpoint.model_validate(response.json())


def delete_webhook_endpoint(endpoint_id: str) -> Op[None]:
    yield _call("DELETE", f"/webhook-endpoints/{segment(endpoint_id, 'endpoint_id')}", retry=True)
    return None
