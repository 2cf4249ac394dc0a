"""The people page (admins): who signs in to the console, adding a person (with their
set-password link), changing their role and groups, disabling and enabling them.

Every write goes through :mod:`signoff.services.users` (the rules of names, e-mail
addresses, roles and who may manage people live there); this module turns its refusals
into sentences next to the field they are about. Whatever takes access away (disabling, a
lesser role, fewer groups) asks for a confirmation first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlencode

from fastapi import Request
from starlette.responses import Response

from signoff.console.auth import CsrfChecked, SignedIn
from signoff.console.rendering import render
from signoff.console.shared import Form, go, page_router, read_form, service_context
from signoff.domain.states import Role
from signoff.domain.tasks import Principal
from signoff.domain.users import User
from signoff.errors import (
    Conflict,
    ErrorCode,
    Forbidden,
    NotFound,
    SignoffError,
    Unprocessable,
)
from signoff.services import users as user_service
from signoff.services.invitations import MailResult, mail_password_link

router = page_router()

PEOPLE_PATH = "/console/people"

#: What a fixed notice name in the address says (never text from the address itself).
NOTICES = {
    "changed": "The role and groups are saved; they apply from the person's next click.",
    "unchanged": "Nothing changed: the role and groups were already so.",
    "disabled": "Disabled. Every session of this person has ended; they cannot sign in.",
    "enabled": "Enabled. This person can sign in again.",
}

#: How each field is named on the page, and what to do when it is refused.
FIELDS = {
    "principal_id": ("The principal id", "For example ann or ann.lee."),
    "email": ("The E-mail field", "Write it as name@example.com, or leave the field empty."),
    "role": ("The role", "Choose one from the list."),
    "groups": ("A group name", "Separate group names with commas; a name has no spaces."),
}


@dataclass
class Draft:
    """What was typed into the "Add a person" form, and what was wrong with it."""

    principal_id: str = ""
    email: str = ""
    role: str = Role.REVIEWER.value
    groups: str = ""
    errors: dict[str, str] = field(default_factory=dict)


def sign_in_method(user: User) -> str:
    if user.source == "oidc":
        return "single sign-on and a password" if user.password_hash else "single sign-on"
    return "a password" if user.password_hash else "a password (not set yet)"


def groups_text(groups: tuple[str, ...] | list[str]) -> str:
    return ", ".join(groups)


def parse_groups(text: str) -> list[str]:
    """``"payments, aml"`` → ``["payments", "aml"]`` (empty names dropped)."""
    return [name.strip() for name in text.split(",") if name.strip()]


def field_errors(error: SignoffError) -> dict[str, str]:
    """The service's refusal as sentences per form field (no error codes)."""
    if isinstance(error, Conflict) and error.error_code is ErrorCode.EMAIL_IN_USE:
        return {
            "email": "Another person has this e-mail address. Use a different one, or "
            "leave the field empty."
        }
    if isinstance(error, Conflict) and error.error_code is ErrorCode.USER_EXISTS:
        return {
            "principal_id": "Someone already has this principal id. Choose another one, "
            "or change that person in the list below."
        }
    errors: dict[str, str] = {}
    for item in error.errors if isinstance(error, Unprocessable) else ():
        name = item.field.split("[", 1)[0]
        label, advice = FIELDS.get(name, ("This field", "Check it and try again."))
        errors.setdefault(name, f"{label} {item.message}. {advice}")
    return errors or {"form": error.message[:1].upper() + error.message[1:] + "."}


def _forbidden(request: Request, principal: Principal) -> Response:
    return render(
        request,
        "message.html",
        status_code=403,
        principal=principal,
        title="Only administrators manage people",
        paragraphs=[
            f"You are signed in as {principal.principal_id}, a {principal.role.value}. Adding "
            "people and changing their access needs an administrator.",
            "If your own access needs a change, ask one of your administrators.",
        ],
        back_href="/console",
        back_label="Back to the inbox",
    )


def _person_url(principal_id: str, notice: str | None = None) -> str:
    query = {"principal_id": principal_id} | ({"notice": notice} if notice else {})
    return f"{PEOPLE_PATH}/edit?{urlencode(query)}"


