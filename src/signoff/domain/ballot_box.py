"""A vote as recorded: one person's vote at one stage of a task's approval rule, bound to
the revision and digest they saw. Pure values: nothing here touches a database."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from signoff.domain.clock import rfc3339
from signoff.domain.states import Decision


@dataclass(frozen=True)
class Vote:
    """One person's vote at one stage, bound to the revision and digest they saw."""

    voter: str
    key_id: str
    """The voter's API key id or console user id (the execution gate checks it is live)."""
    groups: tuple[str, ...]
    """The voter's groups when they voted (what the group minimums count)."""
    decision: Decision
    notes: str | None
    revision: int | None
    digest: str | None
    stage: int
    at: datetime
    door: str
    """Where the vote came from: ``api``, ``console`` or ``link``."""

    def as_json(self) -> dict[str, Any]:
        return {
            "voter": self.voter,
            "key_id": self.key_id,
            "groups": list(self.groups),
            "decision": self.decision.value,
            "notes": self.notes,
            "revision": self.revision,
            "digest": self.digest,
            "stage": self.stage,
            "at": rfc3339(self.at),
            "door": self.door,
        }

    def public(self) -> dict[str, Any]:
        """What the API, events and pages show of a vote (no credential id). Stages are
        numbered from 1 wherever they are shown, as in ``approval_progress``."""
        view = self.as_json()
        del view["key_id"]
        view["stage"] = self.stage + 1
        return view

    def same_as(self, decision: Decision, notes: str | None, revision: int | None) -> bool:
        return (self.decision, self.notes, self.revision) == (decision, notes, revision)


def votes_from_json(documents: Sequence[Mapping[str, Any]] | None) -> list[Vote]:
    return [
        Vote(
            voter=d["voter"],
            key_id=d["key_id"],
            groups=tuple(d["groups"]),
            decision=Decision(d["decision"]),
            notes=d["notes"],
            revision=d["revision"],
            digest=d["digest"],
            stage=int(d["stage"]),
            at=datetime.fromisoformat(d["at"]),
            door=d["door"],
        )
        for d in documents or ()
    ]
