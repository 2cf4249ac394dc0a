"""The console's pages: the inbox, the task screen, supervisors' actions, live updates.

Every state change goes through the same service the JSON API calls; a refusal is shown
on the page in words (who holds the task, what changed), never as a bare status code.
Lease tokens stay on the server side of the browser: an HttpOnly cookie scoped to the
console keeps the reviewer's tokens, so a reload or a second tab keeps the lease.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlencode

from fastapi import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse

from signoff.console import live, views
from signoff.console.auth import CsrfChecked, SignedIn, csrf_token
from signoff.console.rendering import environment, render
from signoff.console.routes import router
from signoff.domain.clock import rfc3339
from signoff.domain.decisions import parse_decision
from signoff.domain.json_input import parse_json_strict
from signoff.domain.states import Decision, Role, TaskStatus
from signoff.domain.tasks import Principal, Task, task_view
from signoff.errors import NotFound, SignoffError
from signoff.services import approvals as approval_service
from signoff.services import common, supervision
from signoff.services import inbox as inbox_service
from signoff.services import tasks as task_service
from signoff.services.context import ServiceContext
from signoff.services.inbox import LABELS, InboxFilters, View

environment.filters.setdefault("duration", views.duration_text)

LEASE_COOKIE = "signoff_leases"
MAX_HELD_TOKENS = 40
#: The lease countdown warns this many seconds before the lease lapses.
WARN_SECONDS = 120
OVERSEERS = frozenset({Role.SUPERVISOR, Role.ADMIN})


class Form:
    """A URL-encoded form body (the console's forms send nothing else)."""

    def __init__(self, fields: dict[str, list[str]]) -> None:
        self.fields = fields

    def get(self, name: str) -> str | None:
        values = self.fields.get(name)
        return values[0] if values else None

    def getlist(self, name: str) -> list[str]:
        return self.fields.get(name, [])


async def _form(request: Request) -> Form:
    data = await request.form()  # parsed once per request (the CSRF check read it first)
    fields: dict[str, list[str]] = {}
    for name, value in data.multi_items():
        if isinstance(value, str):
            fields.setdefault(name, []).append(value)
    return Form(fields)


def _context(request: Request) -> ServiceContext:
    context: ServiceContext = request.app.state.context
    return context


# Lease tokens ---------------------------------------------------------------------------


def _held_tokens(request: Request) -> dict[str, str]:
    raw = request.cookies.get(LEASE_COOKIE)
    if not raw:
        return {}
    try:
        data = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    except (ValueError, binascii.Error):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): str(v) for k, v in data.items() if isinstance(v, str)}


def _store_tokens(response: Response, tokens: dict[str, str]) -> None:
    kept = dict(list(tokens.items())[-MAX_HELD_TOKENS:])
    value = base64.urlsafe_b64encode(json.dumps(kept).encode()).decode().rstrip("=")
    response.set_cookie(
        LEASE_COOKIE, value, path="/console", httponly=True, samesite="strict", max_age=86400
    )


@dataclass
class TokenChanges:
    """Lease tokens gained and given up during one request, written to the cookie."""

    tokens: dict[str, str]
    changed: bool = False
    messages: list[str] = field(default_factory=list)

    def keep(self, task_id: uuid.UUID | str, token: str) -> None:
        self.tokens.pop(str(task_id), None)
        self.tokens[str(task_id)] = token
        self.changed = True

    def drop(self, task_id: uuid.UUID | str) -> None:
        if self.tokens.pop(str(task_id), None) is not None:
            self.changed = True

    def apply(self, response: Response) -> Response:
        if self.changed:
            _store_tokens(response, self.tokens)
        return response


# Inbox ------------------------------------------------------------------------------------


FILTER_NAMES = ("entity_type", "reason_code", "group", "level")


