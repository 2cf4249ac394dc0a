"""The SDK's one exception tree, mirroring the server's ``error_code``s.

Every problem document Signoff answers with becomes one of these; the class is chosen by
``error_code`` first and by HTTP status when the code is new to this SDK::

    SignoffError                    anything this SDK raises
    ├── InvalidArgument             refused before sending: an empty API key, an empty id
    │                               (also a ValueError; ``field`` names the argument)
    ├── ConnectionFailed            no answer (after the retries): DNS, refused, timeout
    ├── DecisionTimeout             wait_for_decision ran out of time (also a TimeoutError)
    ├── WebhookVerificationFailed   verify_event: bad signature, stale timestamp, bad body
    └── ApiError                    the server answered with a problem (``status``, ``problem``)
        ├── BadRequest              400  ERR_MALFORMED_JSON
        │   ├── LeaseTokenRequired       ERR_LEASE_TOKEN_REQUIRED
        │   └── ExecutionTokenRequired   ERR_EXECUTION_TOKEN_REQUIRED
        ├── Unauthorized            401  ERR_UNAUTHENTICATED
        ├── Forbidden               403  ERR_FORBIDDEN, ERR_OPERATOR_MISMATCH, ERR_NOT_IN_GROUP
        │   ├── SelfApproval             ERR_SELF_APPROVAL
        │   └── NotEligibleToVote        ERR_NOT_ELIGIBLE_TO_VOTE
        ├── NotFound                404  ERR_TASK_NOT_FOUND, ERR_ACTION_NOT_FOUND, ...
        ├── Conflict                409
        │   ├── TaskConflict             ERR_TASK_CONFLICT (``task_id``: the existing task)
        │   ├── StateConflict            ERR_STATE_CONFLICT
        │   ├── LeaseLost                ERR_LEASE_LOST
        │   │   ├── LeaseExpired         ERR_LEASE_EXPIRED
        │   │   └── ExecutionLeaseLost   ERR_EXECUTION_LEASE_LOST
        │   ├── StaleRevision            ERR_STALE_REVISION
        │   ├── AlreadyExecuting         ERR_ALREADY_EXECUTING (``lease_expires_at``)
        │   ├── ApprovalNotValid         ERR_APPROVAL_NOT_VALID (``reason``)
        │   ├── TaskClosed               ERR_TASK_EXPIRED, ERR_TASK_CANCELLED
        │   ├── AlreadyVoted             ERR_ALREADY_VOTED
        │   ├── DecidedByVotes           ERR_DECIDED_BY_VOTES
        │   └── IdempotencyKeyInUse      ERR_IDEMPOTENCY_KEY_IN_USE
        ├── Gone                    410
        │   └── CursorExpired            ERR_CURSOR_EXPIRED (``oldest_cursor``)
        ├── PreconditionFailed      412  ERR_REVISION_CONFLICT
        ├── PreconditionRequired    428  ERR_PRECONDITION_REQUIRED
        ├── PayloadTooLarge         413  ERR_PAYLOAD_TOO_LARGE
        ├── ValidationFailed        422  ERR_VALIDATION, ERR_READ_ONLY_FIELD, ... (``errors``)
        │   ├── InsufficientContextProof ERR_INSUFFICIENT_CONTEXT_PROOF (``missing_fields``)
        │   ├── PrecheckHashMismatch     ERR_PRECHECK_HASH_MISMATCH
        │   └── IdempotencyKeyReused     ERR_IDEMPOTENCY_KEY_REUSED (``task_id``, ``changed``)
        ├── RateLimited             429
        └── ServerError             5xx
            └── NotReady            503  ERR_NOT_READY

Catch ``ApiError`` for every refusal, or the narrowest class you can act on.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "AlreadyExecuting",
    "AlreadyVoted",
    "ApiError",
    "ApprovalNotValid",
    "BadRequest",
    "Conflict",
    "ConnectionFailed",
    "CursorExpired",
    "DecidedByVotes",
    "DecisionTimeout",
    "ExecutionLeaseLost",
    "ExecutionTokenRequired",
    "Forbidden",
    "Gone",
    "IdempotencyKeyInUse",
    "IdempotencyKeyReused",
    "InsufficientContextProof",
    "InvalidArgument",
    "LeaseExpired",
    "LeaseLost",
    "LeaseTokenRequired",
    "NotEligibleToVote",
    "NotFound",
    "NotReady",
    "PayloadTooLarge",
    "PrecheckHashMismatch",
    "PreconditionFailed",
    "PreconditionRequired",
    "RateLimited",
    "SelfApproval",
    "ServerError",
    "SignoffError",
    "StaleRevision",
    "StateConflict",
    "TaskClosed",
    "TaskConflict",
    "Unauthorized",
    "ValidationFailed",
    "WebhookVerificationFailed",
    "error_from_response",
]


class SignoffError(Exception):
    """Base of everything the SDK raises."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(SignoffError, ValueError):
    """An argument the SDK refuses before sending anything; ``field`` names it."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class ConnectionFailed(SignoffError):
    """No answer from the server, after the configured retries."""


class DecisionTimeout(SignoffError, TimeoutError):
    """``wait_for_decision`` ran out of time; ``task`` is the last state seen."""

    def __init__(self, message: str, *, task: Any = None) -> None:
        super().__init__(message)
        self.task = task


class WebhookVerificationFailed(SignoffError):
    """A delivery's signature, timestamp or body did not verify: answer 400."""


