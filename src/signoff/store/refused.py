"""The one refusal an escalation's one-step write can meet: a unique rule of the tasks
table. Its own module, so the write paths and the scripts and statements they run can all
name it without importing each other."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class TaskRefused(Exception):
    """A unique rule refused the escalation's task (the same id, or an active task for the
    entity); the escalation was undone, key included. ``looked``: the task that refused it
    was looked for; ``refusing`` is then its ``id``, ``producer_id`` and ``same_id`` (as
    :data:`~signoff.store.oneshot.TASK_CONFLICT` answers), or ``None`` when it is gone
    already. :meth:`TaskWrites.escalate` raises it looked for."""

    def __init__(self, refusing: Mapping[str, Any] | None = None, *, looked: bool = False):
        super().__init__("task refused")
        self.refusing = refusing
        self.looked = looked