def _filters(request: Request) -> InboxFilters:
    values = {name: (request.query_params.get(name) or "").strip() or None for name in FILTER_NAMES}
    level = values.pop("level")
    return InboxFilters(
        entity_type=values["entity_type"],
        reason_code=values["reason_code"],
        group=values["group"],
        level=int(level) if level and level.isdigit() and len(level) < 6 else None,
    )


def _view(request: Request, principal: Principal) -> View:
    raw = request.query_params.get("view")
    allowed = inbox_service.views_for(principal)
    try:
        view = View(raw) if raw else View.AVAILABLE
    except ValueError:
        view = View.AVAILABLE
    return view if view in allowed else View.AVAILABLE


def _query(view: View, filters: InboxFilters, **extra: str) -> str:
    pairs: dict[str, str] = {"view": view.value}
    for name in FILTER_NAMES:
        value = getattr(filters, name)
        if value is not None:
            pairs[name] = str(value)
    pairs.update(extra)
    return urlencode(pairs)


def _row(task: Task, principal: Principal, now: datetime) -> dict[str, Any]:
    held = task.status is TaskStatus.CLAIMED and not task.lease_lapsed(now)
    return {
        "task": task,
        "status": task.effective_status(now).value,
        "verdict": views.verdict(task),
        "age": views.duration_text((now - task.created_at).total_seconds()),
        "deadline": views.deadline(task, now),
        "holder": task.claimed_by if held else None,
        "lease_seconds": (
            (task.lease_expires_at - now).total_seconds()
            if held and task.lease_expires_at and task.claimed_by == principal.principal_id
            else None
        ),
    }


async def _inbox_values(request: Request, principal: Principal) -> dict[str, Any]:
    context = _context(request)
    view, filters = _view(request, principal), _filters(request)
    tasks = await inbox_service.list_view(context, principal, view, filters)
    now = context.now()
    return {
        "principal": principal,
        "view": view,
        "views": [(v, LABELS[v]) for v in inbox_service.views_for(principal)],
        "filters": filters,
        "query": _query(view, filters),
        "filter_query": lambda v: _query(v, filters),
        "rows": [_row(task, principal, now) for task in tasks],
        "now": rfc3339(now),
        "supervisor": principal.role in OVERSEERS,
        "csrf": csrf_token(request),
        "message": request.query_params.get("message"),
        "warn_seconds": WARN_SECONDS,
    }


@router.get("")
async def inbox(request: Request, principal: SignedIn) -> Response:
    values = await _inbox_values(request, principal)
    values["facets"] = await inbox_service.facets(_context(request), principal)
    return render(request, "inbox.html", **values)


@router.get("/inbox/rows")
async def inbox_rows(request: Request, principal: SignedIn) -> Response:
    """The rows of a view alone (filters applied without a reload; the "N new" check)."""
    return render(request, "_rows.html", **await _inbox_values(request, principal))


def _go(request: Request, url: str, tokens: TokenChanges | None = None) -> Response:
    """Navigate: htmx follows ``HX-Redirect``; a plain form follows the 303."""
    response: Response
    if request.headers.get("hx-request"):
        response = Response(status_code=204, headers={"HX-Redirect": url})
    else:
        response = RedirectResponse(url, status_code=303)
    return tokens.apply(response) if tokens else response


@router.post("/start")
async def start_reviewing(request: Request, principal: CsrfChecked) -> Response:
    """Claim the next task the reviewer may take (filters of the current view apply)."""
    form = await _form(request)
    filters = InboxFilters(
        entity_type=str(form.get("entity_type") or "") or None,
        reason_code=str(form.get("reason_code") or "") or None,
    )
    tokens = TokenChanges(_held_tokens(request))
    try:
        grant = await task_service.claim_next(
            _context(request),
            principal,
            entity_type=filters.entity_type,
            reason_code=filters.reason_code,
        )
    except SignoffError as error:
        return _go(request, "/console?" + urlencode({"message": error.message}))
    if grant is None:
        return _go(
            request, "/console?" + urlencode({"view": "available", "message": "Nothing to review."})
        )
    tokens.keep(grant.task.id, grant.lease_token)
    return _go(request, f"/console/tasks/{grant.task.id}?view=mine", tokens)