async def _people_page(
    request: Request, principal: Principal, draft: Draft, *, status_code: int = 200
) -> Response:
    try:
        people = await user_service.list_users(service_context(request), principal)
    except Forbidden:
        return _forbidden(request, principal)
    return render(
        request,
        "people.html",
        status_code=status_code,
        principal=principal,
        people=sorted(people, key=lambda user: user.principal_id.lower()),
        draft=draft,
        roles=[role.value for role in user_service.USER_ROLES],
        sign_in_method=sign_in_method,
        groups_text=groups_text,
        person_url=_person_url,
    )


@router.get("/people")
async def people_page(request: Request, principal: SignedIn) -> Response:
    return await _people_page(request, principal, Draft())


@router.post("/people")
async def add_person(request: Request, principal: CsrfChecked) -> Response:
    form = await read_form(request)
    draft = Draft(
        principal_id=(form.get("principal_id") or "").strip(),
        email=(form.get("email") or "").strip(),
        role=form.get("role") or "",
        groups=form.get("groups") or "",
    )
    context = service_context(request)
    try:
        role = Role(draft.role)
    except ValueError:
        draft.errors["role"] = "Choose a role from the list: " + ", ".join(
            role.value for role in user_service.USER_ROLES
        )
        return await _people_page(request, principal, draft, status_code=422)
    try:
        created = await user_service.create_user(
            context,
            principal,
            principal_id=draft.principal_id,
            role=role,
            groups=parse_groups(draft.groups),
            email=draft.email or None,
        )
    except Forbidden:
        return _forbidden(request, principal)
    except (Unprocessable, Conflict) as error:
        draft.errors = field_errors(error)
        status = error.error_code.status or 422
        return await _people_page(request, principal, draft, status_code=status)
    link = created.set_password_link
    mailed = await mail_password_link(context, created.user, link) if link else None
    return _link_page(request, principal, created.user, link, mailed, added=True)


def _link_page(
    request: Request,
    principal: Principal,
    user: User,
    link: str | None,
    mailed: MailResult | None,
    *,
    added: bool,
) -> Response:
    return render(
        request,
        "people_link.html",
        principal=principal,
        person=user,
        link=link,
        mailed=mailed,
        added=added,
        hours=user_service.PASSWORD_LINK_HOURS,
        person_url=_person_url,
    )


async def _find(request: Request, principal: Principal, principal_id: str) -> User | Response:
    try:
        return await user_service.get_user(service_context(request), principal, principal_id)
    except Forbidden:
        return _forbidden(request, principal)
    except NotFound:
        return render(
            request,
            "message.html",
            status_code=404,
            principal=principal,
            title="No such person",
            paragraphs=[
                "Nobody with this principal id signs in to the console. They may have been "
                "typed differently: find them in the list of people."
            ],
            back_href=PEOPLE_PATH,
            back_label="Back to the people",
        )


def _person_page(
    request: Request,
    principal: Principal,
    person: User,
    *,
    errors: dict[str, str] | None = None,
    status_code: int = 200,
) -> Response:
    return render(
        request,
        "person.html",
        status_code=status_code,
        principal=principal,
        person=person,
        roles=[role.value for role in user_service.USER_ROLES],
        notice=NOTICES.get(request.query_params.get("notice", "")),
        errors=errors or {},
        sign_in_method=sign_in_method,
        groups_text=groups_text,
    )


@router.get("/people/edit")
async def person_page(request: Request, principal: SignedIn) -> Response:
    found = await _find(request, principal, request.query_params.get("principal_id", ""))
    if isinstance(found, Response):
        return found
    return _person_page(request, principal, found)


def _taken_away(person: User, role: Role, groups: list[str]) -> list[str]:
    """What a change of role and groups takes from ``person``, in words."""
    lost = []
    ranks = list(user_service.USER_ROLES)
    if person.role in ranks and role in ranks and ranks.index(role) < ranks.index(person.role):
        lost.append(f"the role {person.role.value} becomes {role.value}")
    removed = [group for group in person.groups if group not in groups]
    if removed:
        lost.append(
            ("the group " if len(removed) == 1 else "the groups ")
            + ", ".join(removed)
            + (" is" if len(removed) == 1 else " are")
            + " taken away: tasks assigned there leave their inbox"
        )
    return lost


def _if_yourself(principal: Principal, person: User) -> list[str]:
    if person.principal_id != principal.principal_id:
        return []
    return [
        "This is your own account: you may lose access to this page, and only another "
        "administrator can give it back."
    ]


