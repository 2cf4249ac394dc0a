"""The inbox: its views and filters, the rows a view shows, "start reviewing" and the
supervisors' bulk actions.

Which views a person may open, what a view lists and who may act come from the services;
a refusal is shown on the page in words, never as a bare status code.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlencode

from fastapi import Request
from starlette.responses import JSONResponse, Response

from signoff.console import review_session, views
from signoff.console.auth import CsrfChecked, SignedIn, csrf_token
from signoff.console.headline_words import my_vote, searched_fields
from signoff.console.rendering import render
from signoff.console.shared import (
    WARN_SECONDS,
    TokenChanges,
    go,
    page_router,
    read_form,
    service_context,
)
from signoff.domain.clock import rfc3339
from signoff.domain.inbox import MAX_LEVEL, Cursor, decode_cursor, search_terms
from signoff.domain.params import number_or_none, whole_number
from signoff.domain.states import OVERSEERS, TaskStatus
from signoff.domain.tasks import Principal, Task, votes_view
from signoff.errors import ErrorCode, FieldError, SignoffError, Unprocessable, validation_error
from signoff.services import inbox as inbox_service
from signoff.services import supervision
from signoff.services import tasks as task_service
from signoff.services.context import ServiceContext
from signoff.services.inbox import LABELS, InboxFilters, View

router = page_router()

FILTER_NAMES = ("entity_type", "reason_code", "group", "level")
#: The address's search parameter (its words are matched as
#: :func:`signoff.domain.inbox.search_text` says).
SEARCH = "q"


def _filters(
    request: Request, terms: tuple[str, ...] = (), *, with_level: bool = True
) -> InboxFilters:
    """The address's filters.

    Raises:
        Unprocessable: ``ERR_VALIDATION`` (field ``level``) for a level that is not a
            whole number up to :data:`MAX_LEVEL` (unless ``with_level`` is false).
    """
    values = {name: (request.query_params.get(name) or "").strip() or None for name in FILTER_NAMES}
    level = values.pop("level")
    return InboxFilters(
        entity_type=values["entity_type"],
        reason_code=values["reason_code"],
        group=values["group"],
        level=whole_number(level, field="level", most=MAX_LEVEL) if with_level else None,
        terms=terms,
    )


def _search(request: Request) -> str:
    """The search as the address carries it, its spaces tidied."""
    return " ".join((request.query_params.get(SEARCH) or "").split())


def _cursor(request: Request) -> Cursor | None:
    for field, backward in (("after", False), ("before", True)):
        raw = request.query_params.get(field)
        if raw:
            return decode_cursor(raw, backward=backward, field=field)
    return None


def _view(request: Request, principal: Principal) -> View:
    raw = request.query_params.get("view")
    allowed = inbox_service.views_for(principal)
    try:
        view = View(raw) if raw else View.AVAILABLE
    except ValueError:
        view = View.AVAILABLE
    return view if view in allowed else View.AVAILABLE


def _query(view: View, filters: InboxFilters, search: str = "", **extra: str) -> str:
    pairs: dict[str, str] = {"view": view.value}
    for name in FILTER_NAMES:
        value = getattr(filters, name)
        if value is not None:
            pairs[name] = str(value)
    if search:
        pairs[SEARCH] = search
    return urlencode(pairs | extra)


def _row(
    task: Task, principal: Principal, now: datetime, language: str | None = None
) -> dict[str, Any]:
    held = task.status is TaskStatus.CLAIMED and not task.lease_lapsed(now)
    return {
        "task": task,
        "headline": views.headline(task, language),
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
        "votes": votes_view(task)["approval_progress"]["text"] if task.approval_rule else None,
        "my_vote": my_vote(task, principal),
    }


#: What the page says instead of a refused search or page link (status 422).
REFUSED_INPUT = {
    SEARCH: "The search is too long or not readable: at most 200 characters. "
    "Showing the view without it.",
    "after": "That page link does not belong to this view: showing its first page.",
    "level": "The escalation level must be a whole number written in digits 0-9. "
    "Showing the view without it.",
}


async def _inbox_values(request: Request, principal: Principal) -> dict[str, Any]:
    context = service_context(request)
    now = context.now()  # before the rows are read: the "N new" count starts here
    view = _view(request, principal)
    refused: str | None = None
    search = _search(request)
    try:
        terms = search_terms(search)
    except Unprocessable:
        refused, search, terms = SEARCH, "", ()
    try:
        filters = _filters(request, terms)
    except Unprocessable:
        refused, filters = "level", _filters(request, terms, with_level=False)
    try:
        cursor = _cursor(request)
        page = await inbox_service.page_of_view(context, principal, view, filters, cursor=cursor)
    except Unprocessable as error:
        fields = {e.field for e in error.errors}
        if not fields & {"after", "before"}:
            raise
        refused = "after"
        page = await inbox_service.page_of_view(context, principal, view, filters)
    previous, following = page.previous, page.next
    language = request.headers.get("accept-language")
    return {
        "principal": principal,
        "view": view,
        "views": [(v, LABELS[v]) for v in inbox_service.views_for(principal)],
        "filters": filters,
        "search": search,
        "query": _query(view, filters, search),
        "filter_query": lambda v: _query(v, filters, search),
        "unsearched_query": _query(view, filters),
        "page": page,
        "previous_query": _query(view, filters, search, before=previous.encode())
        if previous
        else None,
        "next_query": _query(view, filters, search, after=following.encode())
        if following
        else None,
        "rows": [_row(task, principal, now, language) for task in page.tasks],
        "searched": searched_fields(),
        "now": rfc3339(now),
        "supervisor": principal.role in OVERSEERS,
        "csrf": csrf_token(request),
        "message": REFUSED_INPUT[refused] if refused else notice_text(request.query_params),
        "refused": refused is not None,
        "warn_seconds": WARN_SECONDS,
    }


@router.get("")
async def inbox(request: Request, principal: SignedIn) -> Response:
    values = await _inbox_values(request, principal)
    context = service_context(request)
    values["facets"] = await inbox_service.facets(context, principal)
    values["counts"] = await inbox_service.count_views(context, principal, values["filters"])
    status = 422 if values.pop("refused") else 200
    return render(request, "inbox.html", status_code=status, **values)


@router.get("/inbox/rows")
async def inbox_rows(request: Request, principal: SignedIn) -> Response:
    """The rows of a view's page alone (filters applied without a reload)."""
    values = await _inbox_values(request, principal)
    status = 422 if values.pop("refused") else 200
    return render(request, "_rows.html", status_code=status, **values)


