"""Executing what was approved, written once without I/O (see :mod:`signoff.client._ops`):
passing the execution gate (waiting out another executor's lease), renewing the
execution lease, and recording each action's outcome."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from signoff.client._digests import _plain, digest
from signoff.client._errors import AlreadyExecuting
from signoff.client._models import Execution, Task
from signoff.client._ops import MAX_WAIT_SECONDS, Op, Pause, _call, _id, _task, get_task, segment


def _seconds_until(moment: str | None, clock_now: datetime) -> float | None:
    if not moment:
        return None
    try:
        when = datetime.fromisoformat(moment.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (when - clock_now).total_seconds()


def _revision_of(task: Task, local_digest: str) -> Op[int | None]:
    """The revision to name at the gate for a subject of ``local_digest``: the current or
    the approved one when it is theirs, else the latest earlier revision with that digest
    (so the gate can say its approval was invalidated), else the current one."""
    if task.digest == local_digest or task.current_revision is None:
        return task.current_revision
    if task.approved_digest == local_digest:
        return task.approved_revision
    response = yield _call("GET", f"/tasks/{_id(task)}/revisions", retry=True)
    earlier = [
        int(item["revision"])
        for item in response.json().get("items", [])
        if item.get("digest") == local_digest
    ]
    return max(earlier, default=task.current_revision)


#: With ``wait_for_lease=None``: how long after the other executor's lease lapses (as
#: the server reports it, renewals included) the wait ends.
LAPSE_MARGIN_SECONDS = 5.0


def execute(
    task_id: str | Task,
    *,
    subject: Mapping[str, Any],
    operation_id: str,
    wait_for_lease: float | None,
    clock: Callable[[], float] = time.monotonic,
) -> Op[tuple[Execution, Task, str]]:
    """Pass the execution gate for ``subject`` as it is now (its digest computed here).

    When another executor holds the execution lease, wait for its outcome: a long-poll on
    the task wakes on its next change (the other executor completed, failed or renewed)
    and the gate is asked again; a lease that lapses (say, its executor crashed) is taken
    over. ``wait_for_lease`` caps the wait in seconds; ``None`` waits as long as the other
    lease lives (following its renewals) and a little more. A retry of this very
    ``operation_id`` is never refused for its own lease: it takes the lease over.
    """
    local_digest = digest(subject)
    task = yield from get_task(task_id)
    revision = yield from _revision_of(task, local_digest)
    body = {"revision": revision or 1, "digest": local_digest, "operation_id": operation_id}
    deadline = None if wait_for_lease is None else clock() + wait_for_lease
    seen = task
    while True:
        try:
            response = yield _call("POST", f"/tasks/{_id(task)}/execute", json=body, retry=True)
            return Execution.model_validate(response.json()), task, local_digest
        except AlreadyExecuting as busy:
            lapse = _seconds_until(busy.lease_expires_at, datetime.now(UTC))
            if lapse is None:
                raise  # no lease to wait out: another operation completed the execution
            # Never shorter than the lease it waits for (renewals move it on).
            remaining = lapse + LAPSE_MARGIN_SECONDS if deadline is None else deadline - clock()
            if remaining <= 0:
                raise
            # Wake on the task's next change after the read that preceded this refusal,
            # so an outcome recorded in between is not missed; else at the lapse.
            wait = min(float(MAX_WAIT_SECONDS), max(0.05, min(lapse + 0.05, remaining)))
            started = clock()
            polled = yield _call(
                "GET",
                f"/tasks/{_id(task)}",
                params={"wait": round(wait, 3), "after_version": seen.version},
                retry=True,
                hold=wait,
            )
            fresh = seen if polled.status_code == 304 else _task(polled)
            if fresh.version == seen.version and clock() - started < wait / 2:
                yield Pause(wait)  # a server that does not hold requests
            seen = fresh


def renew_execution(task_id: str, token: str) -> Op[Execution]:
    response = yield _call(
        "POST",
        f"/tasks/{_id(task_id)}/execution/renew",
        headers={"X-Execution-Token": token},
        has_body=False,
        retry=True,
    )
    return Execution.model_validate(response.json())


def finish_action(
    task_id: str,
    action_id: str,
    *,
    succeeded: bool,
    operation_id: str,
    result: Any,
    token: str | None,
) -> Op[Execution]:
    headers = {"X-Execution-Token": token} if token else None
    response = yield _call(
        "POST",
        f"/tasks/{_id(task_id)}/actions/{segment(action_id, 'action_id')}/"
        + ("complete" if succeeded else "fail"),
        json={"operation_id": operation_id, "result": _plain(result)},
        headers=headers,
        retry=True,  # idempotent by operation_id
    )
    return Execution.model_validate(response.json())
