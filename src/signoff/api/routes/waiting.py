"""Escalation policies, cancellation, notifications and resume links."""

from __future__ import annotations

import secrets
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, quote

import jinja2
from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse, Response

from signoff.api.deps import (
    Caller,
    Context,
    bearer_token,
    json_response,
    problems,
    read_body,
    read_json_body,
)
from signoff.api.problems import problem_response
from signoff.api.schemas import TaskOut
from signoff.console import changes, wording
from signoff.console.auth import current_user
from signoff.console.views import flatten
from signoff.domain.decisions import choices, notes_rule, parse_decision
from signoff.domain.edits import PREFIX as EDIT_PREFIX
from signoff.domain.edits import edit_fields
from signoff.domain.params import number_or_none, whole_number
from signoff.domain.states import Decision
from signoff.domain.tasks import view_for
from signoff.errors import ErrorCode, FieldError, SignoffError, validation_error
from signoff.services import keys, policies, resume_links, waiting
from signoff.services import notifications as notification_service
from signoff.services.context import ServiceContext
from signoff.services.resume_links import LinkState

router = APIRouter()

_templates = jinja2.Environment(
    # The page's own template, and the console's wording macros (_words.html) it shares.
    loader=jinja2.ChoiceLoader(
        [
            jinja2.FunctionLoader(
                lambda name: (
                    resources.files("signoff.api").joinpath("templates", name).read_text("utf-8")
                    if name == "resume.html"
                    else None
                )
            ),
            jinja2.PackageLoader("signoff.console", "templates"),
        ]
    ),
    autoescape=True,
)
_templates.globals.update(decision_choices=choices, notes_rule=notes_rule(), words=wording)

POLICY_SCHEMA = {
    "type": "object",
    "required": ["name", "levels"],
    "properties": {
        "name": {"type": "string"},
        "levels": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["after_seconds", "action"],
                "properties": {
                    "after_seconds": {"type": "integer", "minimum": 1},
                    "action": {"enum": ["remind", "reassign", "expire"]},
                    "notify": {
                        "type": "array",
                        "items": {"type": "string", "pattern": "^(group|principal):.+$"},
                    },
                    "assign_group": {"type": "string"},
                },
            },
        },
    },
}


def _policy_doc() -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": POLICY_SCHEMA}},
        }
    }


@router.post(
    "/escalation-policies",
    tags=["waiting"],
    status_code=201,
    response_model=None,
    openapi_extra=_policy_doc(),
    responses=problems(400, 409, 413, 422),
    summary="Create an escalation policy (admin)",
)
async def create_policy(request: Request, context: Context, caller: Caller) -> Response:
    body = await read_json_body(request)
    saved = await policies.save_policy(context, caller, body, create=True)
    location = f"/escalation-policies/{quote(str(saved['name']), safe='')}"
    return json_response(saved, 201, headers={"Location": location})


@router.get(
    "/escalation-policies",
    tags=["waiting"],
    response_model=None,
    responses=problems(),
    summary="List policies (admin)",
)
async def list_policies(context: Context, caller: Caller) -> Response:
    return json_response({"items": await policies.list_policies(context, caller)})


@router.get(
    "/escalation-policies/{name}",
    tags=["waiting"],
    response_model=None,
    responses=problems(404),
    summary="One policy (admin)",
)
async def get_policy(name: str, context: Context, caller: Caller) -> Response:
    return json_response(await policies.get_policy(context, caller, name))


@router.put(
    "/escalation-policies/{name}",
    tags=["waiting"],
    response_model=None,
    openapi_extra=_policy_doc(),
    responses=problems(400, 404, 413, 422),
    summary="Replace a policy (admin); waiting tasks keep their levels",
)
async def replace_policy(name: str, request: Request, context: Context, caller: Caller) -> Response:
    body = await read_json_body(request)
    return json_response(await policies.save_policy(context, caller, body, create=False, name=name))


@router.delete(
    "/escalation-policies/{name}",
    tags=["waiting"],
    status_code=204,
    response_model=None,
    responses=problems(404),
    summary="Delete a policy (admin)",
)
async def delete_policy(name: str, context: Context, caller: Caller) -> Response:
    await policies.delete_policy(context, caller, name)
    return Response(status_code=204)