class ApiError(SignoffError):
    """The server refused with an RFC 9457 problem. ``error_code`` is stable."""

    def __init__(self, message: str, *, status: int, error_code: str, problem: dict[str, Any]):
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.problem = problem

    @property
    def errors(self) -> list[dict[str, Any]]:
        """Offending fields, ``[{"field", "message"}]`` (422)."""
        return list(self.problem.get("errors") or [])

    def __str__(self) -> str:
        return f"{self.error_code} ({self.status}): {self.message}"


class BadRequest(ApiError):
    pass


class LeaseTokenRequired(BadRequest):
    pass


class ExecutionTokenRequired(BadRequest):
    pass


class Unauthorized(ApiError):
    pass


class Forbidden(ApiError):
    pass


class SelfApproval(Forbidden):
    pass


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    pass


class TaskConflict(Conflict):
    """Another active task exists for the entity, or the escalation id is taken."""

    @property
    def task_id(self) -> str | None:
        """The existing task, when the caller escalated it (never another producer's)."""
        value = self.problem.get("task_id")
        return str(value) if value else None


class StateConflict(Conflict):
    pass


class LeaseLost(Conflict):
    pass


class LeaseExpired(LeaseLost):
    pass


class ExecutionLeaseLost(LeaseLost):
    """Another executor took the execution over (this one's lease lapsed): stop."""


class StaleRevision(Conflict):
    pass


class AlreadyExecuting(Conflict):
    """Another executor holds the execution lease."""

    @property
    def lease_expires_at(self) -> str | None:
        """When the other executor's lease lapses (RFC 3339), when the server says."""
        for name in ("execution_lease_expires_at", "lease_expires_at", "expires_at"):
            if self.problem.get(name):
                return str(self.problem[name])
        return None


class ApprovalNotValid(Conflict):
    """The execution gate refused. ``reason`` is one of ``NOT_DECIDED``, ``REJECTED``,
    ``REVISION_REQUESTED``, ``APPROVAL_INVALIDATED``, ``STALE_DIGEST``,
    ``APPROVAL_EXPIRED``, ``APPROVER_NOT_AUTHORISED``, ``SOURCE_REVOKED``."""

    @property
    def reason(self) -> str | None:
        value = self.problem.get("reason")
        return str(value) if value else None

    def __str__(self) -> str:
        return f"{self.error_code} ({self.status}, reason {self.reason}): {self.message}"


class TaskClosed(Conflict):
    """The task expired or was cancelled."""


class AlreadyVoted(Conflict):
    """The caller already voted at this stage of the task's approval rule (a vote counts
    once; repeating the same vote is not an error)."""


class DecidedByVotes(Conflict):
    """The task has an approval rule: vote on it (``vote``) instead of claiming it."""


class NotEligibleToVote(Forbidden):
    """The task's approval rule does not let the caller vote at this stage."""