@router.post("/bulk")
async def bulk(request: Request, principal: CsrfChecked) -> Response:
    """Supervisors: claim, release or reassign several tasks at once (never approve:
    each approval names one revision)."""
    form = await _form(request)
    action = str(form.get("action") or "")
    ids = [str(value) for value in form.getlist("task")]
    group = str(form.get("group") or "")
    back = str(form.get("back") or "view=all")
    context = _context(request)
    tokens = TokenChanges(_held_tokens(request))
    done, failed = 0, []
    for task_id in ids:
        try:
            if action == "claim":
                grant = await task_service.claim(context, principal, task_id)
                tokens.keep(grant.task.id, grant.lease_token)
            elif action == "release":
                token = tokens.tokens.get(task_id)
                if token is not None and principal.role not in OVERSEERS:
                    await task_service.release(context, principal, task_id, token)
                else:
                    await supervision.force_release(context, principal, task_id)
                tokens.drop(task_id)
            elif action == "reassign":
                await supervision.reassign(context, principal, task_id, group)
                tokens.drop(task_id)
            else:
                failed.append("unknown action")
                break
            done += 1
        except SignoffError as error:
            failed.append(error.message)
    message = f"{action}: {done} of {len(ids)} done." + (
        " Not done: " + "; ".join(failed[:5]) if failed else ""
    )
    return _go(request, f"/console?{back}&" + urlencode({"message": message}), tokens)


# The task screen ------------------------------------------------------------------------


@dataclass(frozen=True)
class Notice:
    """Something that happened since the page was shown: who, when, what."""

    text: str
    tone: str = "info"


def _event_text(event: dict[str, Any], me: str) -> str:
    who = "You" if event["actor_id"] == me else event["actor_id"]
    details = event.get("details") or {}
    when = event["created_at"]
    action = event["action"]
    if action == "claim":
        return f"{who} claimed this task at {when}."
    if action in ("revise", "reopen", "carry_forward"):
        paths = ", ".join(details.get("changed_paths") or []) or "no field"
        return f"Revision {details.get('revision')} arrived at {when} from {who}; changed: {paths}."
    if action in ("resolve", "resolve_by_link"):
        return f"{who} decided {details.get('decision', '')} at {when}."
    if action == "force_release":
        holder = details.get("previous_holder")
        return f"{who} force-released the lease held by {holder} at {when}."
    if action == "hand_over":
        return f"{who} reassigned this task to {details.get('assigned_group')} at {when}."
    return f"{who}: {event['type']} at {when}."


def _notices(trail: list[dict[str, Any]], since_version: int | None, me: str) -> list[Notice]:
    if since_version is None:
        return []
    return [
        Notice(_event_text(event, me), "warn")
        for event in trail
        if event["version"] > since_version
        and event["actor_id"] != me
        and event["action"] != "renew"
    ]