def _since(raw: str) -> datetime:
    try:
        moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise validation_error([FieldError("since", "is not an RFC 3339 date-time")])
    return moment


@router.get("/inbox/new")
async def inbox_new(request: Request, principal: SignedIn) -> Response:
    """How many tasks of the view (filters and search applied) were escalated after
    ``since`` (the page's time): the "N new" pill, whatever page is shown."""
    context = service_context(request)
    view = _view(request, principal)
    try:
        since = _since(request.query_params.get("since") or "")
        filters = _filters(request, search_terms(_search(request)))
        count = await inbox_service.count_new(context, principal, view, filters, since)
    except Unprocessable as error:
        return JSONResponse(
            {"error_code": error.error_code, "errors": [e.field for e in error.errors]},
            status_code=422,
            headers={"Cache-Control": "no-store"},
        )
    return JSONResponse({"new": count}, headers={"Cache-Control": "no-store"})


@router.post("/start")
async def start_reviewing(request: Request, principal: CsrfChecked) -> Response:
    """Start a reviewing session: claim the oldest task the reviewer may take (the
    filters of the current view apply), or open the oldest awaiting their vote; each
    decision or vote then opens the next (:mod:`signoff.console.review_session`). From
    the "Awaiting my vote" view, the session goes through votes alone."""
    form = await read_form(request)
    filters = review_session.filters_of({name: form.get(name) or "" for name in FILTER_NAMES})
    votes_only = form.get("view") == review_session.VOTES_VIEW
    return await review_session.start(request, principal, filters, votes_only)


@router.post("/bulk")
async def bulk(request: Request, principal: CsrfChecked) -> Response:
    """Supervisors: claim, release or reassign several tasks at once (never approve:
    each approval names one revision)."""
    form = await read_form(request)
    action = str(form.get("action") or "")
    ids = [str(value) for value in form.getlist("task")]
    group = str(form.get("group") or "")
    back = str(form.get("back") or "view=all")
    context = service_context(request)
    tokens = TokenChanges.of(request)
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
                failed.append(ErrorCode.VALIDATION)
                break
            done += 1
        except SignoffError as error:
            failed.append(error.error_code)
    outcome = {"notice": "bulk", "action": action, "done": done, "of": len(ids)}
    if failed:
        outcome["failed"] = ",".join(dict.fromkeys(failed))
    return go(request, f"/console?{back}&" + urlencode(outcome), tokens)


BULK_ACTIONS = ("claim", "release", "reassign")


def notice_text(params: Mapping[str, str]) -> str | None:
    """The inbox's notice after a redirect. The address carries only a notice's name,
    numbers and error codes, each shown as a fixed text: whatever else anyone writes
    into a link is never shown."""
    notice = params.get("notice")
    if notice == "nothing":
        return "Nothing to review."
    if notice == "decided":
        return "Decision recorded. Nothing else in this view."
    if notice == "refused":
        return _meaning(params.get("code", "")) or "That could not be done."
    if notice == "bulk" and params.get("action") in BULK_ACTIONS:
        done, total = params.get("done", ""), params.get("of", "")
        done_count, total_count = number_or_none(done), number_or_none(total)
        if done_count is None or total_count is None:
            return None
        reasons = [_meaning(code) for code in params.get("failed", "").split(",") if code]
        text = f"{params['action']}: {done_count} of {total_count} done."
        known = [reason for reason in reasons if reason]
        return text + (" Not done: " + " ".join(known[:5]) if known else "")
    return None


_CODES = {member.value: member for member in ErrorCode}


def _meaning(code: str) -> str | None:
    """The error code's one-line meaning, without the API fields it names."""
    member = _CODES.get(code)
    return re.sub(r" \(with `[^)]*\)", "", member.meaning) if member is not None else None


async def next_in_view(
    context: ServiceContext, principal: Principal, nav: str, decided: uuid.UUID
) -> str | None:
    """Outside a reviewing session: the next task of the view the reviewer came from
    (``nav``: that view's query), other than the one just decided, opened unclaimed.
    The Mine view goes on with the next task the reviewer holds; a view of tasks held by
    someone else skips those (the reviewer could not act on them)."""
    params = {k: v[0] for k, v in parse_qs(nav).items()}
    try:
        view = View(params.get("view") or View.AVAILABLE.value)
    except ValueError:
        view = View.AVAILABLE
    if view not in inbox_service.views_for(principal):
        view = View.AVAILABLE
    filters = review_session.filters_of(params)
    tasks = await inbox_service.list_view(context, principal, view, filters, limit=50)
    now = context.now()
    for task in tasks:
        held_by_other = (
            task.status is TaskStatus.CLAIMED
            and not task.lease_lapsed(now)
            and task.claimed_by != principal.principal_id
        )
        if task.id != decided and not held_by_other:
            return f"/console/tasks/{task.id}?{nav}" if nav else f"/console/tasks/{task.id}"
    return None
