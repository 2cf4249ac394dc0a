"""``@requires_approval``: a function that runs only after a person approved this very call.

The call's arguments become the subject a reviewer sees; the decorator escalates, waits
for the decision, and runs the function through the execution gate — once, with the
arguments that were approved. A rejection, a revision request, an expiry or a timeout
raises instead, and the function does not run.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from signoff.client._digests import _plain, digest
from signoff.client._errors import ApiError, DecisionTimeout, SignoffError
from signoff.client._models import Task

if TYPE_CHECKING:
    from signoff.client._async_client import AsyncSignoff
    from signoff.client._client import Signoff

__all__ = [
    "ApprovalExpired",
    "NotApproved",
    "Rejected",
    "RevisionRequested",
    "arequires_approval",
    "requires_approval",
]

P = ParamSpec("P")
R = TypeVar("R")

#: Stored as the action's result: what the function returned (JSON-plain when it can be).
RETURNED = "returned"
#: How many times one call may be asked anew after its earlier tasks were cancelled.
MAX_ASKS = 100


class NotApproved(SignoffError):
    """The call was not approved, so the function did not run. ``task`` says why."""

    def __init__(self, message: str, *, task: Task) -> None:
        super().__init__(message)
        self.task = task


class Rejected(NotApproved):
    """A person rejected the call (``task.notes`` says why)."""


class RevisionRequested(NotApproved):
    """A person asked for other arguments (``task.notes`` says which)."""


class ApprovalExpired(NotApproved):
    """Nobody will decide: the task expired or was cancelled."""


def _subject(function: Callable[..., Any], args: Any, kwargs: Any) -> dict[str, Any]:
    bound = inspect.signature(function).bind(*args, **kwargs)
    bound.apply_defaults()
    try:
        arguments = _plain(dict(bound.arguments))
        digest(arguments)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"@requires_approval: the arguments of {function.__qualname__} must be JSON "
            f"values (str, numbers, bool, None, lists, dicts, datetimes): {error}"
        ) from error
    return {"function": f"{function.__module__}.{function.__qualname__}", "arguments": arguments}


#: The most arguments a decorator-made headline names (its key fields hold at most 6).
_HEADLINE_ARGUMENTS = 6


def _headline(function: Callable[..., Any], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """A headline from the function's name and its arguments' values (by JSON Pointer
    into the subject): "Run transfer funds: amount {/arguments/amount}, to {…}"."""
    names = [name for name in arguments if "~" not in name and "/" not in name]
    shown = names[:_HEADLINE_ARGUMENTS]
    words = function.__name__.replace("_", " ").strip() or function.__qualname__
    title = f"Run {words}"
    for index, name in enumerate(shown):
        part = f"{':' if index == 0 else ','} {name} {{/arguments/{name}}}"
        if len(title) + len(part) > 200:
            break
        title += part
    headline: dict[str, Any] = {"title": title[:200]}
    if len(shown) >= 2:
        headline["fields"] = [
            {"label": name[:60], "pointer": f"/arguments/{name}", "type": "text"} for name in shown
        ]
    return headline


class _Guard:
    """What both decorators share: the escalation for one call, and the verdict on it."""

    def __init__(
        self,
        *,
        reason: str,
        entity_type: str,
        timeout: float,
        attempted: Sequence[Mapping[str, Any]] | None,
        verdict: Mapping[str, Any] | None,
        assigned_group: str | None,
        timeout_seconds: int | None = None,
        on_timeout: str = "reject",
    ) -> None:
        self.timeout_seconds = timeout_seconds
        self.on_timeout = on_timeout
        self.reason = reason
        self.entity_type = entity_type
        self.timeout = timeout
        self.attempted = attempted
        self.verdict = verdict
        self.assigned_group = assigned_group

    def escalation(
        self, subject: dict[str, Any], headline: dict[str, Any], ask: int = 1
    ) -> dict[str, Any]:
        # The same call (same function, same arguments) is the same escalation: a re-run
        # after a crash finds its task and its execution again instead of asking twice.
        # ``ask`` > 1: the call's earlier tasks were cancelled, so it is asked anew.
        name = f"{subject['function']}:{digest(subject)[:32]}"
        key = f"guard:{name}" if ask == 1 else f"guard:{name}#{ask}"
        attempted = self.attempted or [
            {
                "action": f"call {subject['function']}",
                "executed_at": datetime.now(UTC),
                "result": "held until a person approves these arguments",
            }
        ]
        limit = {}
        if self.timeout_seconds is not None:
            limit = {"timeout_seconds": self.timeout_seconds, "on_timeout": self.on_timeout}
        return {
            **limit,
            "key": key,
            "entity_type": self.entity_type,
            "entity_id": name,
            "reason_code": self.reason,
            "attempted_actions": attempted,
            "evaluator_verdict": self.verdict or {"confidence_score": 0.0, "threshold": 1.0},
            "input_snapshot": subject["arguments"],
            "trace_id": f"guard-{digest(subject)[:16]}",
            "subject": subject,
            "assigned_group": self.assigned_group,
            "headline": headline,
        }

    @staticmethod
    def verdict_on(task: Task, subject: dict[str, Any]) -> None:
        """Raise unless ``task`` approves exactly ``subject``."""
        where = f"task {task.id}"
        if task.status in ("EXPIRED", "CANCELLED"):
            raise ApprovalExpired(f"{where} is {task.status}: nobody will decide", task=task)
        if task.decision == "REJECTED":
            raise Rejected(f"{where}: rejected ({task.notes or 'no notes'})", task=task)
        if task.decision == "REVISION_REQUESTED":
            raise RevisionRequested(
                f"{where}: a revision was requested ({task.notes or 'no notes'})",
                task=task,
            )
        # Approved as it is, or by a remembered approval of exactly it; a reviewer's edit
        # approves other arguments, which this call does not run.
        if not task.is_approved or task.approved_digest != digest(subject):
            raise NotApproved(f"{where} does not approve these arguments", task=task)


def _asked(
    client: Signoff, guard: _Guard, subject: dict[str, Any], headline: dict[str, Any]
) -> tuple[Task, dict[str, Any]]:
    """The call's live task (escalated now or before) and its escalation. A task that was
    cancelled (the caller gave up on it) is never reused: the call is asked anew."""
    for ask in range(1, MAX_ASKS + 1):
        escalation = guard.escalation(subject, headline, ask)
        task = client.escalate(**escalation)
        if task.status != "CANCELLED":
            break
    return task, escalation


async def _aasked(
    client: AsyncSignoff, guard: _Guard, subject: dict[str, Any], headline: dict[str, Any]
) -> tuple[Task, dict[str, Any]]:
    """:func:`_asked` with an :class:`AsyncSignoff`."""
    for ask in range(1, MAX_ASKS + 1):
        escalation = guard.escalation(subject, headline, ask)
        task = await client.escalate(**escalation)
        if task.status != "CANCELLED":
            break
    return task, escalation


GAVE_UP = (
    "the caller stopped waiting, so the task was cancelled: a later approval must not "
    "authorise a call nobody is waiting for (the same call again asks anew)"
)


def _stored(run: Any) -> Any:
    """What an earlier run of this very call returned (it completed: do not run again)."""
    for action in run.execution.actions if run.execution else ():
        if isinstance(action.result, dict) and RETURNED in action.result:
            return action.result[RETURNED]
    return None


def _result(value: Any) -> dict[str, Any]:
    try:
        plain = _plain(value)
        digest({"value": plain})
    except (TypeError, ValueError):
        return {RETURNED: None, "type": type(value).__name__}
    return {RETURNED: plain}


def requires_approval(
    client: Signoff,
    *,
    reason: str = "FUNCTION_CALL_REVIEW",
    entity_type: str = "function_call",
    timeout: float = 3600,
    attempted: Sequence[Mapping[str, Any]] | None = None,
    verdict: Mapping[str, Any] | None = None,
    assigned_group: str | None = None,
    timeout_seconds: int | None = None,
    on_timeout: str = "reject",
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a function that must not run before a person approves the call.

    Each call escalates its arguments (as JSON) with ``client`` (a :class:`Signoff`),
    waits up to ``timeout`` seconds for the decision, and on approval runs the function
    through the execution gate, exactly once, returning what it returns. The same call
    again (same arguments) finds the same task: after a crash it resumes the wait, and
    after a completed run it returns the stored result without running again (a value
    that is not JSON comes back as None). Raises :class:`Rejected`,
    :class:`RevisionRequested`, :class:`ApprovalExpired` or
    :class:`~signoff.client.DecisionTimeout`; the function then has not run.

    ``timeout_seconds`` is the producer's time limit on the server (``on_timeout``:
    ``reject``, ``expire`` or ``escalate``; never an approval). When the caller gives up
    locally — ``timeout`` runs out, or the wait is interrupted — the task is cancelled, so
    a later approval never authorises a call nobody re-reviewed; the same call again is
    asked anew.
    """
    guard = _Guard(
        reason=reason, entity_type=entity_type, timeout=timeout, attempted=attempted,
        verdict=verdict, assigned_group=assigned_group, timeout_seconds=timeout_seconds,
        on_timeout=on_timeout,
    )  # fmt: skip

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
            subject = _subject(function, args, kwargs)
            headline = _headline(function, subject["arguments"])
            task, escalation = _asked(client, guard, subject, headline)
            try:
                task = client.wait_for_decision(task.id, timeout=guard.timeout)
            except (DecisionTimeout, KeyboardInterrupt) as gave_up:
                try:
                    client.cancel(task.id)
                except ApiError:
                    pass  # decided or closed meanwhile: the same call again finds it
                else:
                    gave_up.add_note(GAVE_UP)
                raise
            guard.verdict_on(task, subject)
            with client.execution(task.id, subject=subject, operation_id=escalation["key"]) as run:
                if not run.pending:
                    return _stored(run)  # type: ignore[no-any-return]
                value = function(*args, **kwargs)
                run.complete("execute", _result(value))
                return value

        return guarded

    return decorate