class IdempotencyKeyInUse(Conflict):
    pass


class Gone(ApiError):
    pass


class CursorExpired(Gone):
    """Retention removed events of the caller's tasks after the catch-up cursor: they can
    no longer be read. Reconcile what they may have changed (read the tasks), then read
    on from ``oldest_cursor``, from which nothing is missing."""

    @property
    def oldest_cursor(self) -> str | None:
        value = self.problem.get("oldest_cursor")
        return str(value) if value else None


class PreconditionFailed(ApiError):
    pass


class PreconditionRequired(ApiError):
    pass


class PayloadTooLarge(ApiError):
    pass


class ValidationFailed(ApiError):
    pass


class InsufficientContextProof(ValidationFailed):
    @property
    def missing_fields(self) -> list[str]:
        return list(self.problem.get("missing_fields") or [])


class PrecheckHashMismatch(ValidationFailed):
    pass


class IdempotencyKeyReused(ValidationFailed):
    """The key names an escalation made with other content: a decision about it is none
    about this content. Submit a new revision to the task (``revise``) or use a new key.

    ``changed`` names the fields that differ from what the key's task holds (``subject``,
    ``diagnostic_bundle.input_snapshot``, …) when the SDK compared them; ``task`` is that
    task when it read it."""

    task: Any = None

    @property
    def task_id(self) -> str | None:
        """The task the key created."""
        value = self.problem.get("task_id")
        return str(value) if value else None

    @property
    def changed(self) -> list[str]:
        return [str(name) for name in self.problem.get("changed") or []]


class RateLimited(ApiError):
    pass


class ServerError(ApiError):
    pass


class NotReady(ServerError):
    pass


BY_CODE: dict[str, type[ApiError]] = {
    "ERR_LEASE_TOKEN_REQUIRED": LeaseTokenRequired,
    "ERR_EXECUTION_TOKEN_REQUIRED": ExecutionTokenRequired,
    "ERR_UNAUTHENTICATED": Unauthorized,
    "ERR_SELF_APPROVAL": SelfApproval,
    "ERR_TASK_CONFLICT": TaskConflict,
    "ERR_STATE_CONFLICT": StateConflict,
    "ERR_LEASE_LOST": LeaseLost,
    "ERR_LEASE_EXPIRED": LeaseExpired,
    "ERR_EXECUTION_LEASE_LOST": ExecutionLeaseLost,
    "ERR_STALE_REVISION": StaleRevision,
    "ERR_ALREADY_EXECUTING": AlreadyExecuting,
    "ERR_APPROVAL_NOT_VALID": ApprovalNotValid,
    "ERR_TASK_EXPIRED": TaskClosed,
    "ERR_TASK_CANCELLED": TaskClosed,
    "ERR_ALREADY_VOTED": AlreadyVoted,
    "ERR_DECIDED_BY_VOTES": DecidedByVotes,
    "ERR_NOT_ELIGIBLE_TO_VOTE": NotEligibleToVote,
    "ERR_IDEMPOTENCY_KEY_IN_USE": IdempotencyKeyInUse,
    "ERR_CURSOR_EXPIRED": CursorExpired,
    "ERR_REVISION_CONFLICT": PreconditionFailed,
    "ERR_PRECONDITION_REQUIRED": PreconditionRequired,
    "ERR_PAYLOAD_TOO_LARGE": PayloadTooLarge,
    "ERR_INSUFFICIENT_CONTEXT_PROOF": InsufficientContextProof,
    "ERR_PRECHECK_HASH_MISMATCH": PrecheckHashMismatch,
    "ERR_IDEMPOTENCY_KEY_REUSED": IdempotencyKeyReused,
    "ERR_NOT_READY": NotReady,
}