async def _task_values(
    request: Request,
    principal: Principal,
    task_id: str,
    *,
    tokens: TokenChanges,
    seen: int | None = None,
    since_version: int | None = None,
    notices: list[Notice] | None = None,
) -> dict[str, Any]:
    context = _context(request)
    task = await common.get_task(context, principal, task_id)
    now = context.now()
    trail = list(await task_service.task_audit_trail(context, principal, task_id))
    me = principal.principal_id
    held = task.status is TaskStatus.CLAIMED and not task.lease_lapsed(now)
    token = tokens.tokens.get(str(task.id))
    mine = task.status is TaskStatus.CLAIMED and task.claimed_by == me and token is not None
    if not mine and token is not None and task.status is not TaskStatus.CLAIMED:
        tokens.drop(task.id)
    revision = diff = None
    previous = None
    if task.has_subject:
        previous = await approval_service.note_view(context, principal, task)
        if seen is not None and (previous is None or seen < previous):
            previous = seen
        revision = await approval_service.get_revision(
            context, principal, task_id, int(task.current_revision or 0)
        )
        if previous is not None and previous != task.current_revision:
            diff = await approval_service.diff(
                context, principal, task_id, previous, int(task.current_revision or 0)
            )
    subject = revision["subject"] if revision else None
    bundle = task.diagnostic_bundle
    lease_left = (
        (task.lease_expires_at - now).total_seconds() if mine and task.lease_expires_at else None
    )
    earlier = _earlier_decisions(trail, me)
    decided_on = [e["revision"] for e in earlier if isinstance(e.get("revision"), int)]
    if diff is None and decided_on and decided_on[-1] != task.current_revision:
        # Back on a task revised since their decision: the changes since the revision
        # they decided on stay in view (not only on the first look).
        previous = decided_on[-1]
        diff = await approval_service.diff(
            context, principal, task_id, previous, int(task.current_revision or 0)
        )
    all_notices = list(notices or []) + _notices(trail, since_version, me)
    return {
        "principal": principal,
        "task": task,
        "view": task_view(task, now),
        "now": rfc3339(now),
        "verdict": views.verdict(task),
        "deadline": views.deadline(task, now),
        "age": views.duration_text((now - task.created_at).total_seconds()),
        "attempted": bundle.get("attempted_actions") or [],
        "snapshot": bundle.get("input_snapshot") or {},
        "trace_id": bundle.get("trace_id"),
        "revision": revision,
        "subject_rows": views.flatten(subject) if subject is not None else [],
        "subject_actions": (subject or {}).get("actions") or [],
        "previous_revision": previous,
        "seen_changed": mine and seen is not None and seen != task.current_revision,
        "diff": diff,
        "earlier": earlier,
        "trail": trail,
        "held_by": task.claimed_by if held else None,
        "mine": mine,
        "lease_left": lease_left,
        "lease_expires_at": rfc3339(task.lease_expires_at) if mine else None,
        "warn_seconds": WARN_SECONDS,
        "active": task.status in (TaskStatus.PENDING_REVIEW, TaskStatus.CLAIMED),
        "supervisor": principal.role in OVERSEERS,
        "can_review": principal.role in (Role.REVIEWER, Role.SUPERVISOR),
        "notices": all_notices,
        "csrf": csrf_token(request),
        "nav": _nav_query(request),
        "views": views,
    }


def _earlier_decisions(trail: list[dict[str, Any]], me: str) -> list[dict[str, Any]]:
    """This reviewer's decisions on earlier revisions, with their notes (kept in the
    audit trail when a new revision cleared them)."""
    found: dict[int, dict[str, Any]] = {}
    for event in trail:
        details = event.get("details") or {}
        if event["actor_id"] == me and event["action"] in ("resolve", "resolve_by_link"):
            revision = details.get("revision") or 0
            found[revision] = {
                "decision": details.get("decision"),
                "revision": details.get("revision"),
                "notes": None,
                "at": event["created_at"],
            }
        previous = details.get("previous_decision")
        if isinstance(previous, dict) and previous.get("by") == me:
            entry = found.setdefault(
                previous.get("revision") or 0,
                {"decision": previous.get("decision"), "revision": previous.get("revision")}
                | {"at": event["created_at"]},
            )
            entry["notes"] = previous.get("notes")
    return list(found.values())


def _nav_query(request: Request) -> str:
    """The inbox view (and filters) the reviewer came from, carried for "next task"."""
    pairs = {
        name: request.query_params[name]
        for name in ("view", *FILTER_NAMES)
        if request.query_params.get(name)
    }
    return urlencode(pairs)


def _is_htmx(request: Request) -> bool:
    return bool(request.headers.get("hx-request"))


