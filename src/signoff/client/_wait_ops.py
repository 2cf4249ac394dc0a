"""Waiting for a decision, written once without I/O (see :mod:`signoff.client._ops`): a
long-poll that reconnects with backoff and jitter while the server restarts."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from signoff.client._errors import ApiError, ConnectionFailed, DecisionTimeout
from signoff.client._models import Task
from signoff.client._ops import (
    MAX_WAIT_SECONDS,
    SETTLED_STATUSES,
    Op,
    Pause,
    _call,
    _id,
    _task,
    get_task,
)

T = TypeVar("T")


def _settled(task: Task, revision: int | None) -> bool:
    if task.status not in SETTLED_STATUSES:
        return False
    if revision is None or task.status != "RESOLVED" or task.current_revision == revision:
        return True
    # A reviewer's edit of the revision waited on is its decision (the edit is the next one).
    return task.edited and task.current_revision == revision + 1


#: Answers that mean "the server is restarting or overloaded": a wait tries again.
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
#: The longest pause between two reconnection attempts of a wait.
MAX_RECONNECT_PAUSE = 5.0


def reconnect_pause(attempt: int) -> float:
    """Full-jitter exponential backoff: 0.25 s, 0.5 s, 1 s … up to 5 s, each drawn at random
    below its cap, so the waiters of a restarted server do not all come back at once."""
    cap: float = min(MAX_RECONNECT_PAUSE, 0.25 * 2.0 ** min(attempt, 10))
    return cap * (0.2 + 0.8 * random.random())  # noqa: S311 - spreading load, not a secret


def _transient(error: Exception) -> bool:
    if isinstance(error, ConnectionFailed):
        return True
    return isinstance(error, ApiError) and error.status in TRANSIENT_STATUSES


def _reconnecting(
    make: Callable[[], Op[T]], *, deadline: float, clock: Callable[[], float]
) -> Op[T]:
    """Run ``make()``; after a lost connection or a restarting server, run it again with
    backoff and jitter until ``deadline``. Any other refusal is raised at once."""
    attempt = 0
    while True:
        try:
            return (yield from make())
        except (ConnectionFailed, ApiError) as error:
            remaining = deadline - clock()
            if not _transient(error) or remaining <= 0:
                raise
            attempt += 1
            yield Pause(min(remaining, reconnect_pause(attempt)))


def wait_for_decision(
    task_id: str | Task,
    *,
    timeout: float,
    revision: int | None = None,
    poll_interval: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
) -> Op[Task]:
    """Long-poll until the task is decided (or expired, or cancelled).

    With ``revision``, a decision about another revision does not count (the subject
    changed since): keep waiting for the decision about this one. A reviewer's edit of it
    (``APPROVED_WITH_EDITS``, the edit being the next revision) is that decision. A server
    restart, a dropped connection or a 5xx/429 answer does not end the wait: it reconnects with
    backoff and jitter until ``timeout`` has passed.
    """
    deadline = clock() + timeout
    task = yield from _reconnecting(lambda: get_task(task_id), deadline=deadline, clock=clock)
    while not _settled(task, revision):
        if deadline - clock() <= 0:
            raise DecisionTimeout(
                f"no decision on task {task.id} within {timeout} s (status {task.status})",
                task=task,
            )
        started = clock()
        try:
            fresh = yield from _reconnecting(
                partial(_long_poll, task, deadline, clock), deadline=deadline, clock=clock
            )
        except (ConnectionFailed, ApiError) as error:
            if not _transient(error):
                raise
            # Out of time while the server could not be reached: a timeout like any other,
            # with the last state seen (the next wait reconnects again).
            raise DecisionTimeout(
                f"no decision on task {task.id} within {timeout} s (status {task.status}; "
                f"the server could not be reached at the end: {error.message})",
                task=task,
            ) from error
        if fresh.version == task.version and clock() - started < 0.5:
            # The server answered at once with nothing new: it does not hold requests
            # (an older Signoff), or it is shutting down. Poll gently instead of spinning.
            yield Pause(min(poll_interval, max(0.0, deadline - clock())))
        task = fresh
    return task


def _long_poll(task: Task, deadline: float, clock: Callable[[], float]) -> Op[Task]:
    """One long-poll, held by the server at most until ``deadline``."""
    wait = max(1, min(MAX_WAIT_SECONDS, math.ceil(deadline - clock())))
    response = yield _call(
        "GET",
        f"/tasks/{_id(task)}",
        params={"wait": wait, "after_version": task.version},
        retry=True,
        hold=wait,
    )
    return task if response.status_code == 304 else _task(response)
