"""A person who signs in to the console (or is known to it through single sign-on)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from signoff.domain.states import Role
from signoff.domain.tasks import Principal


@dataclass(frozen=True)
class User:
    id: uuid.UUID
    principal_id: str
    role: Role
    groups: tuple[str, ...]
    email: str | None
    password_hash: str | None
    source: str
    disabled_at: datetime | None
    created_at: datetime
    updated_at: datetime
    oidc_issuer: str | None = None
    oidc_subject: str | None = None
    #: How they hear of work (:mod:`signoff.domain.notify_choice`).
    notify: str = "each"

    @property
    def principal(self) -> Principal:
        return Principal(
            key_id=self.id, principal_id=self.principal_id, role=self.role, groups=self.groups
        )

    def public(self) -> dict[str, Any]:
        """What an admin may see: never the password hash."""
        return {
            "id": str(self.id),
            "principal_id": self.principal_id,
            "role": self.role.value,
            "groups": list(self.groups),
            "email": self.email,
            "source": self.source,
            "has_password": self.password_hash is not None,
            "notify": self.notify,
            "disabled": self.disabled_at is not None,
            "disabled_at": self.disabled_at,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }
