"""Remembered approvals: a grant allows the same action again, for a while, without asking
a person each time.

A reviewer creates one when approving (``remember_seconds``): it covers later escalations
by the same producer, of the same entity type and reason, whose subject has the same digest
as the one approved. An admin may write one as a policy, naming the producer, entity type
and reason, and either a digest or ``conditions`` (JSON Pointer → the exact value the
subject must hold there). A grant expires, can be revoked, and is never used for a task
decided by an approval rule. A sampled share of matching escalations still goes to a
person, for audit (``SIGNOFF_GRANT_AUDIT_SHARE``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from jsonpointer import JsonPointer, JsonPointerException

from signoff.domain.clock import rfc3339
from signoff.errors import FieldError, validation_error

#: The longest a grant may last (and the default of ``SIGNOFF_MAX_GRANT_SECONDS``).
MAX_GRANT_SECONDS = 30 * 24 * 3600
#: At most this many conditions in an admin's grant.
MAX_CONDITIONS = 20


@dataclass(frozen=True)
class Grant:
    id: uuid.UUID
    producer_id: str
    entity_type: str
    reason_code: str
    digest: str | None
    conditions: dict[str, Any] | None
    created_by: str
    created_by_key_id: uuid.UUID | None
    source_task_id: uuid.UUID | None
    note: str | None
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None = None
    revoked_by: str | None = None
    uses: int = 0

    def covers(self, subject: Any, digest: str) -> bool:
        """Whether this (live, same producer, entity type and reason) grant covers a
        subject: the same digest, or every condition holding exactly."""
        if self.digest is not None:
            return self.digest == digest
        for pointer, value in (self.conditions or {}).items():
            try:
                if JsonPointer(pointer).resolve(subject) != value:
                    return False
            except JsonPointerException:
                return False
        return bool(self.conditions)

    def public(self, now: datetime) -> dict[str, Any]:
        live = self.revoked_at is None and self.expires_at > now
        return {
            "id": str(self.id),
            "producer_id": self.producer_id,
            "entity_type": self.entity_type,
            "reason_code": self.reason_code,
            "digest": self.digest,
            "conditions": self.conditions,
            "created_by": self.created_by,
            "source_task_id": str(self.source_task_id) if self.source_task_id else None,
            "note": self.note,
            "created_at": rfc3339(self.created_at),
            "expires_at": rfc3339(self.expires_at),
            "revoked_at": rfc3339(self.revoked_at),
            "revoked_by": self.revoked_by,
            "uses": self.uses,
            "live": live,
        }

    def cited(self) -> dict[str, Any]:
        """What the trail of a task it approved says of it."""
        return {
            "id": str(self.id),
            "created_by": self.created_by,
            "source_task_id": str(self.source_task_id) if self.source_task_id else None,
            "digest": self.digest,
            "conditions": self.conditions,
            "expires_at": rfc3339(self.expires_at),
        }


def remembered_approval(
    task: Any, *, by: str, key_id: uuid.UUID | None, seconds: int, now: datetime
) -> Grant:
    """The grant a reviewer makes with their approval of ``task`` (a ``Task``): the same
    producer, entity type, reason and approved digest, for ``seconds``."""
    return Grant(
        id=uuid.uuid4(),
        producer_id=task.producer_id,
        entity_type=task.entity_type,
        reason_code=task.reason_code,
        digest=task.approved_digest,
        conditions=None,
        created_by=by,
        created_by_key_id=key_id,
        source_task_id=task.id,
        note=None,
        created_at=now,
        expires_at=now + timedelta(seconds=seconds),
    )


def checked_seconds(raw: object, limit: int, field: str = "remember_seconds") -> int:
    """How long a grant lasts: a whole number of seconds from 1 to ``limit``.

    Raises:
        Unprocessable: ``ERR_VALIDATION`` naming ``field``.
    """
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= limit:
        raise validation_error([FieldError(field, f"must be a whole number from 1 to {limit}")])
    return raw


def checked_scope(body: Mapping[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    """An admin's grant names a ``digest`` or ``conditions`` (JSON Pointer → value), not
    both and not neither.

    Raises:
        Unprocessable: ``ERR_VALIDATION`` naming ``digest`` or ``conditions[…]``.
    """
    digest, conditions = body.get("digest"), body.get("conditions")
    if (digest is None) == (conditions is None):
        problem = "name exactly one of digest or conditions"
        raise validation_error([FieldError("digest", problem), FieldError("conditions", problem)])
    if digest is not None:
        if (
            not isinstance(digest, str)
            or len(digest) != 64
            or set(digest) - set("0123456789abcdef")
        ):
            raise validation_error([FieldError("digest", "must be a SHA-256 digest (hex)")])
        return digest, None
    if not isinstance(conditions, dict) or not 1 <= len(conditions) <= MAX_CONDITIONS:
        problem = f"must map 1 to {MAX_CONDITIONS} JSON Pointers to values"
        raise validation_error([FieldError("conditions", problem)])
    bad = [p for p in conditions if not _pointer(p)]
    if bad:
        raise validation_error(
            [FieldError(f"conditions[{p!r}]", "is not a JSON Pointer") for p in bad]
        )
    return None, dict(conditions)


def sampled(share: float, draw: float) -> bool:
    """Whether a matching escalation goes to a person anyway, for audit (``draw`` in [0, 1))."""
    return draw < share


def _pointer(path: str) -> bool:
    if not path.startswith("/") or len(path) > 500:
        return False
    try:
        JsonPointer(path)
    except JsonPointerException:
        return False
    return True
