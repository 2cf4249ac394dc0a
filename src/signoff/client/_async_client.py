"""``AsyncSignoff``, the asyncio client: the methods of ``Signoff``
(:mod:`signoff.client._client`) with the same behaviour, awaited."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any

import httpx

from signoff.client import _ops as ops
from signoff.client import _wait_ops
from signoff.client._catchup import EventsSince, events_since
from signoff.client._client import (
    DEFAULT_BACKOFF,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT,
    DEFAULT_WAIT_FOR_LEASE,
)
from signoff.client._execution import AsyncExecutionRun
from signoff.client._models import (
    AuditEvent,
    Decision,
    Diff,
    Revision,
    Task,
    TaskReceipt,
    TaskStatus,
    WebhookEndpoint,
)
from signoff.client._ops import OnConflict
from signoff.client._transport import AsyncRunner

__all__ = ["AsyncSignoff"]


class AsyncSignoff:
    """The asyncio twin of :class:`Signoff`: the same methods, awaited
    (``list_tasks`` is an async iterator, ``execution`` an async context manager)."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        backoff: float = DEFAULT_BACKOFF,
        transport: httpx.AsyncBaseTransport | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self._identity: dict[str, str] = {}
        self._runner = AsyncRunner(
            base_url,
            api_key,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            transport=transport,
            headers=headers,
        )

    async def close(self) -> None:
        await self._runner.close()

    async def __aenter__(self) -> AsyncSignoff:
        return self

    async def __aexit__(
        self,
        error_type: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def escalate(
        self,
        *,
        key: str,
        entity_type: str,
        entity_id: str,
        reason_code: str,
        attempted_actions: Sequence[Mapping[str, Any]],
        evaluator_verdict: Mapping[str, Any],
        input_snapshot: Mapping[str, Any],
        trace_id: str,
        subject: Mapping[str, Any] | None = None,
        source_revisions: Sequence[str] | None = None,
        material_paths: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        deadline: datetime | str | None = None,
        assigned_group: str | None = None,
        summary: Mapping[str, Any] | None = None,
        policy: str | None = None,
        approval_ttl_seconds: int | None = None,
        timeout_seconds: int | None = None,
        on_timeout: str = "reject",
        timeout_group: str | None = None,
        approval_rule: Mapping[str, Any] | str | None = None,
        requested_by: str | None = None,
        headline: Mapping[str, Any] | None = None,
        editable: Sequence[str] | None = None,
        traceparent: str | None = None,
        on_conflict: OnConflict = "raise",
    ) -> Task:
        """See :meth:`Signoff.escalate`."""
        body = ops.escalation_body(
            entity_type=entity_type,
            entity_id=entity_id,
            reason_code=reason_code,
            attempted_actions=attempted_actions,
            evaluator_verdict=evaluator_verdict,
            input_snapshot=input_snapshot,
            trace_id=trace_id,
            subject=subject,
            source_revisions=source_revisions,
            material_paths=material_paths,
            metadata=metadata,
            deadline=deadline,
            assigned_group=assigned_group,
            summary=summary,
            policy=policy,
            approval_ttl_seconds=approval_ttl_seconds,
            timeout_seconds=timeout_seconds,
            on_timeout=on_timeout,
            timeout_group=timeout_group,
            approval_rule=approval_rule,
            requested_by=requested_by,
            headline=headline,
            editable=editable,
        )
        return await self._runner.run(
            ops.escalate(
                body,
                key=key,
                identity=self._identity,
                on_conflict=on_conflict,
                traceparent=traceparent,
            )
        )

    async def get_task(self, task_id: str | Task) -> Task:
        return await self._runner.run(ops.get_task(task_id))

    async def wait_for_decision(
        self,
        task_id: str | Task,
        *,
        timeout: float,  # noqa: ASYNC109 (the same signature as Signoff's)
        revision: int | None = None,
    ) -> Task:
        """See :meth:`Signoff.wait_for_decision`."""
        return await self._runner.run(
            _wait_ops.wait_for_decision(task_id, timeout=timeout, revision=revision)
        )

    async def revise(
        self,
        task_id: str | Task,
        subject: Mapping[str, Any],
        *,
        expected_revision: int,
        source_revisions: Sequence[str] | None = None,
    ) -> Task:
        return await self._runner.run(
            ops.revise(
                task_id,
                subject,
                expected_revision=expected_revision,
                source_revisions=source_revisions,
            )
        )

    async def cancel(self, task_id: str | Task) -> Task:
        return await self._runner.run(ops.cancel(task_id))

    async def list_tasks(
        self,
        *,
        status: TaskStatus | None = None,
        entity_type: str | None = None,
        entity_id: str | None = None,
        reason_code: str | None = None,
        execution_status: str | None = None,
        claimed_by: str | None = None,
        assigned_group: str | None = None,
        awaiting_my_vote: bool = False,
        page_size: int = 50,
    ) -> AsyncIterator[Task]:
        filters = dict(
            status=status,
            entity_type=entity_type,
            entity_id=entity_id,
            reason_code=reason_code,
            execution_status=execution_status,
            claimed_by=claimed_by,
            assigned_group=assigned_group,
            awaiting_my_vote=True if awaiting_my_vote else None,
        )
        cursor: str | None = None
        while True:
            page = await self._runner.run(ops.list_page(filters, cursor, page_size))
            for task in page.items:
                yield task
            if not page.next_cursor or not page.items:
                return
            cursor = page.next_cursor

    async def task_events(self, task_id: str | Task) -> list[AuditEvent]:
        return await self._runner.run(ops.task_events(task_id))

    async def receipts(self, task_id: str | Task) -> list[TaskReceipt]:
        """The task's trail as signed receipts, oldest first, each with its chain link;
        check one with :func:`signoff.client.verify_receipt` and :meth:`signing_keys`."""
        return await self._runner.run(ops.receipts(task_id))

    async def signing_keys(self) -> dict[str, Any]:
        """The server's public keys (the JWK Set receipts verify against)."""
        return await self._runner.run(ops.signing_keys())

    # --- reading what a person reviews ---------------------------------------------------
    async def revisions(self, task_id: str | Task) -> list[Revision]:
        """Every revision, oldest first: number, digest, author, time (the subject itself
        through :meth:`get_revision`)."""
        return await self._runner.run(ops.revisions(task_id))

    async def approved_subject(self, task: Task) -> dict[str, Any]:
        """The subject the task's approval covers: as the producer sent it, or as a
        reviewer edited it (``task.edited``). Run exactly this, and name it to the
        execution gate."""
        if task.approved_revision is None:
            raise ValueError(f"task {task.id} has no approval")
        return dict((await self.get_revision(task, task.approved_revision)).subject or {})

    async def get_revision(self, task_id: str | Task, revision: int | None = None) -> Revision:
        """One revision with its ``subject`` (the current one when ``revision`` is None)."""
        return await self._runner.run(ops.get_revision(task_id, revision))

    async def diff(self, task_id: str | Task, *, from_revision: int, to_revision: int) -> Diff:
        """What changed between two revisions (``added``, ``removed``, ``changed``, by path)."""
        return await self._runner.run(ops.diff(task_id, from_revision, to_revision))

    def execution(
        self,
        task_id: str | Task,
        *,
        subject: Mapping[str, Any],
        operation_id: str,
        wait_for_lease: float | None = DEFAULT_WAIT_FOR_LEASE,
    ) -> AsyncExecutionRun:
        """``async with client.execution(...) as run:`` — see :meth:`Signoff.execution`."""
        return AsyncExecutionRun(
            self._runner,
            task_id=task_id.id if isinstance(task_id, Task) else str(task_id),
            subject=subject,
            operation_id=operation_id,
            wait_for_lease=wait_for_lease,
        )

    async def claim(self, task_id: str | Task) -> Task:
        return await self._runner.run(ops.claim(task_id))

    async def claim_next(
        self, *, entity_type: str | None = None, reason_code: str | None = None
    ) -> Task | None:
        return await self._runner.run(ops.claim_next(entity_type, reason_code))

    async def renew(self, task: str | Task, lease_token: str | None = None) -> Task:
        return await self._runner.run(ops.renew(task, lease_token))

    async def release(self, task: str | Task, lease_token: str | None = None) -> Task:
        return await self._runner.run(ops.release(task, lease_token))

    async def resolve(
        self,
        task: str | Task,
        *,
        decision: Decision,
        lease_token: str | None = None,
        notes: str | None = None,
        resolution_payload: Mapping[str, Any] | None = None,
        revision: int | None = None,
        digest: str | None = None,
        fields: Sequence[Mapping[str, str]] | None = None,
        subject: Mapping[str, Any] | None = None,
        remember_seconds: int | None = None,
    ) -> Task:
        return await self._runner.run(
            ops.resolve(
                task,
                lease_token=lease_token,
                decision=decision,
                notes=notes,
                resolution_payload=resolution_payload,
                revision=revision,
                digest=digest,
                fields=fields,
                subject=subject,
                remember_seconds=remember_seconds,
            )
        )

    async def vote(
        self,
        task: str | Task,
        *,
        decision: Decision,
        notes: str | None = None,
        revision: int | None = None,
        digest: str | None = None,
        stage: int | None = None,
        subject: Mapping[str, Any] | None = None,
    ) -> Task:
        """Vote on a task with an approval rule: no lease is taken (several people vote at
        once). Pass the :class:`Task` you reviewed to vote on the revision it shows; name
        the ``stage`` (from 1) to vote at a later stage after voting at an earlier one.
        The answer's ``vote`` says whether the vote was recorded and counted."""
        return await self._runner.run(
            ops.vote(
                task,
                decision=decision,
                notes=notes,
                revision=revision,
                digest=digest,
                stage=stage,
                subject=subject,
            )
        )

    async def events_since(self, cursor: str | None, *, page_size: int = 100) -> EventsSince:
        """Every event of this producer's tasks after ``cursor`` (``None``: from the first),
        reading page after page, and the cursor to pass next time. Call it at start, before
        relying on webhooks, to catch up on what happened while the process was away.

        Raises :class:`CursorExpired` when retention removed events after ``cursor`` (or,
        with ``None``, any of this producer's): reconcile by reading the tasks, then call
        again with its ``oldest_cursor``."""
        return await self._runner.run(events_since(cursor, page_size))

    async def create_webhook_endpoint(
        self,
        url: str,
        *,
        event_types: Sequence[str] | None = None,
        entity_types: Sequence[str] | None = None,
        description: str | None = None,
    ) -> WebhookEndpoint:
        return await self._runner.run(
            ops.create_webhook_endpoint(
                url, event_types=event_types, entity_types=entity_types, description=description
            )
        )

    async def delete_webhook_endpoint(self, endpoint_id: str) -> None:
        await self._runner.run(ops.delete_webhook_endpoint(endpoint_id))
