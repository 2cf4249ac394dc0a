"""The task screen: what the reviewer decides on, its lease actions, the supervisors'
actions and the decide form.

Every state change goes through the same service the JSON API calls; the decisions, their
notes and who may make them come from :mod:`signoff.domain.decisions` through those
services. A refusal is shown on the page in words (who holds the task, what changed).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from starlette.responses import JSONResponse, Response

from signoff.console import changes, compare, edit_form, review_session, views, wording
from signoff.console import votes as console_votes
from signoff.console.auth import CsrfChecked, SignedIn, csrf_token
from signoff.console.headline_words import confirm_text
from signoff.console.inbox import FILTER_NAMES, next_in_view
from signoff.console.rendering import render
from signoff.console.shared import (
    WARN_SECONDS,
    Notice,
    TokenChanges,
    go,
    is_htmx,
    page_router,
    read_form,
    service_context,
)
from signoff.domain.clock import rfc3339
from signoff.domain.decisions import parse_decision, rule_for
from signoff.domain.json_input import parse_json_strict
from signoff.domain.params import number_or_none, whole_number
from signoff.domain.states import OVERSEERS, REVIEWERS, Decision, TaskStatus
from signoff.domain.tasks import Principal, task_view
from signoff.errors import NotFound, SignoffError
from signoff.services import common, supervision
from signoff.services import revisions as approval_service
from signoff.services import tasks as task_service
from signoff.services.context import ServiceContext

router = page_router()

ACTIVE = (TaskStatus.PENDING_REVIEW, TaskStatus.CLAIMED)


def _event_text(event: dict[str, Any], me: str, now: datetime) -> str:
    """A notice of what someone else did while the page was open, with when."""
    return f"{wording.event_sentence(event, me)} — {wording.when_text(event['created_at'], now)}."


def _notices(
    trail: list[dict[str, Any]], since_version: int | None, me: str, now: datetime
) -> list[Notice]:
    if since_version is None:
        return []
    return [
        Notice(_event_text(event, me, now), "warn")
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
    context = service_context(request)
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
        # Read only: a GET records nothing (another site can open this page); the page's
        # script records the view once the reviewer acts on it (POST …/viewed).
        previous = await approval_service.last_viewed(context, principal, task)
        if seen is not None and (previous is None or seen < previous):
            previous = seen
        revision = await approval_service.get_revision(
            context, principal, task_id, int(task.current_revision or 0), as_viewed=False
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
    all_notices = list(notices or []) + _notices(trail, since_version, me, now)
    return {
        "principal": principal,
        "task": task,
        "view": task_view(task, now),
        "headline": views.headline(task, request.headers.get("accept-language")),
        "confirm_text": confirm_text,
        "now": rfc3339(now),
        "verdict": views.verdict(task),
        "deadline": views.deadline(task, now),
        "age": views.duration_text((now - task.created_at).total_seconds()),
        "attempted": bundle.get("attempted_actions") or [],
        "snapshot": bundle.get("input_snapshot") or {},
        "trace_id": bundle.get("trace_id"),
        "revision": revision,
        "subject_rows": views.flatten(subject) if subject is not None else [],
        "edit_fields": edit_form.form_fields(request, task, subject),
        "subject_actions": (subject or {}).get("actions") or [],
        "previous_revision": previous,
        "seen_changed": mine and seen is not None and seen != task.current_revision,
        "diff": diff,
        "changes": await changes.change_view(diff, context.cpu.diffs),
        "earlier": earlier,
        "history": wording.history(trail, me, now),
        "compare": await compare.comparison(context, principal, task, request.query_params),
        "compare_link": compare.link,
        "summary_revision": wording.summary_revision(task.has_subject),
        "now_at": now,
        "held_by": task.claimed_by if held else None,
        "mine": mine,
        "lease_left": lease_left,
        "lease_expires_at": rfc3339(task.lease_expires_at) if mine else None,
        "warn_seconds": WARN_SECONDS,
        "active": task.status in ACTIVE,
        "supervisor": principal.role in OVERSEERS,
        "can_review": principal.role in REVIEWERS,
        "notices": all_notices,
        "csrf": csrf_token(request),
        "nav": _nav_query(request),
        "views": views,
        "voting": console_votes.voting_values(request, task, principal),
        "session": await review_session.page_values(
            context, principal, request.query_params, str(task.id)
        ),
        "groups": await supervision.known_groups(context, principal)
        if principal.role in OVERSEERS and task.status in ACTIVE
        else [],
    }


def form_fields(text: str) -> list[dict[str, str]] | None:
    """The form's "fields to change": one per line, the field's JSON Pointer, a space, and
    the reason. Read as written; the decision's rules check them (``fields[i]…``)."""
    found = []
    for line in text.splitlines():
        path, _, reason = line.strip().partition(" ")
        if path:
            found.append({"path": path, "reason": reason.strip()})
    return found or None


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
    """The inbox view (and filters) the reviewer came from, carried for "next task", and
    the reviewing session the task was opened in."""
    pairs = {
        name: request.query_params[name]
        for name in ("view", *FILTER_NAMES)
        if request.query_params.get(name)
    }
    return urlencode(pairs | review_session.session_nav(request.query_params))


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
    template = "_task_body.html" if is_htmx(request) else "task.html"
    # A refusal answers with its own status, whichever door it came through.
    status = next((n.status for n in notices or () if n.status), 200)
    return tokens.apply(render(request, template, status_code=status, **values))