@router.post(
    "/tasks/{task_id}/cancel",
    tags=["waiting"],
    response_model=None,
    responses={200: {"model": TaskOut}, **problems(404, 409)},
    summary="Withdraw a waiting task (producer)",
)
async def cancel(task_id: str, context: Context, caller: Caller) -> Response:
    return json_response(
        view_for(caller, await waiting.cancel(context, caller, task_id), context.now())
    )


@router.get(
    "/tasks/{task_id}/notifications",
    tags=["waiting"],
    response_model=None,
    responses=problems(404),
    summary="Notifications queued and sent for a task (admin, supervisor)",
)
async def notifications(task_id: str, context: Context, caller: Caller) -> Response:
    return json_response(
        {"items": await notification_service.task_notifications(context, caller, task_id)}
    )


async def _page(
    state: LinkState,
    context: ServiceContext,
    *,
    status: int | None = None,
    message: str | None = None,
    advice: str | None = None,
    console_url: str | None = None,
    notes: str = "",
) -> HTMLResponse:
    task = state.task or {}
    bundle = task.get("diagnostic_bundle") or {}
    style_nonce = secrets.token_urlsafe(16)
    html = _templates.get_template("resume.html").render(
        style_nonce=style_nonce,
        title="Decision requested" if state.state == "open" else "Decision link",
        state=state.state,
        message=message or state.message,
        advice=wording.link_advice(state.reason) if advice is None else advice,
        offer_console=advice is None and wording.link_offers_console(state.reason),
        task=task or None,
        verdict=bundle.get("evaluator_verdict") or {},
        snapshot=bundle.get("input_snapshot") or {},
        attempted=bundle.get("attempted_actions") or [],
        approver=state.approver,
        csrf=state.csrf,
        revision=state.revision,
        subject_rows=flatten(state.revision["subject"]) if state.revision else [],
        edit_fields=edit_fields(
            task.get("editable") if not task.get("approval_rule") else None,
            state.revision["subject"] if state.revision else None,
        ),
        changes=await changes.change_view(state.diff, context.cpu.diffs),
        comparison=await changes.change_view(state.comparison, context.cpu.diffs),
        revisions=range(1, int(task.get("current_revision") or 0) + 1),
        summary_revision=wording.summary_revision(task.get("current_revision") is not None),
        console_url=console_url,
        notes=notes,
    )
    headers = {
        "Cache-Control": "no-store",
        "Referrer-Policy": "no-referrer",
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        # No script at all: the page is plain forms, styled by its own one style element.
        # Links to evidence still open.
        "Content-Security-Policy": (
            f"default-src 'none'; style-src 'nonce-{style_nonce}'; form-action 'self'; "
            "base-uri 'none'; frame-ancestors 'none'"
        ),
    }
    return HTMLResponse(html, status_code=status or state.http_status, headers=headers)


def _media_type(header: str | None) -> str:
    return (header or "").split(";", 1)[0].strip().lower()


def _is_json(request: Request) -> bool:
    """JSON mode only for exactly ``application/json``: a cross-site form cannot send that
    media type without a CORS preflight, which Signoff never grants."""
    return _media_type(request.headers.get("content-type")) == "application/json"


