"""One error tree for the whole service.

Every refusal Signoff makes is a :class:`SignoffError` with a stable ``error_code``. The
tree is grouped by *kind*, and the HTTP layer maps each kind to one status code in one
place (``signoff.api.problems``), producing RFC 9457 problem details::

    SignoffError
    ├── BadRequest            400  ERR_MALFORMED_JSON, ERR_LEASE_TOKEN_REQUIRED
    ├── Unauthenticated       401  ERR_UNAUTHENTICATED
    ├── Forbidden             403  ERR_FORBIDDEN, ERR_OPERATOR_MISMATCH,
    │                              ERR_SELF_APPROVAL
    ├── NotFound              404  ERR_TASK_NOT_FOUND, ERR_API_KEY_NOT_FOUND
    ├── Conflict              409  ERR_TASK_CONFLICT, ERR_STATE_CONFLICT, ERR_LEASE_LOST,
    │                              ERR_LEASE_EXPIRED, ERR_IDEMPOTENCY_KEY_IN_USE,
    │                              ERR_STALE_REVISION, ERR_ALREADY_EXECUTING,
    │                              ERR_APPROVAL_NOT_VALID
    ├── PreconditionFailed    412  ERR_REVISION_CONFLICT
    ├── PreconditionRequired  428  ERR_PRECONDITION_REQUIRED
    ├── PayloadTooLarge       413  ERR_PAYLOAD_TOO_LARGE
    ├── TooManyRequests       429  ERR_TOO_MANY_ATTEMPTS (``retry_after`` seconds)
    ├── Unprocessable         422  ERR_VALIDATION, ERR_INSUFFICIENT_CONTEXT_PROOF,
    │                              ERR_PRECHECK_HASH_MISMATCH, ERR_IDEMPOTENCY_KEY_REUSED,
    │                              ERR_READ_ONLY_FIELD
    └── NotReady              503  ERR_NOT_READY

The domain raises these without knowing about HTTP; only the kind decides the status.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FieldError:
    """One offending field: a dotted path (``diagnostic_bundle.attempted_actions[0].result``)
    and a human-readable message."""

    field: str
    message: str


class SignoffError(Exception):
    """Base of every refusal. ``error_code`` is stable and documented; ``message`` is for
    people; ``extra`` holds machine-readable details merged into the problem document."""

    error_code: str = "ERR_INTERNAL"
    title: str = "Error"

    def __init__(
        self,
        message: str,
        *,
        error_code: str | None = None,
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
    error_code = "ERR_BAD_REQUEST"


class Unauthenticated(SignoffError):
    title = "Unauthenticated"
    error_code = "ERR_UNAUTHENTICATED"


class Forbidden(SignoffError):
    title = "Forbidden"
    error_code = "ERR_FORBIDDEN"


class NotFound(SignoffError):
    title = "Not found"
    error_code = "ERR_NOT_FOUND"


class Conflict(SignoffError):
    title = "Conflict"
    error_code = "ERR_STATE_CONFLICT"


class PreconditionFailed(SignoffError):
    title = "Precondition failed"
    error_code = "ERR_REVISION_CONFLICT"


class PreconditionRequired(SignoffError):
    title = "Precondition required"
    error_code = "ERR_PRECONDITION_REQUIRED"


class PayloadTooLarge(SignoffError):
    title = "Payload too large"
    error_code = "ERR_PAYLOAD_TOO_LARGE"


class TooManyRequests(SignoffError):
    title = "Too many requests"
    error_code = "ERR_TOO_MANY_ATTEMPTS"


class Unprocessable(SignoffError):
    title = "Unprocessable content"
    error_code = "ERR_VALIDATION"


class NotReady(SignoffError):
    title = "Service not ready"
    error_code = "ERR_NOT_READY"


def validation_error(errors: Sequence[FieldError], message: str | None = None) -> Unprocessable:
    """A 422 ``ERR_VALIDATION`` listing every offending field."""
    text = message or "; ".join(f"{e.field}: {e.message}" for e in errors) or "invalid input"
    return Unprocessable(text, error_code="ERR_VALIDATION", errors=errors)


def task_not_found(task_id: object) -> NotFound:
    return NotFound(f"task {task_id} does not exist", error_code="ERR_TASK_NOT_FOUND")


def claim_limit(limit: int, live: int) -> Conflict:
    """409 ``ERR_CLAIM_LIMIT``: the caller already holds ``limit`` live leases."""
    return Conflict(
        f"you already hold {live} live leases, the limit per principal is {limit} "
        "(SIGNOFF_MAX_LEASES_PER_PRINCIPAL): resolve or release one first",
        error_code="ERR_CLAIM_LIMIT",
        extra={"limit": limit, "live_leases": live},
    )
