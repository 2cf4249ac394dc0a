"""Request and response shapes for the HTTP API (and its OpenAPI document).

Request bodies are parsed strictly (:func:`signoff.domain.json_input.parse_json_strict`)
and then validated against these models; responses are built from the domain's one task
representation and documented here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator
from pydantic.json_schema import SkipJsonSchema, WithJsonSchema

from signoff.api.feedback_schemas import (
    FIELDS_SCHEMA,
    REMEMBER_DOC,
    ChangeRequestOut,
    FieldFeedback,
)
from signoff.domain.approval_rules import MAX_STAGES
from signoff.domain.decisions import DECISION_RULES, NOTES_MAX_LENGTH, notes_rule
from signoff.domain.states import Decision, Role

#: Revision numbers are 32-bit integers in the database.
MAX_REVISION = 2**31 - 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ClaimRequest(_Strict):
    operator_id: str | None = Field(
        default=None, description="Must equal the caller's principal id."
    )


class ClaimNextRequest(ClaimRequest):
    entity_type: str | None = None
    reason_code: str | None = None


class DecisionRequest(_Strict):
    """A decision, with the notes the decision rules ask for, and the revision and digest
    reviewed: what a resolve and a vote both carry."""

    # The enum inline: request bodies are documented from the model's own schema.
    decision: Annotated[
        Decision, WithJsonSchema({"type": "string", "enum": [d.value for d in DECISION_RULES]})
    ]
    notes: str | None = Field(
        default=None,
        description=notes_rule(),
        json_schema_extra={"maxLength": NOTES_MAX_LENGTH},
    )
    operator_id: str | None = Field(
        default=None, description="Must equal the caller's principal id."
    )
    revision: StrictInt | None = Field(
        default=None,
        ge=1,
        le=MAX_REVISION,
        description="Required on a task with a subject: the revision reviewed (a JSON "
        'integer: `"1"`, `1.0` and `true` are refused).',
    )
    digest: str | None = Field(
        default=None,
        pattern="^[a-f0-9]{64}$",
        description="That revision's digest (RFC 8785 SHA-256, as shown on the task).",
    )
    subject: dict[str, Any] | None = Field(
        default=None,
        description="With `APPROVED_WITH_EDITS` only: the edited subject (its `editable` "
        "paths may differ): the next revision, by the reviewer, is what is approved.",
    )


class ResolveRequest(DecisionRequest):
    """The decision under a lease, with an optional payload for the source system."""

    resolution_payload: dict[str, Any] | None = None
    remember_seconds: StrictInt | None = Field(default=None, description=REMEMBER_DOC)
    # Inline (request bodies are documented from the model's own schema, without $defs).
    fields: Annotated[list[FieldFeedback] | None, WithJsonSchema(FIELDS_SCHEMA)] = Field(
        default=None,
        description="With `REVISION_REQUESTED` only: fields to change, each with its reason; "
        "kept with the notes as `change_request` until the next decision.",
    )


class VoteRequest(DecisionRequest):
    """A vote on a task with an approval rule (no lease), under the same decision rules."""

    stage: StrictInt | None = Field(
        default=None,
        ge=1,
        le=MAX_STAGES,
        description="The stage the vote is meant for (from 1, as `approval_progress.stage`): "
        "required to vote at a later stage after voting at an earlier one; a vote naming "
        "another stage than the one being voted on is 409 `ERR_STAGE_NOT_OPEN`.",
    )


class VoteOut(BaseModel):
    """What a vote did, in the answer to it."""

    recorded: bool = Field(description="False for a retry of one's identical vote.")
    counted: bool = Field(
        description="Whether it counts: an approval filling a place, a veto, or a vote "
        "against under a rule without a veto."
    )
    reason: Literal["counted", "no_place", "against", "veto", "not_a_veto", "retry"]
    stage: int = Field(description="The stage it is at (from 1).")
    text: str


class CreateApiKeyRequest(_Strict):
    role: Literal["producer", "reviewer", "supervisor", "admin"]
    principal_id: str = Field(min_length=1, max_length=255)
    groups: list[str] = Field(
        default_factory=list,
        description="Reviewer groups: which group-assigned tasks the key sees and claims.",
    )
    email: str | None = Field(default=None, pattern=r"^[^@\s]+@[^@\s]+$", max_length=320)

    @field_validator("email")
    @classmethod
    def _printable_email(cls, value: str | None) -> str | None:
        if value is not None and any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
            raise ValueError("must not contain control characters")
        return value

    @field_validator("groups")
    @classmethod
    def _group_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not 1 <= len(name) <= 100 or any(ord(ch) < 32 for ch in name):
                raise ValueError("group names are 1 to 100 characters without control characters")
        return value


class ApiKeyCreated(BaseModel):
    id: str
    key: str = Field(description="The secret. Shown once; only its SHA-256 is stored.")
    role: Role
    principal_id: str


class ApiKeyOut(BaseModel):
    id: str
    role: Role
    principal_id: str
    groups: list[str]
    email: str | None
    created_at: str
    revoked_at: str | None


class ApiKeyListOut(BaseModel):
    items: list[ApiKeyOut]


class KeyFieldOut(BaseModel):
    label: str
    type: Literal["money", "date", "person", "link", "text"]
    pointer: str = Field(description="JSON Pointer into the subject (or the input).")
    value: Any = Field(description="The value as given (long text clipped to 200 characters).")
    text: str = Field(description="The value as shown, in English.")
    currency: str | None = Field(default=None, description="ISO 4217 code, for money.")
    currency_pointer: str | None = None


class HeadlineOut(BaseModel):
    title: str = Field(description="What is being approved, in one line, in English.")
    template: str | None = Field(description="The producer's title template; null: the default.")
    fields: list[KeyFieldOut]
    values: dict[str, Any] = Field(description="The title's placeholders' values, by pointer.")
    revision: int | None = Field(description="The revision it was rendered from (null: input).")


class TaskOut(BaseModel):
    """The one task representation (escalate, GET, claim, resolve, events, outbox)."""

    id: str
    status: Literal["PENDING_REVIEW", "CLAIMED", "RESOLVED", "EXPIRED", "CANCELLED"]
    headline: HeadlineOut | None = Field(
        description="What is being approved: a title and key fields (docs/api.md#headlines)."
    )
    entity_type: str
    entity_id: str
    reason_code: str
    precheck_hash: str
    diagnostic_bundle: dict[str, Any]
    producer_id: str
    version: int
    claimed_by: str | None
    lease_expires_at: str | None = Field(description="RFC 3339, UTC")
    decision: Decision | None
    notes: str | None
    resolution_payload: dict[str, Any] | None
    operator_id: str | None
    created_at: str
    updated_at: str
    resolved_at: str | None
    current_revision: int | None = Field(description="Subject revision; also the ETag.")
    digest: str | None = Field(description="SHA-256 of the current revision's RFC 8785 form.")
    material_paths: list[str] | None = Field(
        description="Policy the approval is carried forward under (null: every change is material)."
    )
    approved_revision: int | None
    approved_digest: str | None
    approval_expires_at: str | None
    execution_status: Literal["EXECUTING", "COMPLETED", "FAILED"] | None
    execution_lease_expires_at: str | None = Field(
        default=None, description="While an execution lease lives: when it lapses."
    )
    editable: list[str] | None = None
    grant_id: str | None = None
    awaiting: Literal["reviewers", "producer"] | None = None
    change_request: ChangeRequestOut | None = Field(
        default=None, description="The last feedback asking for changes, until the next decision."
    )
    metadata: dict[str, Any] | None = Field(
        default=None,
        description="The producer's correlation metadata; only for its producer and admins.",
    )
    traceparent: str | None = Field(
        default=None, description="W3C trace context of the escalation; producer and admins."
    )
    requested_by: str | None = Field(
        default=None, description="The person the producer asked on behalf of, if named."
    )
    approval_rule: dict[str, Any] | None = Field(
        default=None,
        description="Only on a task with an approval rule: the rule, with its stages.",
    )
    votes: list[dict[str, Any]] | None = Field(
        default=None,
        description="Only on a task with an approval rule: the live votes, each with "
        "`voter`, `decision`, `notes`, `revision`, `digest`, `stage`, `at`, `door`.",
    )
    approval_progress: dict[str, Any] | None = Field(
        default=None,
        description="Only on a task with an approval rule: `stage`, `stage_name`, `stages`, "
        "`approvals`, `required`, `waiting_on`, `against`, `met`, `outcome`, `text`.",
    )


class EscalationCreated(TaskOut):
    task_id: str


class VotedTaskOut(TaskOut):
    """The task after a vote, with what the vote did."""

    vote: VoteOut


class LeaseGranted(TaskOut):
    lease_token: str = Field(
        description="Present this as X-Lease-Token to renew, release or resolve."
    )


class TaskPageOut(BaseModel):
    items: list[TaskOut]
    next_cursor: str | None


class AuditEventOut(BaseModel):
    id: int
    task_id: str
    type: str
    action: str
    status: str
    version: int
    actor_id: str
    actor_role: str
    details: dict[str, Any]
    created_at: str


class AuditTrailOut(BaseModel):
    items: list[AuditEventOut]


class EventOut(BaseModel):
    """One event as webhook endpoints receive it."""

    id: str
    type: str
    created_at: str
    data: dict[str, Any]
    receipt: str | None = Field(
        default=None,
        description="The signed receipt (compact JWS, EdDSA) of the trail record this event "
        "reports; keys at /.well-known/jwks.json",
    )


class EventPageOut(BaseModel):
    items: list[EventOut]
    next_cursor: str | None
    has_more: bool


class FieldProblem(BaseModel):
    field: str
    message: str


class Problem(BaseModel):
    """RFC 9457 problem details (``application/problem+json``)."""

    type: str
    title: str
    status: int
    detail: str
    error_code: str
    message: str
    errors: list[FieldProblem] | None = None
    missing_fields: list[str] | None = None
    task_id: str | None = None


class TaskWithViewOut(TaskOut):
    last_viewed_revision: int | None = Field(
        default=None, description="Reviewers: the revision you had seen before this request."
    )


class ReviseSubjectRequest(_Strict):
    subject: dict[str, Any]
    source_revisions: list[str] | SkipJsonSchema[None] = Field(
        default=None, description="Omitted: the previous revision's are kept."
    )


class ExecuteRequest(_Strict):
    revision: StrictInt = Field(ge=1, le=MAX_REVISION)
    digest: str = Field(pattern="^[a-f0-9]{64}$")
    operation_id: str = Field(min_length=1, max_length=255)


class ActionResultRequest(_Strict):
    operation_id: str = Field(min_length=1, max_length=255)
    result: Any = None


class ActionOut(BaseModel):
    id: str
    status: Literal["PENDING", "COMPLETED", "FAILED"]
    operation_id: str | None
    result: Any


class ExecutionOut(BaseModel):
    task_id: str
    execution_status: Literal["EXECUTING", "COMPLETED", "FAILED"] | None
    operation_id: str | None
    actions: list[ActionOut]


class ExecutionGrantOut(ExecutionOut):
    revision: int
    digest: str
    approved_by: str | None
    granted_at: str | None
    execution_token: str | None = Field(
        default=None,
        description="Present it as X-Execution-Token to renew the execution lease and to "
        "complete or fail actions. Null when a completed execution's outcome is returned.",
    )
    execution_lease_expires_at: str | None = Field(
        default=None, description="RFC 3339, UTC: when the execution lease lapses."
    )


class ExecutionLeaseOut(BaseModel):
    task_id: str
    execution_status: Literal["EXECUTING", "COMPLETED", "FAILED"] | None
    operation_id: str | None
    execution_lease_expires_at: str | None


class RevisionOut(BaseModel):
    revision: int
    digest: str
    source_revisions: list[str]
    created_by: str
    created_at: str
    subject: dict[str, Any] | None = None


class DiffOut(BaseModel):
    from_: int = Field(alias="from")
    to: int
    added: list[dict[str, Any]]
    removed: list[dict[str, Any]]
    changed: list[dict[str, Any]]
    sources: dict[str, Any]
    truncated: bool = Field(
        description="At least one change is too large to compare: it carries "
        "`line_diff_too_large: true` instead of a `line_diff` (its `from` and `to` stay "
        "whole). A diff's line diffs share one budget of characters, lines and CPU time."
    )


class RevisionListOut(BaseModel):
    items: list[RevisionOut]


class WhoAmIOut(BaseModel):
    """``GET /me``: the principal behind the caller's credentials."""

    principal_id: str
    role: Literal["producer", "reviewer", "supervisor", "admin"]
    groups: list[str]