async def _task_response(
    request: Request,
    principal: Principal,
    task_id: str,
    *,
    tokens: TokenChanges,
    notices: list[Notice] | None = None,
    seen: int | None = None,
    since_version: int | None = None,
) -> Response:
    try:
        values = await _task_values(
            request,
            principal,
            task_id,
            tokens=tokens,
            notices=notices,
            seen=seen,
            since_version=since_version,
        )
    except NotFound as error:
        return render(request, "error.html", status_code=404, message=error.message)
    template = "_task_body.html" if _is_htmx(request) else "task.html"
    return tokens.apply(render(request, template, **values))


def _int_param(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name) or ""
    return int(raw) if raw.isdigit() and len(raw) < 10 else None


@router.get("/tasks/{task_id}")
async def task_page(task_id: str, request: Request, principal: SignedIn) -> Response:
    return await _task_response(
        request,
        principal,
        task_id,
        tokens=TokenChanges(_held_tokens(request)),
        seen=_int_param(request, "seen"),
        since_version=_int_param(request, "since"),
    )


@router.get("/tasks/{task_id}/state")
async def task_state(task_id: str, request: Request, principal: SignedIn) -> Response:
    """What a open page compares with what it shows (version, holder, revision)."""
    context = _context(request)
    try:
        task = await common.get_task(context, principal, task_id)
    except NotFound:
        return JSONResponse({"gone": True}, status_code=404)
    view = task_view(task, context.now())
    keys = ("version", "status", "claimed_by", "current_revision", "lease_expires_at")
    return JSONResponse({k: view[k] for k in keys} | {"now": rfc3339(context.now())})


async def _act(
    request: Request, principal: Principal, task_id: str, tokens: TokenChanges, action: str
) -> list[Notice]:
    """Run one task action through its service; a refusal becomes a notice in words."""
    context = _context(request)
    form = await _form(request)
    token = tokens.tokens.get(task_id, "")
    try:
        if action == "claim":
            grant = await task_service.claim(context, principal, task_id)
            tokens.keep(grant.task.id, grant.lease_token)
            return [Notice("You hold the lease now.", "ok")]
        if action == "renew":
            await task_service.renew(context, principal, task_id, token)
            return [Notice("Lease extended.", "ok")]
        if action == "release":
            await task_service.release(context, principal, task_id, token)
            tokens.drop(task_id)
            return [Notice("Released: the task is back in the queue.", "ok")]
        if action == "force-release":
            holder = str(form.get("holder") or "") or None
            await supervision.force_release(context, principal, task_id, holder=holder)
            return [Notice(f"Force-released the lease held by {holder or 'its holder'}.", "ok")]
        if action == "reassign":
            task = await supervision.reassign(context, principal, task_id, str(form.get("group")))
            tokens.drop(task_id)
            return [Notice(f"Reassigned to {task.assigned_group}.", "ok")]
        if action == "cancel":
            await supervision.cancel(context, principal, task_id)
            tokens.drop(task_id)
            return [Notice("Cancelled.", "ok")]
    except SignoffError as error:
        return [await _refusal_notice(context, principal, task_id, error)]
    return [Notice(f"Unknown action {action!r}.", "error")]


async def _refusal_notice(
    context: ServiceContext, principal: Principal, task_id: str, error: SignoffError
) -> Notice:
    """Say why, with who and when when someone else holds the task."""
    try:
        task = await common.get_task(context, principal, task_id)
    except SignoffError:
        return Notice(error.message, "error")
    now = context.now()
    held = task.status is TaskStatus.CLAIMED and not task.lease_lapsed(now)
    if held and task.claimed_by != principal.principal_id:
        trail = await task_service.task_audit_trail(context, principal, task_id)
        claims = [e for e in trail if e["action"] == "claim"]
        since = f" since {claims[-1]['created_at']}" if claims else ""
        return Notice(
            f"{task.claimed_by} holds this task{since}; you cannot act on it now. "
            f"({error.error_code})",
            "error",
        )
    return Notice(f"{error.message} ({error.error_code})", "error")


