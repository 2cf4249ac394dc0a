"""Typed shapes of what the server answers. Unknown fields are kept (``model_extra``), so a
newer server never breaks an older SDK."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)

__all__ = [
    "ACTIVE_STATUSES",
    "DECISIONS",
    "TASK_STATUSES",
    "Action",
    "AuditEvent",
    "Decision",
    "Diff",
    "Execution",
    "Revision",
    "Task",
    "TaskPage",
    "TaskStatus",
    "WebhookEndpoint",
    "WebhookEvent",
]

#: A decision a person can make, in the server's order (held equal to the server's
#: decision rules by a test; the SDK imports nothing of the server).
Decision = Literal[
    "APPROVED", "REJECTED", "REVISION_REQUESTED", "APPROVED_WITH_EDITS", "APPROVED_BY_GRANT"
]
#: A task's status (held equal to the server's by a test).
TaskStatus = Literal["PENDING_REVIEW", "CLAIMED", "RESOLVED", "EXPIRED", "CANCELLED"]
DECISIONS: tuple[Decision, ...] = get_args(Decision)
TASK_STATUSES: tuple[TaskStatus, ...] = get_args(TaskStatus)
#: The principal that decides a task when the producer's time limit runs out.
TIMEOUT_ACTOR = "signoff-sweeper"
#: Statuses in which a task waits for a person.
ACTIVE_STATUSES: frozenset[TaskStatus] = frozenset({"PENDING_REVIEW", "CLAIMED"})


def _known_or_newer(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """A value this SDK knows, typed; a newer server's new one is kept as the plain string
    (a newer server never breaks an older SDK)."""
    try:
        return handler(value)
    except ValidationError:
        if isinstance(value, str):
            return value
        raise


Lenient = WrapValidator(_known_or_newer)


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class KeyField(_Model):
    """One labelled value of a headline, as shown (``text``) and as given (``value``)."""

    label: str
    type: str
    pointer: str
    text: str
    value: Any = None
    currency: str | None = None


class Headline(_Model):
    """What is being approved, in one line, bound to a revision (``None``: the input)."""

    title: str
    fields: list[KeyField] = Field(default_factory=list)
    template: str | None = None
    revision: int | None = None


class VoteReceipt(_Model):
    """What a vote did, in the answer to it: ``recorded`` (false for a retry of one's
    identical vote), ``counted`` (an approval filling a place, a veto, or a vote against
    under a rule without a veto) and ``reason`` (``counted``, ``no_place``, ``against``,
    ``veto``, ``not_a_veto``, ``retry``); ``stage`` counts from 1."""

    recorded: bool
    counted: bool
    reason: str
    stage: int
    text: str = ""


class Vote(_Model):
    """One live vote on a task decided by an approval rule."""

    voter: str
    groups: list[str] = Field(default_factory=list)
    decision: Annotated[Decision, Lenient]
    notes: str | None = None
    revision: int
    digest: str
    stage: int
    at: datetime
    door: str | None = None


class ApprovalProgress(_Model):
    """Where a task's approval rule stands; ``text`` says it in a sentence."""

    stage: int
    stage_name: str | None = None
    stages: int
    approvals: int
    required: int
    waiting_on: list[str] = Field(default_factory=list)
    against: int = 0
    met: bool = False
    outcome: Annotated[Decision | None, Lenient] = None
    text: str


class FieldFeedback(_Model):
    """One field of the subject a reviewer asked to change, and why."""

    path: str
    reason: str


class ChangeRequest(_Model):
    """What a reviewer asked to change (the task waits on its producer's next revision)."""

    notes: str | None = None
    fields: list[FieldFeedback] = Field(default_factory=list)
    revision: int | None = None
    by: str
    at: datetime


#: The decisions that approve: as sent, as a reviewer edited it, by a remembered approval.
APPROVALS = ("APPROVED", "APPROVED_WITH_EDITS", "APPROVED_BY_GRANT")


class Task(_Model):
    """One review task, as ``GET /tasks/{id}`` shows it."""

    id: str
    status: Annotated[TaskStatus, Lenient] = Field(description=", ".join(TASK_STATUSES))
    headline: Headline | None = Field(
        default=None, description="What is being approved: its title and key fields."
    )
    entity_type: str
    entity_id: str
    reason_code: str
    precheck_hash: str | None = None
    diagnostic_bundle: dict[str, Any] = Field(default_factory=dict)
    producer_id: str | None = None
    version: int
    claimed_by: str | None = None
    lease_expires_at: datetime | None = None
    decision: Annotated[Decision | None, Lenient] = Field(
        default=None, description=", ".join(DECISIONS)
    )
    notes: str | None = None
    resolution_payload: dict[str, Any] | None = None
    operator_id: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    resolved_at: datetime | None = None
    current_revision: int | None = None
    digest: str | None = None
    material_paths: list[str] | None = None
    approved_revision: int | None = None
    approved_digest: str | None = None
    approval_expires_at: datetime | None = None
    execution_status: str | None = None
    deadline_at: datetime | None = None
    escalation_level: int | None = None
    policy: str | None = None
    assigned_group: str | None = None
    summary: dict[str, Any] | None = None
    editable: list[str] | None = Field(
        default=None, description="JSON Pointers a reviewer may edit before approving."
    )
    grant_id: str | None = Field(
        default=None, description="The remembered approval that approved it, if one did."
    )
    awaiting: str | None = Field(
        default=None,
        description="Whose move it is: reviewers, producer (changes were asked for), or null.",
    )
    change_request: ChangeRequest | None = Field(
        default=None,
        description="The last feedback that asked for changes, kept until the next decision.",
    )
    metadata: dict[str, Any] | None = Field(
        default=None, description="The producer's own correlation data, as escalated."
    )
    lease_token: str | None = Field(default=None, description="Only in claim answers.")
    last_viewed_revision: int | None = None
    requested_by: str | None = None
    approval_rule: dict[str, Any] | None = Field(
        default=None, description="Only on a task decided by votes: its approval rule."
    )
    votes: list[Vote] | None = Field(
        default=None, description="Only on a task decided by votes: the live votes."
    )
    approval_progress: ApprovalProgress | None = Field(
        default=None,
        description="Only on a task decided by votes: where its rule stands (`text` says it).",
    )
    vote: VoteReceipt | None = Field(
        default=None, description="Only in the answer to a vote: what the vote did."
    )

    @property
    def is_active(self) -> bool:
        """Waiting for a person (pending or claimed)."""
        return self.status in ACTIVE_STATUSES

    @property
    def is_decided(self) -> bool:
        """A person recorded a decision that still stands (RESOLVED)."""
        return self.status == "RESOLVED" and self.decision is not None

    @property
    def changes_requested(self) -> bool:
        """A reviewer sent the work back: revise the subject (``change_request`` says what
        and why) and the task returns to review; nothing may execute until then."""
        return self.status == "RESOLVED" and self.awaiting == "producer"

    @property
    def is_approved(self) -> bool:
        """Approved as it was, or as a reviewer edited it (:attr:`edited`)."""
        return self.status == "RESOLVED" and self.decision in APPROVALS

    @property
    def edited(self) -> bool:
        """A reviewer edited the subject and approved the edit: what may run is revision
        ``approved_revision`` (its author is the reviewer), read it with
        :meth:`Signoff.approved_subject`; the execution gate accepts only its digest."""
        return self.status == "RESOLVED" and self.decision == "APPROVED_WITH_EDITS"

    @property
    def timed_out(self) -> bool:
        """Rejected by the producer's time limit (the sweeper decided), not by a person."""
        return (
            self.status == "RESOLVED"
            and self.decision == "REJECTED"
            and (self.operator_id == TIMEOUT_ACTOR)
        )


class TaskPage(_Model):
    items: list[Task]
    next_cursor: str | None = None


class Action(_Model):
    id: str
    status: str = Field(description="PENDING, COMPLETED or FAILED")
    operation_id: str | None = None
    result: Any = None


class Execution(_Model):
    """The execution gate's answer, and each action report's."""

    task_id: str
    execution_status: str | None = None
    operation_id: str | None = None
    actions: list[Action] = Field(default_factory=list)
    revision: int | None = None
    digest: str | None = None
    approved_by: str | None = None
    granted_at: datetime | None = None
    execution_token: str | None = Field(
        default=None, description="Fencing token of the execution lease (absent on a replay)."
    )
    execution_lease_expires_at: datetime | None = None


class AuditEvent(_Model):
    id: int
    task_id: str
    type: str
    action: str
    status: str
    version: int
    actor_id: str
    actor_role: str
    details: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime


class TaskReceipt(_Model):
    """One record of a task's trail as a signed receipt (``GET /tasks/{id}/receipts``):
    its chain link and ``receipt``, a compact JWS to check with :func:`verify_receipt`
    against :meth:`Signoff.signing_keys`."""

    record_id: int
    type: str
    prev_hash: str
    hash: str
    receipt: str | None = None


class Revision(_Model):
    """One revision of a task's subject (``GET /tasks/{id}/revisions/{n}``)."""

    revision: int
    digest: str
    source_revisions: list[str] = Field(default_factory=list)
    created_by: str
    created_at: datetime
    subject: dict[str, Any] | None = None


class Diff(_Model):
    """What changed between two revisions: each entry names its ``path`` (a JSON
    Pointer); a changed long string also carries ``line_diff``, or ``line_diff_too_large``
    when it is too large to compare (``truncated`` is then true)."""

    from_revision: int = Field(alias="from")
    to_revision: int = Field(alias="to")
    added: list[dict[str, Any]] = Field(default_factory=list)
    removed: list[dict[str, Any]] = Field(default_factory=list)
    changed: list[dict[str, Any]] = Field(default_factory=list)
    sources: dict[str, Any] = Field(default_factory=dict)
    truncated: bool = False


class WebhookEndpoint(_Model):
    id: str
    url: str
    event_types: list[str] | None = None
    entity_types: list[str] | None = None
    enabled: bool = True
    secret: str | None = Field(default=None, description="Only when created or rotated.")
    asymmetric_signature: bool = Field(
        default=False, description="Deliveries also carry a v1a (Ed25519) signature."
    )


class WebhookEvent(_Model):
    """A verified webhook delivery: ``{"id", "type", "created_at", "data": <task>}``."""

    id: str
    type: str
    created_at: datetime | None = None
    data: Task
    webhook_id: str | None = Field(
        default=None, description="The webhook-id header: deduplicate on it."
    )
    scheme: str = Field(
        default="standard-webhooks",
        description="standard-webhooks, or x-signature-256 (body only: no freshness proof)",
    )
    receipt: str | None = Field(
        default=None,
        description="The signed receipt of the trail record this event reports (a compact "
        "JWS): check it with verify_receipt before acting.",
    )

    @property
    def task(self) -> Task:
        return self.data

    @property
    def metadata(self) -> dict[str, Any]:
        """The producer's correlation data carried by the event (empty when none)."""
        carried = (self.model_extra or {}).get("metadata")
        if isinstance(carried, dict):
            return carried
        return self.data.metadata or {}

    @property
    def dedupe_key(self) -> str:
        return self.webhook_id or self.id
