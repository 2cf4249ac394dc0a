"""The Python SDK for Signoff: escalate to people, wait for their decision, execute exactly
what they approved.

It imports nothing of the server: only ``httpx``, ``pydantic``, ``rfc8785`` and
``standardwebhooks``. Everything public is listed in ``__all__``; modules starting with
an underscore are private.

::

    from signoff.client import Signoff

    with Signoff("http://127.0.0.1:8000", api_key) as client:
        task = client.escalate(key="order-42", entity_type="order", entity_id="42", ...)
        task = client.wait_for_decision(task.id, timeout=3600)

The exception tree is drawn in :mod:`signoff.client._errors` (``SignoffError`` at the
root; ``ApiError`` for every refusal the server answers).
"""

from signoff.client._async_client import AsyncSignoff
from signoff.client._catchup import EventsSince
from signoff.client._client import Signoff
from signoff.client._digests import canonical_json, digest, escalation_ids, precheck_hash
from signoff.client._errors import (
    AlreadyExecuting,
    AlreadyVoted,
    ApiError,
    ApprovalNotValid,
    BadRequest,
    Conflict,
    ConnectionFailed,
    CursorExpired,
    DecidedByVotes,
    DecisionTimeout,
    ExecutionLeaseLost,
    ExecutionTokenRequired,
    Forbidden,
    Gone,
    IdempotencyKeyInUse,
    IdempotencyKeyReused,
    InsufficientContextProof,
    InvalidArgument,
    LeaseExpired,
    LeaseLost,
    LeaseTokenRequired,
    NotEligibleToVote,
    NotFound,
    NotReady,
    PayloadTooLarge,
    PrecheckHashMismatch,
    PreconditionFailed,
    PreconditionRequired,
    RateLimited,
    SelfApproval,
    ServerError,
    SignoffError,
    StaleRevision,
    StateConflict,
    TaskClosed,
    TaskConflict,
    Unauthorized,
    ValidationFailed,
    WebhookVerificationFailed,
)
from signoff.client._execution import AsyncExecutionRun, ExecutionRun
from signoff.client._guard import (
    ApprovalExpired,
    NotApproved,
    Rejected,
    RevisionRequested,
    arequires_approval,
    requires_approval,
)
from signoff.client._models import (
    Action,
    ApprovalProgress,
    AuditEvent,
    ChangeRequest,
    Decision,
    Diff,
    Execution,
    FieldFeedback,
    Revision,
    Task,
    TaskPage,
    TaskReceipt,
    TaskStatus,
    Vote,
    VoteReceipt,
    WebhookEndpoint,
    WebhookEvent,
)
from signoff.client._receipts import ReceiptInvalid, verify_receipt
from signoff.client._webhooks import verify_event

__all__ = [
    "Action",
    "AlreadyExecuting",
    "AlreadyVoted",
    "ApiError",
    "ApprovalExpired",
    "ApprovalNotValid",
    "ApprovalProgress",
    "AsyncExecutionRun",
    "AsyncSignoff",
    "AuditEvent",
    "BadRequest",
    "ChangeRequest",
    "Conflict",
    "ConnectionFailed",
    "CursorExpired",
    "DecidedByVotes",
    "Decision",
    "DecisionTimeout",
    "Diff",
    "EventsSince",
    "Execution",
    "ExecutionLeaseLost",
    "ExecutionRun",
    "ExecutionTokenRequired",
    "FieldFeedback",
    "Forbidden",
    "Gone",
    "IdempotencyKeyInUse",
    "IdempotencyKeyReused",
    "InsufficientContextProof",
    "InvalidArgument",
    "LeaseExpired",
    "LeaseLost",
    "LeaseTokenRequired",
    "NotApproved",
    "NotEligibleToVote",
    "NotFound",
    "NotReady",
    "PayloadTooLarge",
    "PrecheckHashMismatch",
    "PreconditionFailed",
    "PreconditionRequired",
    "RateLimited",
    "ReceiptInvalid",
    "Rejected",
    "Revision",
    "RevisionRequested",
    "SelfApproval",
    "ServerError",
    "Signoff",
    "SignoffError",
    "StaleRevision",
    "StateConflict",
    "Task",
    "TaskClosed",
    "TaskConflict",
    "TaskPage",
    "TaskReceipt",
    "TaskStatus",
    "Unauthorized",
    "ValidationFailed",
    "Vote",
    "VoteReceipt",
    "WebhookEndpoint",
    "WebhookEvent",
    "WebhookVerificationFailed",
    "arequires_approval",
    "canonical_json",
    "digest",
    "escalation_ids",
    "precheck_hash",
    "requires_approval",
    "verify_event",
    "verify_receipt",
]
