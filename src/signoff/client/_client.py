"""``Signoff``, the blocking client. ``AsyncSignoff`` (:mod:`signoff.client._async_client`)
has the same methods and the same behaviour: both run the operations in
:mod:`signoff.client._ops`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any

import httpx

from signoff.client import _ops as ops
from signoff.client import _wait_ops
from signoff.client._catchup import EventsSince, events_since
from signoff.client._execution import ExecutionRun
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
from signoff.client._transport import SyncRunner

__all__ = ["Signoff"]

DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRIES = 3
DEFAULT_BACKOFF = 0.5
#: How long ``execution`` waits for another executor's outcome or the lapse of its lease:
#: ``None``, as long as that lease lives (renewals included), never shorter than it.
DEFAULT_WAIT_FOR_LEASE: float | None = None


class Signoff:
    """A blocking client for one API key.

    ::

        client = Signoff("http://127.0.0.1:8000", api_key)
        task = client.escalate(key="order-42", ...)
        task = client.wait_for_decision(task.id, timeout=3600)

    ``transport=`` takes any ``httpx.BaseTransport`` (``httpx.MockTransport`` in tests).
    Connection errors and 429/5xx answers are retried ``retries`` times with exponential
    backoff (honouring ``Retry-After``) for requests the server treats idempotently.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        backoff: float = DEFAULT_BACKOFF,
        transport: httpx.BaseTransport | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self._identity: dict[str, str] = {}
        self._runner = SyncRunner(
            base_url,
            api_key,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            transport=transport,
            headers=headers,
        )

    def close(self) -> None:
        self._runner.close()

    def __enter__(self) -> Signoff:
        return self

    def __exit__(
        self,
        error_type: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # --- producing ----------------------------------------------------------------------
    def escalate(
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
        """Escalate to human review, idempotently by ``key``.

        The escalation id and idempotency key derive from ``key``, so the same key never
        creates a second task (a retried request replays; a re-run with fresh timestamps
        returns the task the key created). ``on_conflict="adopt"`` returns the entity's
        active task instead of raising :class:`TaskConflict`.

        ``timeout_seconds``: nobody decided within it, the task is rejected (``on_timeout``
        ``"reject"``, a normal ``REJECTED`` decision), expires (``"expire"``) or is
        reassigned to ``timeout_group`` (``"escalate"``). It never approves.
        """
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
        return self._runner.run(
            ops.escalate(
                body,
                key=key,
                identity=self._identity,
                on_conflict=on_conflict,
                traceparent=traceparent,
            )
        )

    def get_task(self, task_id: str | Task) -> Task:
        return self._runner.run(ops.get_task(task_id))

    def wait_for_decision(
        self, task_id: str | Task, *, timeout: float, revision: int | None = None
    ) -> Task:
        """Block until the task is decided (``status`` RESOLVED, ``decision`` set) or can no
        longer be (EXPIRED, CANCELLED), long-polling the server. With ``revision``, only a
        decision about that revision counts. Raises :class:`DecisionTimeout`."""
        return self._runner.run(
            _wait_ops.wait_for_decision(task_id, timeout=timeout, revision=revision)
        )

    def revise(
        self,
        task_id: str | Task,
        subject: Mapping[str, Any],
        *,
        expected_revision: int,
        source_revisions: Sequence[str] | None = None,
    ) -> Task:
        """Store a new revision of the subject (``If-Match`` = ``expected_revision``)."""
        return self._runner.run(
            ops.revise(
                task_id,
                subject,
                expected_revision=expected_revision,
                source_revisions=source_revisions,
            )
        )

    def cancel(self, task_id: str | Task) -> Task:
        return self._runner.run(ops.cancel(task_id))

    def list_tasks(
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
    ) -> Iterator[Task]:
        """Every matching task, oldest first, fetching pages as the iteration goes;
        ``awaiting_my_vote``: only the tasks awaiting the caller's vote."""
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
            page = self._runner.run(ops.list_page(filters, cursor, page_size))
            yield from page.items
            if not page.next_cursor or not page.items:
                return
            cursor = page.next_cursor

    def task_events(self, task_id: str | Task) -> list[AuditEvent]:
        return self._runner.run(ops.task_events(task_id))

    def receipts(self, task_id: str | Task) -> list[TaskReceipt]:
        """The task's trail as signed receipts, oldest first, each with its chain link;
        check one with :func:`signoff.client.verify_receipt` and :meth:`signing_keys`."""
        return self._runner.run(ops.receipts(task_id))

    def signing_keys(self) -> dict[str, Any]:
        """The server's public keys (the JWK Set receipts verify against)."""
        return self._runner.run(ops.signing_keys())

    # --- reading what a person reviews ---------------------------------------------------
    def revisions(self, task_id: str | Task) -> list[Revision]:
        """Every revision, oldest first: number, digest, author, time (the subject itself
        through :meth:`get_revision`)."""
        return self._runner.run(ops.revisions(task_id))

    def approved_subject(self, task: Task) -> dict[str, Any]:
        """The subject the task's approval covers: as the producer sent it, or as a
        reviewer edited it (``task.edited``). Run exactly this, and name it to the
        execution gate."""
        if task.approved_revision is None:
            raise ValueError(f"task {task.id} has no approval")
        return dict((self.get_revision(task, task.approved_revision)).subject or {})

    def get_revision(self, task_id: str | Task, revision: int | None = None) -> Revision:
        """One revision with its ``subject`` (the current one when ``revision`` is None)."""
        return self._runner.run(ops.get_revision(task_id, revision))

    def diff(self, task_id: str | Task, *, from_revision: int, to_revision: int) -> Diff:
        """What changed between two revisions (``added``, ``removed``, ``changed``, by path)."""
        return self._runner.run(ops.diff(task_id, from_revision, to_revision))

    def execution(
        self,
        task_id: str | Task,
        *,
        subject: Mapping[str, Any],
        operation_id: str,
        wait_for_lease: float | None = DEFAULT_WAIT_FOR_LEASE,
    ) -> ExecutionRun:
        """``with client.execution(task_id, subject=what_runs, operation_id=...) as run:``

        The digest of ``subject`` is computed here, from what is about to run; the gate
        compares it with the approved one and raises :class:`ApprovalNotValid` with the
        reason. Use ``operation_id`` as the idempotency key of your side effect."""
        return ExecutionRun(
            self._runner,
            task_id=task_id.id if isinstance(task_id, Task) else str(task_id),
            subject=subject,
            operation_id=operation_id,
            wait_for_lease=wait_for_lease,
        )

    # --- reviewing ----------------------------------------------------------------------
    def claim(self, task_id: str | Task) -> Task:
        """Claim under a new lease; the answer carries ``lease_token``."""
        return self._runner.run(ops.claim(task_id))

    def claim_next(
        self, *, entity_type: str | None = None, reason_code: str | None = None
    ) -> Task | None:
        return self._runner.run(ops.claim_next(entity_type, reason_code))

    def renew(self, task: str | Task, lease_token: str | None = None) -> Task:
        return self._runner.run(ops.renew(task, lease_token))

    def release(self, task: str | Task, lease_token: str | None = None) -> Task:
        return self._runner.run(ops.release(task, lease_token))

    def resolve(
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
        """Record a decision. Pass the claimed :class:`Task` to resolve the revision it shows
        under its lease, or a task id with ``lease_token`` (and ``revision``/``digest``).
        ``fields``: with ``REVISION_REQUESTED``, the subject's fields that should change,
        ``[{"path": "/title", "reason": "..."}]``. ``subject``: with
        ``APPROVED_WITH_EDITS``, the subject as edited (only its ``editable`` paths)."""
        return self._runner.run(
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

    def vote(
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
        return self._runner.run(
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

    def events_since(self, cursor: str | None, *, page_size: int = 100) -> EventsSince:
        """Every event of this producer's tasks after ``cursor`` (``None``: from the first),
        reading page after page, and the cursor to pass next time. Call it at start, before
        relying on webhooks, to catch up on what happened while the process was away.

        Raises :class:`CursorExpired` when retention removed events after ``cursor`` (or,
        with ``None``, any of this producer's): reconcile by reading the tasks, then call
        again with its ``oldest_cursor``."""
        return self._runner.run(events_since(cursor, page_size))

    # --- webhooks -----------------------------------------------------------------------
    def create_webhook_endpoint(
        self,
        url: str,
        *,
        event_types: Sequence[str] | None = None,
        entity_types: Sequence[str] | None = None,
        description: str | None = None,
    ) -> WebhookEndpoint:
        """Register an endpoint; the answer's ``secret`` is shown once."""
        return self._runner.run(
            ops.create_webhook_endpoint(
                url, event_types=event_types, entity_types=entity_types, description=description
            )
        )

    def delete_webhook_endpoint(self, endpoint_id: str) -> None:
        self._runner.run(ops.delete_webhook_endpoint(endpoint_id))
