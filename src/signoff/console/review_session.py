"""A reviewing session: "Start reviewing" claims the oldest claimable task matching the
inbox's filters and opens it; after each decision the next one is claimed and opened, with
a progress line on the task page, until nothing is left or the reviewer stops. When no
task is left to claim, the session goes on with the tasks awaiting the reviewer's vote
(opened without a claim: votes take no lease), one after each vote; started from the
"Awaiting my vote" view, it goes through those alone.

The session lives in the task page's address (``review``: how many tasks were decided in
it so far, beside the filters), so each tab has its own and a reload keeps it. The address
carries only numbers and filter values; every sentence shown is fixed here or in the
templates. Claims go through :mod:`signoff.services.review_queue`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, urlencode

from fastapi import Request
from starlette.responses import Response

from signoff.console.auth import SignedIn, csrf_token
from signoff.console.rendering import render
from signoff.console.shared import TokenChanges, go, page_router, service_context
from signoff.domain.inbox import MAX_LEVEL
from signoff.domain.params import number_or_none
from signoff.domain.tasks import Principal
from signoff.errors import ErrorCode, SignoffError
from signoff.services import review_queue, vote_queue
from signoff.services.context import ServiceContext
from signoff.services.inbox import InboxFilters

router = page_router()

#: The address parameter that marks a reviewing session: the decisions made in it so far.
SESSION = "review"
#: The address parameter of a task page opened by "Stop reviewing": the decisions made.
STOPPED = "stopped"
FILTERS = ("entity_type", "reason_code", "group", "level")
FILTER_LABELS = {
    "entity_type": "entity type",
    "reason_code": "reason code",
    "group": "group",
    "level": "escalation level",
}
_MAX_COUNT = 1_000_000


def _count(raw: str | None) -> int | None:
    return number_or_none(raw, most=_MAX_COUNT)


def filters_of(params: Mapping[str, str]) -> InboxFilters:
    """The session's filters, as the inbox reads them from its address."""
    values = {name: (params.get(name) or "").strip() or None for name in FILTERS}
    level = values["level"]
    return InboxFilters(
        entity_type=values["entity_type"],
        reason_code=values["reason_code"],
        group=values["group"],
        level=number_or_none(level, most=MAX_LEVEL),
    )


def _filter_pairs(filters: InboxFilters) -> dict[str, str]:
    return {n: str(getattr(filters, n)) for n in FILTERS if getattr(filters, n) is not None}


#: The view a session started from the "Awaiting my vote" tab keeps: votes alone.
VOTES_VIEW = "votes"


def _view(votes_only: bool) -> str:
    return VOTES_VIEW if votes_only else "available"


def session_query(filters: InboxFilters, decided: int, votes_only: bool = False) -> str:
    """The task page's address query inside a session (its view's filters)."""
    pairs = {"view": _view(votes_only), **_filter_pairs(filters), SESSION: str(decided)}
    return urlencode(pairs)


def filters_text(filters: InboxFilters) -> str:
    pairs = _filter_pairs(filters)
    return ", ".join(f"{FILTER_LABELS[n]} {v}" for n, v in pairs.items())


def _params(nav: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(nav).items()}


async def _next_task(
    request: Request,
    principal: Principal,
    filters: InboxFilters,
    tokens: TokenChanges,
    votes_only: bool,
) -> str | None:
    """The next task of a session, claimed (its lease kept in ``tokens``) or awaiting the
    reviewer's vote; ``None`` when nothing is left.

    Raises:
        SignoffError: the claim was refused (``ERR_CLAIM_LIMIT``…).
    """
    context = service_context(request)
    if not votes_only:
        grant = await review_queue.claim_next(context, principal, filters)
        if grant is not None:
            tokens.keep(grant.task.id, grant.lease_token)
            return str(grant.task.id)
    awaiting = await vote_queue.next_vote(context, principal, filters)
    return str(awaiting.id) if awaiting is not None else None