def _int_param(request: Request, name: str) -> int | None:
    return number_or_none(request.query_params.get(name))


@router.get("/tasks/{task_id}")
async def task_page(task_id: str, request: Request, principal: SignedIn) -> Response:
    return await _task_response(
        request,
        principal,
        task_id,
        tokens=TokenChanges.of(request),
        seen=_int_param(request, "seen"),
        since_version=_int_param(request, "since"),
    )


@router.get("/tasks/{task_id}/state")
async def task_state(task_id: str, request: Request, principal: SignedIn) -> Response:
    """What a open page compares with what it shows (version, holder, revision)."""
    context = service_context(request)
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
    context = service_context(request)
    form = await read_form(request)
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
        return Notice(wording.refusal_text(error), "error", error)
    now = context.now()
    held = task.status is TaskStatus.CLAIMED and not task.lease_lapsed(now)
    if held and task.claimed_by != principal.principal_id:
        trail = await task_service.task_audit_trail(context, principal, task_id)
        claims = [e for e in trail if e["action"] == "claim"]
        since = claims[-1]["created_at"] if claims else None
        text = wording.held_by_text(str(task.claimed_by), since, now)
        return Notice(text, "error", error)
    return Notice(wording.refusal_text(error), "error", error)


@router.post("/tasks/{task_id}/viewed")
async def task_viewed(task_id: str, request: Request, principal: CsrfChecked) -> Response:
    """The reviewer looked at ``revision`` (a form field): "changed since you last looked"
    starts from it next time. Sent by the page's script, same-origin with the CSRF token,
    after the reviewer's first click or key press on the page."""
    form = await read_form(request)
    revision = number_or_none(form.get("revision"))
    if revision is None:
        return Response(status_code=422)
    try:
        await approval_service.record_viewed(service_context(request), principal, task_id, revision)
    except NotFound:
        return Response(status_code=404)
    return Response(status_code=204)


@router.post("/tasks/{task_id}/{action}")
async def task_action(
    task_id: str, action: str, request: Request, principal: CsrfChecked
) -> Response:
    tokens = TokenChanges.of(request)
    if action == "decide":
        return await _decide(request, principal, task_id, tokens)
    if action == "vote":
        notices = await console_votes.cast(request, principal, task_id)
        if all(notice.tone != "error" for notice in notices):
            nav = str((await read_form(request)).get("nav") or "")
            following = await review_session.after_decision(request, principal, nav, tokens)
            if following is not None:
                return following
        return await _task_response(request, principal, task_id, tokens=tokens, notices=notices)
    notices = await _act(request, principal, task_id, tokens, action)
    return await _task_response(request, principal, task_id, tokens=tokens, notices=notices)


async def _decide(
    request: Request, principal: Principal, task_id: str, tokens: TokenChanges
) -> Response:
    context = service_context(request)
    form = await read_form(request)
    notes = str(form.get("notes") or "")
    raw_payload = str(form.get("resolution_payload") or "").strip()
    problem: str | None = None
    payload: Any = None
    refusal: SignoffError | None = None
    revision: int | None = None
    try:
        decision = parse_decision(form.get("decision"))
        revision = whole_number(form.get("revision"), field="revision")
    except SignoffError as error:
        decision, problem, refusal = Decision.REJECTED, error.message, error
    if problem is None and raw_payload:
        try:
            payload = parse_json_strict(raw_payload.encode())
        except SignoffError as error:
            problem = f"The resolution payload is not valid JSON: {error.message}"
            refusal = error
    digest = str(form.get("digest") or "") or None
    fields = form_fields(str(form.get("fields") or ""))
    remember = number_or_none(form.get("remember_seconds"))
    edited = None
    if problem is None and rule_for(decision).edits_subject and revision is not None:
        try:
            edited = await edit_form.edited(context, principal, task_id, revision, form)
        except SignoffError as error:
            problem, refusal = error.message, error
    if problem is not None:
        notice = Notice(problem, "error", refusal)
        return await _task_response(request, principal, task_id, tokens=tokens, notices=[notice])
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
            fields=fields,
            subject=edited,
            remember_seconds=remember,
            door="console",
        )
    except SignoffError as error:
        if error.errors:  # what the decision rules require: say it, keep the page as it is
            edit_form.keep_refused(request, form, error)
            notices = [Notice(error.message, "error", error)]
            return await _task_response(request, principal, task_id, tokens=tokens, notices=notices)
        notice = await _refusal_notice(context, principal, task_id, error)
        return await _task_response(request, principal, task_id, tokens=tokens, notices=[notice])
    tokens.drop(task_id)
    nav = str(form.get("nav") or "")
    following_in_session = await review_session.after_decision(request, principal, nav, tokens)
    if following_in_session is not None:
        return following_in_session
    if str(form.get("next") or "") == "on":
        following = await next_in_view(context, principal, nav, task.id)
        if following is not None:
            return go(request, following, tokens)
        return go(
            request,
            "/console?" + urlencode({"notice": "decided"}),
            tokens,
        )
    done = Notice(f"Decision recorded: {decision.value}.", "ok")
    return await _task_response(request, principal, task_id, tokens=tokens, notices=[done])
