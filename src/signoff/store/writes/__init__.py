"""The write path of each state change on review tasks: one per engine.

The services change a task's state through :class:`TaskWrites` and never ask which
engine is underneath. The implementation is chosen once, by
:func:`signoff.store.writes.assemble.task_writes`, when the runtime's database is built
(``database.writes``); the write paths use only what
:class:`signoff.store.protocols.WritingDatabase` names of it:

- :mod:`signoff.store.writes.postgres`: each change is one named statement of
  :mod:`signoff.store.oneshot` (escalations committed in groups,
  :mod:`signoff.store.runtime.grouped`).
- :mod:`signoff.store.writes.sqlite`: the common escalation is one script for the SQLite
  thread (:mod:`signoff.store.lite`); the other changes are SQLAlchemy transactions
  (:mod:`signoff.store.writes.core`).

Each change appends its audit event and, when published, its outbox event in its own
transaction. A conditional change that matched nothing answers with what the service
needs to explain why (:class:`Refusal`, :class:`OverLimit`); the explaining stays with
the service.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from signoff.domain.states import Decision
from signoff.domain.tasks import Principal, Task
from signoff.store.idempotency import StoredIdempotencyKey
from signoff.store.refused import TaskRefused as TaskRefused


@dataclass(frozen=True)
class Escalation:
    """The common escalation, written in one step: the new task, its idempotency key with
    the response to replay, and its events (texts as stored)."""

    task: Task
    principal: Principal
    idempotency_key: str
    fingerprint: str
    response: str
    now: datetime
    expires_at: datetime
    details: str
    event_id: uuid.UUID
    payload: str


@dataclass(frozen=True)
class EscalationRecord:
    """What an escalation wrote: ``created``, or not, and then the key's stored row as
    this step saw it (``None``: none was visible, or it was gone)."""

    created: bool
    stored: StoredIdempotencyKey | None = None


@dataclass(frozen=True)
class Lease:
    """Who changes a lease, at which instant, with which token's hash; ``expires_at``: the
    end of a lease taken or renewed now. ``groups``: the groups whose tasks the principal
    may claim (``None``: any task)."""

    principal: Principal
    token_hash: str
    now: datetime
    expires_at: datetime
    groups: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Edit:
    """A reviewer's edit of the subject, checked: stored as revision ``revision`` (by the
    deciding reviewer) in the decision's transaction, which binds the approval to it."""

    subject: dict[str, Any]
    digest: str
    revision: int
    source_revisions: list[str]
    changed_paths: list[str]
    headline: dict[str, Any] | None
    search_text: str | None

    def values(self) -> dict[str, Any]:
        """The task's columns the edit sets besides the decision (an approval's binding
        follows them)."""
        values: dict[str, Any] = {"current_revision": self.revision, "digest": self.digest}
        if self.headline is not None:
            values |= {"headline": self.headline, "search_text": self.search_text}
        return values


@dataclass(frozen=True)
class Resolution:
    """A decision as recorded; ``approval_ttl_seconds``: the approval lifetime of a task
    that names none."""

    decision: Decision
    notes: str | None
    resolution_payload: Any
    revision: int | None
    digest: str | None
    approval_ttl_seconds: int | None
    edit: Edit | None = None
    """The reviewer's edit a decision that edits the subject carries."""
    remember_seconds: int | None = None
    """With an approval: the reviewer's remembered approval lasts this long (a grant on
    the approved digest, stored in the decision's transaction)."""
    change_request: dict[str, Any] | None = None
    """The feedback kept on the task (a decision that asks for changes), else ``None``:
    every decision replaces the one before."""
    door: str = "api"
    """The door the decision came through (:data:`signoff.domain.doors.DOORS`), recorded
    in the details of its audit event."""

    @property
    def fields(self) -> list[dict[str, str]]:
        """The fields a change request names (``[{"path", "reason"}]``), recorded in the
        details of the decision's audit event (and so in its receipt) when there are any."""
        return list((self.change_request or {}).get("fields") or [])

    @property
    def plain(self) -> bool:
        """Nothing but the decision and the task's own columns: no edit (a revision), no
        remembered approval (a grant), no fields named (details of their own). PostgreSQL
        writes a plain decision in one statement; the rest in one transaction
        (:func:`signoff.store.writes.core.resolve`, which decides what they record)."""
        return self.edit is None and self.remember_seconds is None and not self.fields


@dataclass(frozen=True)
class Refusal:
    """The conditional change matched nothing: ``current`` is the task as read after it
    (in the same transaction where there was one), ``None`` when there is no such task."""

    current: Task | None


@dataclass(frozen=True)
class OverLimit:
    """A claim (or the renewal of a lapsed lease) refused because the principal already
    holds ``live_leases`` live leases."""

    live_leases: int


class TaskWrites(Protocol):
    """One method per state change; each is one transaction."""

    async def escalate(self, escalation: Escalation) -> EscalationRecord | None:
        """Take the key and insert the task with its events, or insert nothing when a live
        key holds the idempotency key (``created`` false). ``None``: this database has no
        one-step escalation (SQLite named by a ``file:`` URI); the general path writes it.

        Raises:
            TaskRefused: a unique rule refused the task (looked for).
        """
        ...

    async def claim(
        self, lease: Lease, task_id: uuid.UUID, *, limit: int
    ) -> Task | OverLimit | Refusal:
        """Take ``task_id`` under a new lease, unless the principal holds ``limit`` live
        leases (others than this task's)."""
        ...

    async def claim_next(
        self, lease: Lease, *, limit: int, entity_type: str | None, reason_code: str | None
    ) -> Task | OverLimit | None:
        """Take the oldest claimable task matching the filters; ``None``: there is none."""
        ...

    async def renew(
        self, lease: Lease, task_id: uuid.UUID, *, limit: int
    ) -> Task | OverLimit | Refusal:
        """Extend the held lease to ``lease.expires_at``. A lapsed lease counts against
        ``limit`` as a claim does: refused while the principal holds ``limit`` other live
        leases."""
        ...

    async def release(self, lease: Lease, task_id: uuid.UUID) -> Task | Refusal:
        """Give the held task back to the queue."""
        ...

    async def resolve(
        self, lease: Lease, task_id: uuid.UUID, resolution: Resolution
    ) -> Task | Refusal:
        """Record the decision under the held live lease."""
        ...
