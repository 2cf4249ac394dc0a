"""``client.execution(...)``: pass the gate for what is about to run, hold the execution
lease while it runs, and report every action."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any

from signoff.client import _execute_ops as ops
from signoff.client._errors import ApiError, ConnectionFailed, SignoffError
from signoff.client._models import Execution, Task
from signoff.client._ops import Op

if TYPE_CHECKING:
    from signoff.client._transport import AsyncRunner, SyncRunner

__all__ = ["AsyncExecutionRun", "ExecutionRun"]

MIN_RENEW_INTERVAL = 0.2


class _RunState:
    def __init__(
        self,
        *,
        task_id: str,
        subject: Mapping[str, Any],
        operation_id: str,
        wait_for_lease: float | None,
    ) -> None:
        self.task_id = task_id
        self.subject = subject
        self.operation_id = operation_id
        self.wait_for_lease = wait_for_lease
        self.execution: Execution | None = None
        self.task: Task | None = None
        #: The digest of ``subject``, computed here: the gate compared it with the approval.
        self.digest = ""
        #: Set when a renewal found the lease taken over: stop, another executor runs.
        self.lease_lost: SignoffError | None = None
        self._reported: set[str] = set()

    @property
    def token(self) -> str | None:
        return self.execution.execution_token if self.execution else None

    @property
    def revision(self) -> int | None:
        return self.execution.revision if self.execution else None

    @property
    def actions(self) -> list[str]:
        return [a.id for a in self.execution.actions] if self.execution else []

    @property
    def pending(self) -> list[str]:
        """Actions still to run: every one not completed (a failed one may be retried).
        Empty when this operation already completed: its stored outcome is returned."""
        if self.execution is None:
            return []
        return [a.id for a in self.execution.actions if a.status != "COMPLETED"]

    @property
    def completed(self) -> bool:
        return self.execution is not None and self.execution.execution_status == "COMPLETED"

    def _granted(self, result: tuple[Execution, Task, str]) -> None:
        self.execution, self.task, self.digest = result

    def _renew_interval(self) -> float | None:
        execution = self.execution
        if execution is None or not execution.execution_token:
            return None
        expires = execution.execution_lease_expires_at
        if expires is None:
            return None
        # What is left of the lease, by our clock and by the server's (the grant time may be
        # the first grant's, before a takeover): the shorter one, so renewals come in time.
        left = [(expires - datetime.now(UTC)).total_seconds()]
        if execution.granted_at is not None:
            left.append((expires - execution.granted_at).total_seconds())
        positive = [seconds for seconds in left if seconds > 0]
        return max(MIN_RENEW_INTERVAL, min(positive, default=1.0) / 3)

    def _unreported(self) -> list[str]:
        return [a for a in self.pending if a not in self._reported]

    def _finish_op(self, action_id: str, *, succeeded: bool, result: Any) -> Op[Execution]:
        self._reported.add(action_id)
        return ops.finish_action(
            self.task_id,
            action_id,
            succeeded=succeeded,
            operation_id=self.operation_id,
            result=result,
            token=self.token,
        )

    def _after_report(self, execution: Execution) -> Execution:
        assert self.execution is not None
        # Reports answer without the token; keep ours.
        self.execution = execution.model_copy(
            update={
                "execution_token": self.execution.execution_token,
                "execution_lease_expires_at": self.execution.execution_lease_expires_at,
            }
        )
        return execution


def _error_result(error: BaseException) -> dict[str, str]:
    return {"error": f"{type(error).__name__}: {error}"[:2000]}


class ExecutionRun(_RunState):
    """What ``with client.execution(...) as run:`` gives: ``run.pending`` lists the actions to
    run; ``run.complete(action_id, result)`` / ``run.fail(action_id, error)`` report each.
    Leaving the block completes the actions not reported; an exception fails them and
    propagates. The execution lease is renewed in the background meanwhile."""

    def __init__(self, runner: SyncRunner, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._runner = runner
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def complete(self, action_id: str = "execute", result: Any = None) -> Execution:
        op = self._finish_op(action_id, succeeded=True, result=result)
        return self._after_report(self._runner.run(op))

    def fail(self, action_id: str = "execute", error: Any = None) -> Execution:
        op = self._finish_op(action_id, succeeded=False, result=error)
        return self._after_report(self._runner.run(op))

    def __enter__(self) -> ExecutionRun:
        self._granted(
            self._runner.run(
                ops.execute(
                    self.task_id,
                    subject=self.subject,
                    operation_id=self.operation_id,
                    wait_for_lease=self.wait_for_lease,
                )
            )
        )
        interval = self._renew_interval()
        if interval is not None and self.pending:
            self._renewer = threading.Thread(
                target=self._renew, args=(interval,), name="signoff-execution-renew", daemon=True
            )
            self._renewer.start()
        return self

    def _renew(self, interval: float) -> None:
        token = self.token
        assert token is not None
        while not self._stop.wait(interval):
            try:
                self._runner.run(ops.renew_execution(self.task_id, token))
            except ConnectionFailed:
                continue
            except ApiError as error:
                self.lease_lost = error
                return

    def __exit__(
        self,
        error_type: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        if error is None:
            for action_id in self._unreported():
                self.complete(action_id)
        elif isinstance(error, Exception):
            for action_id in self._unreported():
                with contextlib.suppress(SignoffError):
                    self.fail(action_id, _error_result(error))


class AsyncExecutionRun(_RunState):
    """The ``async with`` twin of :class:`ExecutionRun`."""

    def __init__(self, runner: AsyncRunner, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._runner = runner
        self._renewer: asyncio.Task[None] | None = None

    async def complete(self, action_id: str = "execute", result: Any = None) -> Execution:
        op = self._finish_op(action_id, succeeded=True, result=result)
        return self._after_report(await self._runner.run(op))

    async def fail(self, action_id: str = "execute", error: Any = None) -> Execution:
        op = self._finish_op(action_id, succeeded=False, result=error)
        return self._after_report(await self._runner.run(op))

    async def __aenter__(self) -> AsyncExecutionRun:
        self._granted(
            await self._runner.run(
                ops.execute(
                    self.task_id,
                    subject=self.subject,
                    operation_id=self.operation_id,
                    wait_for_lease=self.wait_for_lease,
                )
            )
        )
        interval = self._renew_interval()
        if interval is not None and self.pending:
            self._renewer = asyncio.create_task(self._renew(interval))
        return self

    async def _renew(self, interval: float) -> None:
        token = self.token
        assert token is not None
        while True:
            await asyncio.sleep(interval)
            try:
                await self._runner.run(ops.renew_execution(self.task_id, token))
            except ConnectionFailed:
                continue
            except ApiError as error:
                self.lease_lost = error
                return

    async def __aexit__(
        self,
        error_type: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        if error is None:
            for action_id in self._unreported():
                await self.complete(action_id)
        elif isinstance(error, Exception):
            for action_id in self._unreported():
                with contextlib.suppress(SignoffError):
                    await self.fail(action_id, _error_result(error))