def _wants_json(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return _is_json(request) or ("application/json" in accept and "text/html" not in accept)


def _link_json(state: LinkState) -> Response:
    return json_response(
        {"state": state.state, "message": state.message, "task": state.task}, state.http_status
    )


async def _error_page(error: SignoffError, context: ServiceContext) -> HTMLResponse:
    status = problem_response(error).status_code
    reason = "unknown" if error.error_code is ErrorCode.LINK_NOT_FOUND else "refused"
    gone = LinkState(status, "gone", wording.refusal_text(error), reason)
    return await _page(gone, context)


@router.get(
    "/r/{token}",
    tags=["resume links"],
    response_model=None,
    include_in_schema=True,
    responses={
        200: {"description": "The decision page (or JSON)"},
        404: {"description": "Unknown link"},
        410: {"description": "Expired, cancelled or withdrawn"},
    },
    summary="A resume link's page; never changes state",
)
async def show_link(token: str, request: Request, context: Context) -> Response:
    try:
        state = await resume_links.view_link(context, token, _compare(request))
    except SignoffError as error:
        return (
            problem_response(error) if _wants_json(request) else await _error_page(error, context)
        )
    if _wants_json(request):
        return _link_json(state)
    return await _page(state, context, console_url=await _console_url(request, state))


def _compare(request: Request) -> tuple[int, int] | None:
    """The two revisions the page's compare control chose (``None``: none, or not numbers)."""
    start, end = (
        number_or_none(request.query_params.get(name) or "")
        for name in ("compare_from", "compare_to")
    )
    if start is None or end is None:
        return None
    return start, end


async def _console_url(request: Request, state: LinkState) -> str | None:
    """The same task in the console, for a person signed in there."""
    task_id = (state.task or {}).get("id")
    if not task_id or state.state == "gone" or await current_user(request) is None:
        return None
    return f"/console/tasks/{task_id}"


@router.post(
    "/r/{token}",
    tags=["resume links"],
    response_model=None,
    responses={
        200: {"description": "Recorded, or already recorded (a repeat is a no-op)"},
        403: {"description": "Forged form, another approver, or self-approval"},
        404: {"description": "Unknown link"},
        409: {"description": "Someone else is reviewing"},
        410: {"description": "Expired, cancelled or withdrawn"},
        413: {"description": "Body larger than SIGNOFF_MAX_BODY_BYTES"},
        422: {"description": "Unknown decision, or what the decision rules require (notes)"},
    },
    summary='Decide with a resume link: a CSRF-protected form, or JSON {"decision": ...}',
)
async def use_link(
    token: str,
    request: Request,
    context: Context,
) -> Response:
    authorization = request.headers.get("authorization")
    as_json = _is_json(request)
    notes: object = None
    try:
        if as_json:
            body = await read_json_body(request)
            decision, revision = _json_decision(body)
            notes = body.get("notes")
            csrf = None
            bearer = bearer_token(authorization)
            caller = await keys.authenticate(context, bearer) if authorization else None
        else:
            form = parse_qs((await read_body(request)).decode("utf-8", "replace"))
            decision = parse_decision((form.get("decision") or [""])[0])
            csrf = (form.get("csrf") or [""])[0]
            revision = whole_number((form.get("revision") or [""])[0], field="revision")
            notes = (form.get("notes") or [""])[0]
            edits = {k: v[0] for k, v in form.items() if k.startswith(EDIT_PREFIX) and v}
            caller = None
        state = await resume_links.decide_by_link(
            context, token, decision, csrf=csrf, caller=caller, revision=revision, notes=notes,
            edits=edits if not as_json else None,
        )  # fmt: skip
    except SignoffError as error:
        if as_json:
            return problem_response(error)
        # A link that is still open shows its page again, the reason on top, the notes kept.
        return await _page_again(context, token, error, notes)
    return _link_json(state) if as_json else await _page(state, context)


async def _page_again(
    context: ServiceContext, token: str, error: SignoffError, notes: object
) -> Response:
    """The page again after a refusal: what happened and what to do in words that fit
    the reason (someone else is reviewing, a newer revision, …), the notes as typed."""
    kept = notes if isinstance(notes, str) else ""
    try:
        state = await resume_links.view_link(context, token)
    except SignoffError:
        return await _error_page(error, context)
    status = problem_response(error).status_code
    if state.state != "open":
        return await _page(state, context, status=status, notes=kept)
    task = state.task or {}
    holder = task.get("claimed_by")
    if task.get("status") == "CLAIMED" and holder and holder != state.approver:
        message = wording.held_by_text(str(holder), None, None)
        return await _page(state, context, status=status, message=message, advice="", notes=kept)
    message = wording.refusal_text(error)
    return await _page(state, context, status=status, message=message, advice="", notes=kept)


def _json_decision(body: Any) -> tuple[Decision, int | None]:
    """``{"decision", "revision"?}``; a task with a subject needs the revision decided on."""
    if not isinstance(body, dict) or set(body) - {"decision", "revision", "notes"}:
        raise validation_error(
            [FieldError("(root)", 'expected {"decision", "revision"?, "notes"?}')]
        )
    revision = body.get("revision")
    valid = isinstance(revision, int) and not isinstance(revision, bool) and 1 <= revision < 2**31
    if revision is not None and not valid:
        raise validation_error([FieldError("revision", "must be a revision number")])
    return parse_decision(body.get("decision")), revision
