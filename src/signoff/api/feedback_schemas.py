"""The API's models of answers beyond yes and no: a change request (the fields a reviewer
names, the feedback a task keeps, :mod:`signoff.domain.change_requests`) and remembered
approvals (:mod:`signoff.domain.grants`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class FieldFeedback(BaseModel):
    """One field of the subject that should change, and why."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="A JSON Pointer (RFC 6901) into the subject, e.g. `/title`.")
    reason: str = Field(description="Why it should change (required).")


class ChangeRequestOut(BaseModel):
    """What a reviewer asked to change: notes, fields with reasons, about which revision."""

    notes: str | None
    fields: list[FieldFeedback]
    revision: int | None = Field(description="The revision the feedback is about.")
    by: str = Field(description="Who asked for the changes.")
    at: str = Field(description="RFC 3339, UTC")


#: ``fields`` of a resolve request, inline.
FIELDS_SCHEMA = {
    "anyOf": [
        {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "reason": {"type": "string"}},
                "required": ["path", "reason"],
                "additionalProperties": False,
            },
        },
        {"type": "null"},
    ]
}

REMEMBER_DOC = (
    "With an approval: allow the same action again for this many seconds (at most "
    "`SIGNOFF_MAX_GRANT_SECONDS`): later escalations by the same producer, of the same "
    "entity type and reason, with the same subject digest, are approved at once."
)


class GrantIn(BaseModel):
    """An admin's remembered approval: a digest or conditions (JSON Pointer → value)."""

    model_config = ConfigDict(extra="forbid")

    producer_id: str
    entity_type: str
    reason_code: str
    digest: str | None = None
    conditions: dict[str, Any] | None = None
    seconds: int = Field(description="How long it lasts (at most SIGNOFF_MAX_GRANT_SECONDS).")
    note: str | None = None


class GrantOut(BaseModel):
    id: str
    producer_id: str
    entity_type: str
    reason_code: str
    digest: str | None
    conditions: dict[str, Any] | None
    created_by: str
    source_task_id: str | None
    note: str | None
    created_at: str
    expires_at: str
    revoked_at: str | None
    revoked_by: str | None
    uses: int
    live: bool


class GrantListOut(BaseModel):
    items: list[GrantOut]
