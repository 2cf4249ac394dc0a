"""Request and response shapes of the webhook endpoints and their deliveries (HTTP API and
OpenAPI document)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, StrictBool, field_validator
from pydantic.json_schema import SkipJsonSchema

from signoff.api.schemas import _Strict

ASYMMETRIC_DESCRIPTION = (
    "Also sign each delivery with the server's Ed25519 key: webhook-signature then carries "
    "a `v1a,<base64>` signature (Standard Webhooks) over `<webhook-id>.<webhook-timestamp>."
    "<body>`, which receivers verify with a public key of /.well-known/jwks.json: no shared "
    "secret needed."
)


class CreateWebhookEndpointRequest(_Strict):
    url: str = Field(min_length=1, max_length=2048)
    event_types: list[str] | None = Field(
        default=None, description="None or empty: every event type."
    )
    entity_types: list[str] | None = Field(
        default=None, description="None or empty: every entity type."
    )
    description: str | None = Field(default=None, max_length=1000)
    asymmetric_signature: StrictBool = Field(default=False, description=ASYMMETRIC_DESCRIPTION)


class UpdateWebhookEndpointRequest(_Strict):
    """Only the fields sent change; ``url`` and ``enabled`` may not be null."""

    # Omitted means "unchanged"; null is refused (so the schema does not offer it).
    url: Annotated[str, Field(min_length=1, max_length=2048)] | SkipJsonSchema[None] = None
    enabled: StrictBool | SkipJsonSchema[None] = None
    event_types: list[str] | None = None
    entity_types: list[str] | None = None
    description: str | None = Field(default=None, max_length=1000)
    asymmetric_signature: StrictBool | SkipJsonSchema[None] = None

    @field_validator("url", "enabled", "asymmetric_signature")
    @classmethod
    def _not_null(cls, value: object) -> object:
        if value is None:
            raise ValueError("may not be null")
        return value


class WebhookEndpointOut(BaseModel):
    id: str
    url: str
    description: str | None
    event_types: list[str] | None
    entity_types: list[str] | None
    producer_id: str | None = Field(
        description="The producer whose tasks' events it gets; null: an admin's, every task."
    )
    enabled: bool
    disabled_reason: str | None
    failing_since: str | None
    created_at: str
    updated_at: str
    asymmetric_signature: bool = Field(description=ASYMMETRIC_DESCRIPTION)


class WebhookEndpointCreated(WebhookEndpointOut):
    secret: str = Field(description="whsec_ + base64 of 32 random bytes. Shown once.")


class DeliveryAttemptOut(BaseModel):
    attempt: int
    attempted_at: str
    status_code: int | None
    latency_ms: int
    error: str | None = Field(description="Transport detail: admins only (null for others).")
    error_category: str | None = Field(
        description="timeout, refused, tls, dns, http_status, ssrf_blocked, connection, other"
    )
    response_body: str | None = Field(description="The receiver's answer: admins only.")


class DeliveryOut(BaseModel):
    id: str
    endpoint_id: str
    event_id: str = Field(description="The webhook-id header: the same on every attempt.")
    event_type: str
    task_id: str
    status: Literal["PENDING", "SUCCEEDED", "DEAD"]
    attempt_count: int
    next_attempt_at: str | None
    last_status_code: int | None
    last_error: str | None = Field(description="Transport detail: admins only (null for others).")
    last_error_category: str | None
    created_at: str
    delivered_at: str | None
    attempts: list[DeliveryAttemptOut]


class DeliveryListOut(BaseModel):
    items: list[DeliveryOut]


class WebhookEndpointListOut(BaseModel):
    items: list[WebhookEndpointOut]
