"""Every SDK operation, written once, without I/O.

An operation is a generator: it yields :class:`Call` (an HTTP request) or :class:`Pause`
(wait this long) and receives the response for each call, or has the call's
:class:`ApiError` thrown in. :class:`signoff.client.Signoff` drives operations with a
blocking ``httpx.Client``, :class:`signoff.client.AsyncSignoff` with an
``httpx.AsyncClient``; both behave identically because the logic lives here.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeVar

import httpx

from signoff.client._digests import _plain, digest, escalation_ids, precheck_hash
from signoff.client._errors import (
    ApiError,
    IdempotencyKeyReused,
    InvalidArgument,
    NotFound,
    TaskConflict,
)
from signoff.client._models import (
    AuditEvent,
    Decision,
    Diff,
    Revision,
    Task,
    TaskPage,
    TaskReceipt,
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


def receipts(task_id: str | Task) -> Op[list[TaskReceipt]]:
    response = yield _call("GET", f"/tasks/{_id(task_id)}/receipts", retry=True)
    return [TaskReceipt.model_validate(item) for item in response.json()["items"]]


def signing_keys() -> Op[dict[str, Any]]:
    response = yield _call("GET", "/.well-known/jwks.json", retry=True)
    return dict(response.json())


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
    editable: Sequence[str] | None = None,
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
        "editable": editable,
    }
    body.update({name: _plain(value) for name, value in optional.items() if value is not None})
    if timeout_seconds is not None:
        timeout: dict[str, Any] = {"after_seconds": timeout_seconds, "outcome": on_timeout}
        if timeout_group is not None:
            timeout["group"] = timeout_group
        body["timeout"] = timeout
    for name in ("source_revisions", "material_paths", "editable"):
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
    fields: Sequence[Mapping[str, str]] | None = None,
    subject: Mapping[str, Any] | None = None,
    remember_seconds: int | None = None,
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
        "fields": [dict(f) for f in fields] if fields else None,
        "subject": _plain(dict(subject)) if subject is not None else None,
        "remember_seconds": remember_seconds,
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
    stage: int | None = None,
    subject: Mapping[str, Any] | None = None,
) -> Op[Task]:
    """Vote on a task with an approval rule (no lease). Given a :class:`Task`, the revision
    and digest it shows are the ones voted on; the identical vote repeated is idempotent
    (a retry never becomes a second vote). ``stage`` (from 1) names the stage the vote is
    meant for: needed to vote at a later stage after voting at an earlier one. The
    answer's ``vote`` says whether the vote was recorded and counted."""
    if isinstance(task_id, Task) and task_id.current_revision is not None:
        revision = revision if revision is not None else task_id.current_revision
        digest = digest if digest is not None else task_id.digest
    body: dict[str, Any] = {"decision": decision}
    optional = {"notes": notes, "revision": revision, "digest": digest, "stage": stage}
    optional["subject"] = _plain(dict(subject)) if subject is not None else None
    body.update({k: v for k, v in optional.items() if v is not None})
    response = yield _call("POST", f"/tasks/{_id(task_id)}/votes", json=body, retry=True)
    return _task(response)


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