#: Server codes deliberately left to their status's class (``BY_STATUS``): no narrower
#: exception would let a caller act differently. With ``BY_CODE`` this names every code
#: the server has (``tests/unit/test_client_error_codes.py`` holds the two to the server).
BY_STATUS_ONLY: frozenset[str] = frozenset(
    {
        "ERR_BAD_REQUEST",
        "ERR_MALFORMED_JSON",
        "ERR_BAD_CREDENTIALS",
        "ERR_FORBIDDEN",
        "ERR_OPERATOR_MISMATCH",
        "ERR_NOT_IN_GROUP",
        "ERR_CSRF",
        "ERR_USER_DISABLED",
        "ERR_ACCOUNT_IS_LOCAL",
        "ERR_NOT_FOUND",
        "ERR_TASK_NOT_FOUND",
        "ERR_API_KEY_NOT_FOUND",
        "ERR_WEBHOOK_ENDPOINT_NOT_FOUND",
        "ERR_DELIVERY_NOT_FOUND",
        "ERR_POLICY_NOT_FOUND",
        "ERR_REVISION_NOT_FOUND",
        "ERR_ACTION_NOT_FOUND",
        "ERR_SOURCE_NOT_FOUND",
        "ERR_LINK_NOT_FOUND",
        "ERR_LINK_INVALID",
        "ERR_USER_NOT_FOUND",
        "ERR_GRANT_NOT_FOUND",
        "ERR_METHOD_NOT_ALLOWED",
        "ERR_CLAIM_LIMIT",
        "ERR_REVISION_LIMIT",
        "ERR_POLICY_EXISTS",
        "ERR_USER_EXISTS",
        "ERR_EMAIL_IN_USE",
        "ERR_VALIDATION",
        "ERR_READ_ONLY_FIELD",
        "ERR_HEADLINE_FIELD",
        "ERR_NOT_EDITABLE",
        "ERR_WEBHOOK_URL_FORBIDDEN",
        "ERR_UNKNOWN_POLICY",
        "ERR_UNKNOWN_GROUP",
        "ERR_TIMEOUT_APPROVAL_NOT_ALLOWED",
        "ERR_TOO_MANY_ATTEMPTS",
        "ERR_TOO_MANY_WAITS",
        "ERR_NOT_DECIDED_BY_VOTES",
        "ERR_APPROVAL_RULE_NOT_FOUND",
        "ERR_UNKNOWN_APPROVAL_RULE",
        "ERR_UNMEETABLE_APPROVAL_RULE",
        "ERR_STAGE_NOT_OPEN",
        "ERR_INTERNAL",
        "ERR_HTTP",
    }
)

BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    412: PreconditionFailed,
    413: PayloadTooLarge,
    422: ValidationFailed,
    428: PreconditionRequired,
    429: RateLimited,
    503: NotReady,
}


#: API routes a server message may name, and the client method that calls each: the
#: exception's message names the call this SDK's user makes (``client.vote(...)``, not
#: ``POST /tasks/{id}/votes``); ``problem`` keeps the server's words. The TypeScript SDK's
#: table is generated from this one (camelCase).
ROUTE_CALLS: tuple[tuple[str, str, str], ...] = (
    ("POST", "/tasks/{id}/votes", "vote"),
    ("POST", "/tasks/{id}/lease/renew", "renew"),
    ("POST", "/tasks/{id}/claim", "claim"),
    ("POST", "/tasks/{id}/resolve", "resolve"),
    ("PUT", "/tasks/{id}/subject", "revise"),
    ("POST", "/tasks/{id}/execute", "execution"),
)


def in_sdk_words(message: str) -> str:
    """``message`` with every API route it names replaced by the client call."""
    for method, route, call in ROUTE_CALLS:
        pattern = re.escape(f"{method} {route}").replace(re.escape("{id}"), r"[^/\s)`]+")
        message = re.sub(pattern, f"client.{call}(...)", message)
    return message


def error_from_response(status: int, body: Any) -> ApiError:
    """The exception for one problem answer (``body`` is its parsed JSON, or anything)."""
    problem: dict[str, Any] = body if isinstance(body, dict) else {}
    code = str(problem.get("error_code") or f"HTTP_{status}")
    message = str(problem.get("message") or problem.get("detail") or f"HTTP {status}")
    message = in_sdk_words(message)
    kind = BY_CODE.get(code) or BY_STATUS.get(status)
    if kind is None:
        kind = ServerError if status >= 500 else ApiError
    return kind(message, status=status, error_code=code, problem=problem)
