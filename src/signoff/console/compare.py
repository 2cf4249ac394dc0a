"""Compare any two revisions of a task's subject: the control on the task page, and the
changes it shows (in the words of every other diff,
:func:`~signoff.console.changes.change_view`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from signoff.console.changes import ChangeView, change_view
from signoff.domain.params import number_or_none
from signoff.domain.tasks import Principal, Task
from signoff.services import revisions as revision_service
from signoff.services.context import ServiceContext

#: The query parameters the control sends.
FROM, TO = "compare_from", "compare_to"


@dataclass(frozen=True)
class Comparison:
    """The control's choices (``revisions``, newest last) and, when two were chosen, what
    changed between them; ``problem``: why nothing is shown for the chosen pair."""

    revisions: tuple[int, ...]
    start: int
    end: int
    changes: ChangeView | None = None
    problem: str | None = None


def _revision(params: Mapping[str, str], name: str) -> int | None:
    return number_or_none(params.get(name) or "")


def link(start: int, end: int) -> str:
    """The query that shows the changes from revision ``start`` to ``end``."""
    return f"?{FROM}={start}&{TO}={end}#comparison"


async def comparison(
    ctx: ServiceContext, principal: Principal, task: Task, params: Mapping[str, str]
) -> Comparison | None:
    """The comparison the page shows (``None``: a task with fewer than two revisions)."""
    current = task.current_revision or 0
    if current < 2:
        return None
    revisions = tuple(range(1, current + 1))
    start, end = _revision(params, FROM), _revision(params, TO)
    if start is None or end is None:
        return Comparison(revisions, current - 1, current)
    if start not in revisions or end not in revisions or start == end:
        problem = f"Choose two different revisions between 1 and {current}."
        return Comparison(revisions, current - 1, current, problem=problem)
    diff = await revision_service.diff(ctx, principal, str(task.id), start, end)
    return Comparison(revisions, start, end, await change_view(diff, ctx.cpu.diffs))
