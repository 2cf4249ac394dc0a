"""Group commit of the dispatcher's attempt records.

Every finished attempt must be recorded (the delivery's new state, the attempt itself,
the endpoint's failure streak) before its next event may go out. Recorded one by one,
each attempt costs a transaction and a pooled connection; with many attempts in flight
that became most of the dispatcher's work. Here the first finished attempt is written at
once, and the attempts that finish while that write runs go together in the next one: a
single attempt waits no longer than before, a busy dispatcher writes far fewer
transactions, and the number of connections it holds stays at one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from sqlalchemy.exc import IntegrityError

from signoff.domain.webhooks import ClaimedDelivery
from signoff.services.delivery import AttemptRecord

#: Attempts written in one transaction at most.
GROUP_LIMIT = 200

Item = tuple[ClaimedDelivery, AttemptRecord]
Write = Callable[[Sequence[Item]], Awaitable[list[bool]]]


class Recorder:
    """Queues attempt records and writes them in groups with ``write`` (one transaction
    per call, returning for each attempt whether the lease was still held)."""

    def __init__(self, write: Write) -> None:
        self._write = write
        self._queued: list[tuple[ClaimedDelivery, AttemptRecord, asyncio.Future[bool]]] = []
        self._writing: asyncio.Task[None] | None = None

    async def record(self, delivery: ClaimedDelivery, record: AttemptRecord) -> bool:
        """Store one attempt; returns whether this dispatcher still held the delivery's
        lease. Raises what its write raised (IntegrityError: the endpoint was deleted)."""
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._queued.append((delivery, record, done))
        if self._writing is None:
            self._writing = asyncio.create_task(self._write_queued())
        return await done

    async def _write_queued(self) -> None:
        try:
            while self._queued:
                group, self._queued = self._queued[:GROUP_LIMIT], self._queued[GROUP_LIMIT:]
                await self._write_group(group)
        finally:
            self._writing = None

    async def _write_group(
        self, group: list[tuple[ClaimedDelivery, AttemptRecord, asyncio.Future[bool]]]
    ) -> None:
        try:
            held = await self._write([(delivery, record) for delivery, record, _ in group])
        except IntegrityError as exc:
            if len(group) == 1:
                _settle(group[0][2], error=exc)
                return
            # One attempt's endpoint was deleted meanwhile: the others must not fail with
            # it, so each is written on its own and only that one reports the error.
            for item in group:
                await self._write_group([item])
            return
        except Exception as exc:  # every waiter learns why its write failed
            for _, _, done in group:
                _settle(done, error=exc)
            return
        for (_, _, done), was_held in zip(group, held, strict=True):
            _settle(done, result=was_held)


def _settle(
    done: asyncio.Future[bool], *, result: bool = False, error: BaseException | None = None
) -> None:
    if done.done():  # its attempt was cancelled: nobody waits for the answer
        return
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(result)