async def start(
    request: Request, principal: Principal, filters: InboxFilters, votes_only: bool = False
) -> Response:
    """Open the first task of a session (the inbox's "Start reviewing")."""
    tokens = TokenChanges.of(request)
    try:
        task_id = await _next_task(request, principal, filters, tokens, votes_only)
    except SignoffError as error:
        return go(request, "/console?" + urlencode({"notice": "refused", "code": error.error_code}))
    if task_id is None:
        return go(
            request, "/console?" + urlencode({"view": _view(votes_only), "notice": "nothing"})
        )
    return go(request, f"/console/tasks/{task_id}?{session_query(filters, 0, votes_only)}", tokens)


async def after_decision(
    request: Request, principal: Principal, nav: str, tokens: TokenChanges
) -> Response | None:
    """Inside a session (``nav``, the task page's query, names one): open the next task
    (claimed, or awaiting a vote), or say the session is over. ``None`` outside a
    session. A vote counts as one decision of the session."""
    params = _params(nav)
    so_far = _count(params.get(SESSION))
    if so_far is None:
        return None
    decided = min(so_far + 1, _MAX_COUNT)
    filters = filters_of(params)
    votes_only = params.get("view") == VOTES_VIEW
    ended = {**_filter_pairs(filters), "decided": str(decided)}
    if votes_only:
        ended["view"] = VOTES_VIEW
    try:
        task_id = await _next_task(request, principal, filters, tokens, votes_only)
    except SignoffError as error:
        reason = "limit" if error.error_code is ErrorCode.CLAIM_LIMIT else "refused"
        return go(request, "/console/review/done?" + urlencode({**ended, "reason": reason}), tokens)
    if task_id is None:
        return go(request, "/console/review/done?" + urlencode(ended), tokens)
    query = session_query(filters, decided, votes_only)
    return go(request, f"/console/tasks/{task_id}?{query}", tokens)


async def page_values(
    context: ServiceContext, principal: Principal, params: Mapping[str, str], task_id: str
) -> dict[str, Any] | None:
    """The task page's session line: in a session, its progress and the way out; after
    "Stop reviewing", how many were decided. ``None`` for a task opened otherwise."""
    filters = filters_of(params)
    decided = _count(params.get(SESSION))
    votes_only = params.get("view") == VOTES_VIEW
    if decided is not None:
        stop = {"view": _view(votes_only), **_filter_pairs(filters), STOPPED: str(decided)}
        votes = await vote_queue.count_awaiting(context, principal, filters, other_than=task_id)
        claimable = 0 if votes_only else await review_queue.waiting(context, principal, filters)
        return {
            "active": True,
            "decided": decided,
            "waiting": claimable + votes,
            "filters": filters_text(filters),
            "stop_url": f"/console/tasks/{task_id}?{urlencode(stop)}",
        }
    stopped = _count(params.get(STOPPED))
    if stopped is not None:
        return {"active": False, "decided": stopped, "filters": filters_text(filters)}
    return None


def session_nav(params: Mapping[str, str]) -> dict[str, str]:
    """The session's part of a task page's address, carried by its forms."""
    if _count(params.get(SESSION)) is None:
        return {}
    return {SESSION: params[SESSION]}


@router.get("/review/done")
async def done(request: Request, principal: SignedIn) -> Response:
    """The end of a session: nothing left to claim (or the claim limit reached)."""
    params = request.query_params
    filters = filters_of(params)
    reason = params.get("reason")
    return render(
        request,
        "review_done.html",
        principal=principal,
        decided=_count(params.get("decided")) or 0,
        reason=reason if reason in ("limit", "refused") else None,
        filters=filters,
        filters_text=filters_text(filters),
        votes_only=params.get("view") == VOTES_VIEW,
        inbox_query=urlencode(
            {"view": _view(params.get("view") == VOTES_VIEW), **_filter_pairs(filters)}
        ),
        csrf=csrf_token(request),
    )