def _confirm_page(
    request: Request,
    principal: Principal,
    person: User,
    *,
    title: str,
    consequences: list[str],
    action: str,
    button: str,
    fields: dict[str, str],
) -> Response:
    return render(
        request,
        "people_confirm.html",
        principal=principal,
        person=person,
        title=title,
        consequences=consequences,
        action=action,
        button=button,
        fields=fields,
        cancel_href=_person_url(person.principal_id),
    )


@router.post("/people/access")
async def change_access(request: Request, principal: CsrfChecked) -> Response:
    form = await read_form(request)
    found = await _find(request, principal, form.get("principal_id") or "")
    if isinstance(found, Response):
        return found
    try:
        role = Role(form.get("role") or "")
    except ValueError:
        return _person_page(
            request,
            principal,
            found,
            errors={"role": "Choose a role from the list."},
            status_code=422,
        )
    groups_typed = form.get("groups") or ""
    groups = parse_groups(groups_typed)
    if role is found.role and groups == list(found.groups):
        return go(request, _person_url(found.principal_id, "unchanged"))
    lost = _taken_away(found, role, groups)
    if lost and form.get("confirm") != "yes":
        return _confirm_page(
            request,
            principal,
            found,
            title=f"Take access away from {found.principal_id}?",
            consequences=[f"{item[:1].upper()}{item[1:]}." for item in lost]
            + ["This applies from their next click; a task they hold now stays theirs."]
            + _if_yourself(principal, found),
            action=f"{PEOPLE_PATH}/access",
            button="Yes, change the access",
            fields={"principal_id": found.principal_id, "role": role.value, "groups": groups_typed},
        )
    try:
        await user_service.update_user(
            service_context(request), principal, found.principal_id, role=role, groups=groups
        )
    except Forbidden:
        return _forbidden(request, principal)
    except (Unprocessable, Conflict) as error:
        return _person_page(
            request,
            principal,
            found,
            errors=field_errors(error),
            status_code=error.error_code.status or 422,
        )
    return go(request, _person_url(found.principal_id, "changed"))


@router.post("/people/disable")
async def disable_person(request: Request, principal: CsrfChecked) -> Response:
    form = await read_form(request)
    found = await _find(request, principal, form.get("principal_id") or "")
    if isinstance(found, Response):
        return found
    if form.get("confirm") != "yes":
        return _confirm_page(
            request,
            principal,
            found,
            title=f"Disable {found.principal_id}?",
            consequences=[
                "Every session they have ends now: their next click asks them to sign in, "
                "and signing in is refused.",
                "Their unused set-password links stop working.",
                "Nothing they decided changes. You can enable them again later.",
                *_if_yourself(principal, found),
            ],
            action=f"{PEOPLE_PATH}/disable",
            button=f"Yes, disable {found.principal_id}",
            fields={"principal_id": found.principal_id},
        )
    return await _set_disabled(request, principal, found, disabled=True)


@router.post("/people/enable")
async def enable_person(request: Request, principal: CsrfChecked) -> Response:
    form = await read_form(request)
    found = await _find(request, principal, form.get("principal_id") or "")
    if isinstance(found, Response):
        return found
    return await _set_disabled(request, principal, found, disabled=False)


async def _set_disabled(
    request: Request, principal: Principal, person: User, *, disabled: bool
) -> Response:
    try:
        await user_service.update_user(
            service_context(request), principal, person.principal_id, disabled=disabled
        )
    except Forbidden:
        return _forbidden(request, principal)
    return go(request, _person_url(person.principal_id, "disabled" if disabled else "enabled"))


@router.post("/people/link")
async def new_link(request: Request, principal: CsrfChecked) -> Response:
    """A new set-password link (the earlier ones stop working)."""
    form: Form = await read_form(request)
    found = await _find(request, principal, form.get("principal_id") or "")
    if isinstance(found, Response):
        return found
    context = service_context(request)
    try:
        link = await user_service.issue_password_link(context, principal, found.principal_id)
    except Forbidden:
        return _forbidden(request, principal)
    except Conflict as error:
        return _person_page(
            request, principal, found, errors={"form": error.message + "."}, status_code=409
        )
    mailed = await mail_password_link(context, found, link)
    return _link_page(request, principal, found, link, mailed, added=False)