def arequires_approval(
    client: AsyncSignoff,
    *,
    reason: str = "FUNCTION_CALL_REVIEW",
    entity_type: str = "function_call",
    timeout: float = 3600,
    attempted: Sequence[Mapping[str, Any]] | None = None,
    verdict: Mapping[str, Any] | None = None,
    assigned_group: str | None = None,
    timeout_seconds: int | None = None,
    on_timeout: str = "reject",
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """:func:`requires_approval` for ``async def`` functions, with an :class:`AsyncSignoff`."""
    guard = _Guard(
        reason=reason, entity_type=entity_type, timeout=timeout, attempted=attempted,
        verdict=verdict, assigned_group=assigned_group, timeout_seconds=timeout_seconds,
        on_timeout=on_timeout,
    )  # fmt: skip

    def decorate(function: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(function)
        async def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
            subject = _subject(function, args, kwargs)
            headline = _headline(function, subject["arguments"])
            task, escalation = await _aasked(client, guard, subject, headline)
            try:
                task = await client.wait_for_decision(task.id, timeout=guard.timeout)
            except (DecisionTimeout, asyncio.CancelledError) as gave_up:
                try:
                    await asyncio.shield(client.cancel(task.id))
                except ApiError:
                    pass  # decided or closed meanwhile: the same call again finds it
                else:
                    gave_up.add_note(GAVE_UP)
                raise
            guard.verdict_on(task, subject)
            async with client.execution(
                task.id, subject=subject, operation_id=escalation["key"]
            ) as run:
                if not run.pending:
                    return _stored(run)  # type: ignore[no-any-return]
                value = await function(*args, **kwargs)
                await run.complete("execute", _result(value))
                return value

        return guarded

    return decorate
