"""Edit, then approve: a reviewer's edit of the subject, checked before anything is
written (what the producer declared ``editable``, the subject's own rules, the revision
limit, the headline), ready for the decision's write path to store as a new revision."""

from __future__ import annotations

import uuid

from signoff.domain.digests import json_digest
from signoff.domain.edits import checked_edit
from signoff.domain.headline import rebind
from signoff.domain.inbox import search_text
from signoff.errors import Conflict, ErrorCode, FieldError, NotFound, validation_error
from signoff.services.context import ServiceContext
from signoff.store import approvals as revision_store
from signoff.store import tasks as task_store
from signoff.store.writes import Edit


async def prepared_edit(
    ctx: ServiceContext, task_id: uuid.UUID, revision: int | None, subject: object
) -> Edit:
    """The edit of revision ``revision`` (the one the reviewer saw) into ``subject``.

    Raises:
        Unprocessable: ``ERR_VALIDATION`` (no revision named, not a subject, no change),
            ``ERR_NOT_EDITABLE``, ``ERR_HEADLINE_FIELD``.
        Conflict: ``ERR_STALE_REVISION`` when ``revision`` is not current,
            ``ERR_REVISION_LIMIT``.
        NotFound: ``ERR_TASK_NOT_FOUND``.
    """
    if revision is None:
        raise validation_error([FieldError("revision", "is required to edit the subject")])
    async with ctx.database.transaction(write=False) as uow:
        task = await task_store.find_task(uow.connection, task_id)
        previous = await revision_store.find_revision(uow.connection, task_id, revision)
    if task is None:
        raise NotFound(f"task {task_id} not found", error_code=ErrorCode.TASK_NOT_FOUND)
    if previous is None or task.current_revision != revision:
        raise Conflict(
            f"revision {revision} is not the current one (current: {task.current_revision})",
            error_code=ErrorCode.STALE_REVISION,
            extra={"current_revision": task.current_revision},
        )
    paths = checked_edit(previous["subject"], subject, task.editable)
    assert isinstance(subject, dict)  # checked_edit refuses anything else
    limit = ctx.settings.max_revisions_per_task
    if revision >= limit:
        raise Conflict(
            f"task {task.id} has {revision} revisions, the most a task may have",
            error_code=ErrorCode.REVISION_LIMIT,
            extra={"limit": limit},
        )
    headline = rebind(task.headline, subject, revision + 1)
    words = None
    if headline is not None:
        words = search_text(
            task.entity_type, task.entity_id, task.reason_code, task.summary, headline
        )
    return Edit(
        subject=subject,
        digest=json_digest(subject),
        revision=revision + 1,
        source_revisions=list(previous["source_revisions"]),
        changed_paths=paths,
        headline=headline,
        search_text=words,
    )
