"""One error tree for the whole service.

Every refusal Signoff makes is a :class:`SignoffError` with a stable ``error_code``, one
member of :class:`ErrorCode`. Each member carries the HTTP status it is answered with and
a one-line meaning; the API's problem documents, the OpenAPI document and the error table
in ``docs/api.md`` are all read from it. The tree is grouped by *kind*, and each kind's
default code fixes the kind's status (``signoff.api.problems`` turns errors into RFC 9457
problem details)::

    SignoffError
    ├── BadRequest            400
    ├── Unauthenticated       401
    ├── Forbidden             403
    ├── NotFound              404
    ├── Conflict              409
    ├── Gone                  410
    ├── PreconditionFailed    412
    ├── PreconditionRequired  428
    ├── PayloadTooLarge       413
    ├── TooManyRequests       429 (``retry_after`` seconds)
    ├── Unprocessable         422
    └── NotReady              503

The domain raises these without knowing about HTTP; only the code decides the status.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class ErrorCode(StrEnum):
    """Every ``error_code`` the service answers with: ``status`` is the HTTP status it goes
    with (``None`` where the failed request decides), ``meaning`` one line for the docs."""

    status: int | None
    meaning: str

    def __new__(cls, code: str, status: int | None, meaning: str) -> ErrorCode:
        member = str.__new__(cls, code)
        member._value_ = code
        member.status = status
        member.meaning = meaning
        return member

    BAD_REQUEST = "ERR_BAD_REQUEST", 400, "The request cannot be read (the default of its kind)."
    MALFORMED_JSON = "ERR_MALFORMED_JSON", 400, "The body is not UTF-8 JSON."
    LEASE_TOKEN_REQUIRED = (
        "ERR_LEASE_TOKEN_REQUIRED",
        400,
        "A lease operation came without its `X-Lease-Token` header.",
    )
    EXECUTION_TOKEN_REQUIRED = (
        "ERR_EXECUTION_TOKEN_REQUIRED",
        400,
        "An execution operation came without its `X-Execution-Token` header.",
    )
    UNAUTHENTICATED = (
        "ERR_UNAUTHENTICATED",
        401,
        "Missing, unknown or revoked API key, or no console session "
        "(with `WWW-Authenticate: Bearer`).",
    )
    BAD_CREDENTIALS = (
        "ERR_BAD_CREDENTIALS",
        401,
        "Console sign-in: unknown user or wrong password (never says which).",
    )
    FORBIDDEN = "ERR_FORBIDDEN", 403, "The caller's role may not do this."
    OPERATOR_MISMATCH = (
        "ERR_OPERATOR_MISMATCH",
        403,
        "An `operator_id` in the body names someone other than the caller.",
    )
    SELF_APPROVAL = (
        "ERR_SELF_APPROVAL",
        403,
        "The caller produced the task and may not decide it.",
    )
    NOT_IN_GROUP = (
        "ERR_NOT_IN_GROUP",
        403,
        "A resume link's approver is no longer in the task's group (elsewhere such a task "
        "is not found).",
    )
    NOT_ELIGIBLE_TO_VOTE = (
        "ERR_NOT_ELIGIBLE_TO_VOTE",
        403,
        "The task's approval rule does not let the caller vote at this stage (not in the "
        "stage's groups, or voted at an earlier stage).",
    )
    CSRF = "ERR_CSRF", 403, "The form or console token does not match; reload the page."
    USER_DISABLED = "ERR_USER_DISABLED", 403, "The console account is disabled."
    ACCOUNT_IS_LOCAL = (
        "ERR_ACCOUNT_IS_LOCAL",
        403,
        "Single sign-on named a principal of another account (a local user, an API key,"
        " another identity); an administrator may link them (signoff link-sso).",
    )
    NOT_FOUND = "ERR_NOT_FOUND", 404, "No such path."
    TASK_NOT_FOUND = "ERR_TASK_NOT_FOUND", 404, "No such task (also for a malformed id)."
    API_KEY_NOT_FOUND = "ERR_API_KEY_NOT_FOUND", 404, "No such API key, or it is revoked."
    WEBHOOK_ENDPOINT_NOT_FOUND = (
        "ERR_WEBHOOK_ENDPOINT_NOT_FOUND",
        404,
        "No such webhook endpoint.",
    )
    DELIVERY_NOT_FOUND = (
        "ERR_DELIVERY_NOT_FOUND",
        404,
        "No such webhook delivery, or an attempt of it is in flight.",
    )
    POLICY_NOT_FOUND = "ERR_POLICY_NOT_FOUND", 404, "No escalation policy of that name."
    APPROVAL_RULE_NOT_FOUND = (
        "ERR_APPROVAL_RULE_NOT_FOUND",
        404,
        "No approval rule of that name.",
    )
    REVISION_NOT_FOUND = "ERR_REVISION_NOT_FOUND", 404, "The task has no such subject revision."
    ACTION_NOT_FOUND = "ERR_ACTION_NOT_FOUND", 404, "The execution has no such action."
    SOURCE_NOT_FOUND = (
        "ERR_SOURCE_NOT_FOUND",
        404,
        "The current subject revision names no such source.",
    )
    LINK_NOT_FOUND = "ERR_LINK_NOT_FOUND", 404, "The resume link is not known."
    LINK_INVALID = (
        "ERR_LINK_INVALID",
        404,
        "The set-password link is unknown, used or expired.",
    )
    USER_NOT_FOUND = "ERR_USER_NOT_FOUND", 404, "No such console user."
    METHOD_NOT_ALLOWED = (
        "ERR_METHOD_NOT_ALLOWED",
        405,
        "The path does not take this method (with `Allow`).",
    )
    TASK_CONFLICT = (
        "ERR_TASK_CONFLICT",
        409,
        "Another active task exists for the entity, or the escalation id is taken "
        "(with `task_id` when the caller escalated it).",
    )
    STATE_CONFLICT = (
        "ERR_STATE_CONFLICT",
        409,
        "The task's current state does not allow this.",
    )
    CLAIM_LIMIT = (
        "ERR_CLAIM_LIMIT",
        409,
        "The caller already holds as many live leases as allowed (with `limit` and `live_leases`).",
    )
    LEASE_LOST = "ERR_LEASE_LOST", 409, "The lease token is not the caller's current lease."
    LEASE_EXPIRED = (
        "ERR_LEASE_EXPIRED",
        409,
        "The caller's lease lapsed; renew it, then retry.",
    )
    IDEMPOTENCY_KEY_IN_USE = (
        "ERR_IDEMPOTENCY_KEY_IN_USE",
        409,
        "A request with the same idempotency key is still in progress.",
    )
    STALE_REVISION = (
        "ERR_STALE_REVISION",
        409,
        "The decision names a subject revision that is no longer current.",
    )
    ALREADY_EXECUTING = (
        "ERR_ALREADY_EXECUTING",
        409,
        "Another executor holds the execution lease (with `lease_expires_at` while it lives).",
    )
    EXECUTION_LEASE_LOST = (
        "ERR_EXECUTION_LEASE_LOST",
        409,
        "The execution token is not the live execution lease.",
    )
    APPROVAL_NOT_VALID = (
        "ERR_APPROVAL_NOT_VALID",
        409,
        "The execution gate refused (with `reason`).",
    )
    REVISION_LIMIT = (
        "ERR_REVISION_LIMIT",
        409,
        "The task has as many subject revisions as allowed (with `limit`): escalate anew.",
    )
    TASK_EXPIRED = "ERR_TASK_EXPIRED", 409, "The task expired."
    TASK_CANCELLED = "ERR_TASK_CANCELLED", 409, "The task was cancelled."
    ALREADY_VOTED = (
        "ERR_ALREADY_VOTED",
        409,
        "The caller already voted at this stage of the task's approval rule: a vote counts once.",
    )
    STAGE_NOT_OPEN = (
        "ERR_STAGE_NOT_OPEN",
        409,
        "The vote names a stage of the approval rule that is not being voted on now "
        "(with `stage`, the one that is).",
    )
    DECIDED_BY_VOTES = (
        "ERR_DECIDED_BY_VOTES",
        409,
        "The task has an approval rule: it is decided by votes (`POST /tasks/{id}/votes`), "
        "not claimed and resolved.",
    )
    NOT_DECIDED_BY_VOTES = (
        "ERR_NOT_DECIDED_BY_VOTES",
        409,
        "The task has no approval rule: one person decides it under a lease.",
    )
    POLICY_EXISTS = "ERR_POLICY_EXISTS", 409, "An escalation policy of that name exists."
    USER_EXISTS = "ERR_USER_EXISTS", 409, "A console user with that id exists."
    EMAIL_IN_USE = "ERR_EMAIL_IN_USE", 409, "Another console user has that email address."
    CURSOR_EXPIRED = (
        "ERR_CURSOR_EXPIRED",
        410,
        "Retention removed events after the catch-up cursor; read again from `oldest_cursor`.",
    )
    REVISION_CONFLICT = (
        "ERR_REVISION_CONFLICT",
        412,
        "`If-Match` names a subject revision that is no longer current.",
    )
    PAYLOAD_TOO_LARGE = (
        "ERR_PAYLOAD_TOO_LARGE",
        413,
        "The body is larger than `SIGNOFF_MAX_BODY_BYTES`.",
    )
    VALIDATION = "ERR_VALIDATION", 422, "Invalid input; `errors` names every offending field."
    INSUFFICIENT_CONTEXT_PROOF = (
        "ERR_INSUFFICIENT_CONTEXT_PROOF",
        422,
        "The diagnostic bundle lacks required evidence (with `missing_fields`).",
    )
    PRECHECK_HASH_MISMATCH = (
        "ERR_PRECHECK_HASH_MISMATCH",
        422,
        "`precheck_hash` is not the hash of the bundle's `attempted_actions`.",
    )
    HEADLINE_FIELD = (
        "ERR_HEADLINE_FIELD",
        422,
        "A headline or key-field pointer does not resolve in the task's subject or input, "
        "or names a value its type cannot show (`errors` names each pointer).",
    )
    GRANT_NOT_FOUND = (
        "ERR_GRANT_NOT_FOUND",
        404,
        "No such remembered approval (or it is not the caller's to revoke).",
    )
    NOT_EDITABLE = (
        "ERR_NOT_EDITABLE",
        422,
        "An edit changes a part of the subject its producer did not declare `editable` "
        "(`errors` names each path), or the task declares nothing editable.",
    )
    IDEMPOTENCY_KEY_REUSED = (
        "ERR_IDEMPOTENCY_KEY_REUSED",
        422,
        "The idempotency key was used with another body.",
    )
    READ_ONLY_FIELD = (
        "ERR_READ_ONLY_FIELD",
        422,
        "The body sets a field only the service sets.",
    )
    WEBHOOK_URL_FORBIDDEN = (
        "ERR_WEBHOOK_URL_FORBIDDEN",
        422,
        "The webhook URL points where deliveries may not go.",
    )
    UNKNOWN_POLICY = "ERR_UNKNOWN_POLICY", 422, "The escalation names no known escalation policy."
    UNKNOWN_APPROVAL_RULE = (
        "ERR_UNKNOWN_APPROVAL_RULE",
        422,
        "The escalation names no known approval rule.",
    )
    UNMEETABLE_APPROVAL_RULE = (
        "ERR_UNMEETABLE_APPROVAL_RULE",
        422,
        "The approval rule needs more people than its groups (or the reviewers) have.",
    )
    UNKNOWN_GROUP = (
        "ERR_UNKNOWN_GROUP",
        422,
        "A reassignment names a group that no user, API key or escalation policy names.",
    )
    TIMEOUT_APPROVAL_NOT_ALLOWED = (
        "ERR_TIMEOUT_APPROVAL_NOT_ALLOWED",
        422,
        "An escalation's `timeout` asked to approve when time runs out: only a person approves.",
    )
    PRECONDITION_REQUIRED = (
        "ERR_PRECONDITION_REQUIRED",
        428,
        "Replacing the subject needs `If-Match` with the current revision's ETag.",
    )
    TOO_MANY_ATTEMPTS = (
        "ERR_TOO_MANY_ATTEMPTS",
        429,
        "Too many failed console sign-ins (with `Retry-After`).",
    )
    TOO_MANY_WAITS = (
        "ERR_TOO_MANY_WAITS",
        429,
        "Too many long-polls or event streams open for this key or account (with `Retry-After`).",
    )
    INTERNAL = "ERR_INTERNAL", 500, "A bug; the answer carries no details."
    NOT_READY = (
        "ERR_NOT_READY",
        503,
        "The database is unavailable or the service overloaded (with `Retry-After: 1`).",
    )
    HTTP = "ERR_HTTP", None, "Any other HTTP-level refusal, with its own status."


@dataclass(frozen=True)
class FieldError:
    """One offending field: a dotted path (``diagnostic_bundle.attempted_actions[0].result``)
    and a human-readable message."""

    field: str
    message: str


class SignoffError(Exception):
    """Base of every refusal. ``error_code`` is stable and documented; ``message`` is for
    people; ``extra`` holds machine-readable details merged into the problem document."""

    error_code: ErrorCode = ErrorCode.INTERNAL
    title: str = "Error"

    def __init__(
        self,
        message: str,
        *,
        error_code: ErrorCode | None = None,
        errors: Sequence[FieldError] = (),
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if error_code is not None:
            self.error_code = error_code
        self.errors = tuple(errors)
        self.extra = dict(extra or {})


class BadRequest(SignoffError):
    title = "Bad request"
    error_code = ErrorCode.BAD_REQUEST


class Unauthenticated(SignoffError):
    title = "Unauthenticated"
    error_code = ErrorCode.UNAUTHENTICATED


class Forbidden(SignoffError):
    title = "Forbidden"
    error_code = ErrorCode.FORBIDDEN


class NotFound(SignoffError):
    title = "Not found"
    error_code = ErrorCode.NOT_FOUND


class Conflict(SignoffError):
    title = "Conflict"
    error_code = ErrorCode.STATE_CONFLICT


class Gone(SignoffError):
    title = "Gone"
    error_code = ErrorCode.CURSOR_EXPIRED


class PreconditionFailed(SignoffError):
    title = "Precondition failed"
    error_code = ErrorCode.REVISION_CONFLICT


class PreconditionRequired(SignoffError):
    title = "Precondition required"
    error_code = ErrorCode.PRECONDITION_REQUIRED


class PayloadTooLarge(SignoffError):
    title = "Payload too large"
    error_code = ErrorCode.PAYLOAD_TOO_LARGE


class TooManyRequests(SignoffError):
    title = "Too many requests"
    error_code = ErrorCode.TOO_MANY_ATTEMPTS


class Unprocessable(SignoffError):
    title = "Unprocessable content"
    error_code = ErrorCode.VALIDATION


class NotReady(SignoffError):
    title = "Service not ready"
    error_code = ErrorCode.NOT_READY


def validation_error(errors: Sequence[FieldError], message: str | None = None) -> Unprocessable:
    """A 422 ``ERR_VALIDATION`` listing every offending field."""
    text = message or "; ".join(f"{e.field}: {e.message}" for e in errors) or "invalid input"
    return Unprocessable(text, error_code=ErrorCode.VALIDATION, errors=errors)


def task_not_found(task_id: object) -> NotFound:
    return NotFound(f"task {task_id} does not exist", error_code=ErrorCode.TASK_NOT_FOUND)


def claim_limit(limit: int, live: int) -> Conflict:
    """409 ``ERR_CLAIM_LIMIT``: the caller already holds ``limit`` live leases."""
    return Conflict(
        f"you already hold {live} live leases, the limit per principal is {limit} "
        "(SIGNOFF_MAX_LEASES_PER_PRINCIPAL): resolve or release one first",
        error_code=ErrorCode.CLAIM_LIMIT,
        extra={"limit": limit, "live_leases": live},
    )
