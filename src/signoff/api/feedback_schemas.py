"""The API's models of a change request: the fields a reviewer names, and the feedback a
task keeps (:mod:`signoff.domain.change_requests`)."""

from __future__ import annotations

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
