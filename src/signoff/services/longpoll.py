"""Long-poll: wait for a task to move past a version the caller has seen.

A waiter holds no database connection while it waits: it registers with the process's
change signal (:class:`signoff.store.runtime.changes.TaskChanges`) *before* its first read, so no
change can slip between the read and the wait, and reads once more when woken or when
its time is up. The caller compares ``version``.
"""

from __future__ import annotations

from signoff.domain.tasks import Principal, Task
from signoff.errors import FieldError, validation_error
from signoff.services.common import get_task, parse_task_id
from signoff.services.context import ServiceContext
from signoff.services.keys import still_authenticated
from signoff.services.wait_slots import WaitKind

MAX_WAIT_SECONDS = 60.0


async def wait_for_task(
    ctx: ServiceContext,
    principal: Principal,
    raw_task_id: str,
    *,
    wait: float,
    after_version: int | None,
) -> Task:
    """The task as soon as its ``version`` exceeds ``after_version`` (default: the version
    it has now), or as it is after ``wait`` seconds.

    Raises:
        Unprocessable: ``ERR_VALIDATION`` unless ``0 < wait <= 60``.
        NotFound: ``ERR_TASK_NOT_FOUND`` (also for tasks the caller may not read).
        TooManyRequests: ``ERR_TOO_MANY_WAITS`` beyond ``SIGNOFF_MAX_LONG_POLLS_PER_KEY``.
        Unauthenticated: ``ERR_UNAUTHENTICATED``, the caller's key was revoked while the
            request waited.
    """
    if not 0 < wait <= MAX_WAIT_SECONDS:
        raise validation_error([FieldError("wait", "must be more than 0 and at most 60")])
    task_id = parse_task_id(raw_task_id)
    changes = ctx.database.changes
    give_back = ctx.wait_slots.take(
        WaitKind.LONG_POLL, principal.key_id, ctx.settings.max_long_polls_per_key
    )
    try:
        await changes.start()
        with changes.watch(task_id) as changed:
            task = await get_task(ctx, principal, raw_task_id)
            seen = task.version if after_version is None else after_version
            if task.version > seen:
                return task
            await changes.park(changed, wait)
        # Woken or timed out: the key may have been revoked while the request waited.
        principal = await still_authenticated(ctx, principal)
    finally:
        give_back()
    return await get_task(ctx, principal, raw_task_id)