@router.post("/tasks/{task_id}/{action}")
async def task_action(
    task_id: str, action: str, request: Request, principal: CsrfChecked
) -> Response:
    tokens = TokenChanges(_held_tokens(request))
    if action == "decide":
        return await _decide(request, principal, task_id, tokens)
    notices = await _act(request, principal, task_id, tokens, action)
    return await _task_response(request, principal, task_id, tokens=tokens, notices=notices)


async def _decide(
    request: Request, principal: Principal, task_id: str, tokens: TokenChanges
) -> Response:
    context = _context(request)
    form = await _form(request)
    notes = str(form.get("notes") or "")
    raw_payload = str(form.get("resolution_payload") or "").strip()
    problem: str | None = None
    payload: Any = None
    try:
        decision = parse_decision(form.get("decision"))
    except SignoffError as error:
        decision, problem = Decision.REJECTED, error.message
    if problem is None and raw_payload:
        try:
            payload = parse_json_strict(raw_payload.encode())
        except SignoffError as error:
            problem = f"The resolution payload is not valid JSON: {error.message}"
    revision_raw = str(form.get("revision") or "")
    revision = int(revision_raw) if revision_raw.isdigit() else None
    digest = str(form.get("digest") or "") or None
    if problem is not None:
        return await _task_response(
            request, principal, task_id, tokens=tokens, notices=[Notice(problem, "error")]
        )
    try:
        task = await task_service.resolve(
            context,
            principal,
            task_id,
            tokens.tokens.get(task_id, ""),
            decision=decision,
            notes=notes,
            resolution_payload=payload,
            revision=revision,
            digest=digest,
        )
    except SignoffError as error:
        if error.errors:  # what the decision rules require: say it, keep the page as it is
            notices = [Notice(error.message, "error")]
            return await _task_response(request, principal, task_id, tokens=tokens, notices=notices)
        notice = await _refusal_notice(context, principal, task_id, error)
        return await _task_response(request, principal, task_id, tokens=tokens, notices=[notice])
    tokens.drop(task_id)
    if str(form.get("next") or "") == "on":
        following = await _next_task(request, principal, task)
        if following is not None:
            return _go(request, following, tokens)
        return _go(
            request,
            "/console?" + urlencode({"message": "Decision recorded. Nothing else in this view."}),
            tokens,
        )
    done = Notice(f"Decision recorded: {decision.value}.", "ok")
    return await _task_response(request, principal, task_id, tokens=tokens, notices=[done])


async def _next_task(request: Request, principal: Principal, decided: Task) -> str | None:
    """The next task of the view the reviewer came from (Available: claimed for them)."""
    form = await _form(request)
    raw = str(form.get("nav") or "")
    params = {k: v[0] for k, v in parse_qs(raw).items()}
    try:
        view = View(params.get("view") or View.AVAILABLE.value)
    except ValueError:
        view = View.AVAILABLE
    if view not in inbox_service.views_for(principal):
        view = View.AVAILABLE
    level = params.get("level") or ""
    filters = InboxFilters(
        entity_type=params.get("entity_type") or None,
        reason_code=params.get("reason_code") or None,
        group=params.get("group") or None,
        level=int(level) if level.isdigit() and len(level) < 6 else None,
    )
    tasks = await inbox_service.list_view(_context(request), principal, view, filters, limit=5)
    for task in tasks:
        if task.id != decided.id:
            return f"/console/tasks/{task.id}?{raw}" if raw else f"/console/tasks/{task.id}"
    return None


# Live updates ---------------------------------------------------------------------------


@router.get("/events")
async def events(request: Request, principal: SignedIn) -> Response:
    """Server-Sent Events: ``change`` whenever a task changed; the page then asks what."""
    hub = live.hub_for(request.app.state, _context(request))
    return StreamingResponse(
        live.event_stream(hub, request.is_disconnected),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
