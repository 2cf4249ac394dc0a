"""Every SDK operation, written once, without I/O.

An operation is a generator: it yields :class:`Call` (an HTTP request) or :class:`Pause`
(wait this long) and receives the response for each call, or has the call's
:class:`ApiError` thrown in. :class:`signoff.client.Signoff` drives operations with a
blocking ``httpx.Client``, :class:`signoff.client.AsyncSignoff` with an
``httpx.AsyncClient``; both behave identically because the logic lives here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

import httpx

from signoff.client._digests import _plain, digest, escalation_ids, precheck_hash
from signoff.client._errors import (
    AlreadyExecuting,
    DecisionTimeout,
    IdempotencyKeyReused,
    NotFound,
    TaskConflict,
)
from signoff.client._models import AuditEvent, Execution, Task, TaskPage, WebhookEndpoint

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


def _id(task: str | Task) -> str:
    return task.id if isinstance(task, Task) else str(task)


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


def _settled(task: Task, revision: int | None) -> bool:
    if task.status not in SETTLED_STATUSES:
        return False
    return revision is None or task.status != "RESOLVED" or task.current_revision == revision


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
    changed since): keep waiting for the decision about this one.
    """
    deadline = clock() + timeout
    task = yield from get_task(task_id)
    while not _settled(task, revision):
        remaining = deadline - clock()
        if remaining <= 0:
            raise DecisionTimeout(
                f"no decision on task {task.id} within {timeout} s (status {task.status})",
                task=task,
            )
        wait = max(1, min(MAX_WAIT_SECONDS, math.ceil(remaining)))
        started = clock()
        response = yield _call(
            "GET",
            f"/tasks/{task.id}",
            params={"wait": wait, "after_version": task.version},
            retry=True,
            hold=wait,
        )
        fresh = task if response.status_code == 304 else _task(response)
        if fresh.version == task.version and clock() - started < wait / 2:
            # The server answered at once with nothing new: it does not hold requests
            # (an older Signoff). Poll gently instead of spinning.
            yield Pause(min(poll_interval, max(0.0, deadline - clock())))
        task = fresh
    return task


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
    except IdempotencyKeyReused:
        # The same key with another body: a re-run whose attempted actions carry fresh
        # timestamps. The key names one escalation, and it exists: return it.
        existing = yield from _find(escalation_id)
        if existing is None:
            raise
        return existing
    except TaskConflict as conflict:
        if conflict.task_id == escalation_id:
            return (yield from get_task(escalation_id))  # this very escalation, escalated before
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
    decision: str,
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


# --- executing ----------------------------------------------------------------------------


def _seconds_until(moment: str | None, clock_now: datetime) -> float | None:
    if not moment:
        return None
    try:
        when = datetime.fromisoformat(moment.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (when - clock_now).total_seconds()


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
    if task.digest == local_digest or task.approved_digest != local_digest:
        revision = task.current_revision
    else:
        revision = task.approved_revision
    body = {"revision": revision or 1, "digest": local_digest, "operation_id": operation_id}
    deadline = None if wait_for_lease is None else clock() + wait_for_lease
    seen = task
    while True:
        try:
            response = yield _call("POST", f"/tasks/{task.id}/execute", json=body, retry=True)
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
                f"/tasks/{task.id}",
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
        f"/tasks/{task_id}/execution/renew",
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
        f"/tasks/{task_id}/actions/{action_id}/{'complete' if succeeded else 'fail'}",
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
    yield _call("DELETE", f"/webhook-endpoints/{endpoint_id}", retry=True)
    return None
