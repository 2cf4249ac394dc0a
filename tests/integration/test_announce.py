"""Cross-process change notifications (store/runtime/announce.py) and the SQLite writer's turn.

Commits notify nobody inside their transaction; each process announces the tasks it
committed, in batches. These tests check that another process's listener hears every
task (also past one notification's payload limit), that a database which accepts
connections but never answers cannot hold a shutdown, and that a SQLite writer waiting
for its turn in the process gets the busy timeout's error, not an endless wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from signoff.settings import Settings
from signoff.store.runtime import announce
from signoff.store.runtime.announce import IDS_PER_NOTIFICATION, notify_sql, parse_payload
from signoff.store.runtime.availability import database_unavailable
from signoff.store.runtime.database import Database, create_engine
from signoff.store.runtime.migrate import upgrade


def test_a_batch_is_split_below_the_payload_limit() -> None:
    ids = [uuid.uuid4() for _ in range(IDS_PER_NOTIFICATION * 2 + 5)]
    sql = notify_sql(ids)
    payloads = [part.split(", '", 1)[1].rstrip("'") for part in sql.split("; ") if "NOTIFY" in part]
    assert len(payloads) == 3
    assert all(len(p.encode()) < 8000 for p in payloads)
    assert [t for p in payloads for t in parse_payload(p)] == ids
    assert parse_payload("") == []
    assert parse_payload("not-a-uuid," + str(ids[0])) == [ids[0]]


def test_a_busy_process_sends_a_batch_at_most_once_a_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What commits while a batch is being sent goes in the next batch; a batch starts at
    least a window after the one before (also when the sender had stopped in between);
    a process that went quiet for a window sends its next change at once."""
    first, second, third, later, quiet = (uuid.uuid4() for _ in range(5))
    sent: list[str] = []
    waits: list[float] = []
    now = [100.0]  # the announcer's clock, moved by the test and by its waits only
    real_sleep = asyncio.sleep

    async def wait(seconds: float) -> None:
        waits.append(seconds)
        now[0] += seconds
        await real_sleep(0)

    monkeypatch.setattr(announce.asyncio, "sleep", wait)

    async def run() -> None:
        announcer: announce.Announcer

        async def send(sql: str) -> None:
            sent.append(sql)
            now[0] += 0.001  # a batch takes a millisecond
            if len(sent) == 1:  # two more commits while the first batch is on its way
                announcer.announce([second])
                announcer.announce([third])

        announcer = announce.Announcer(send, clock=lambda: now[0])
        announcer.announce([first])
        await announcer.drain()
        assert [parse_payload(s.split("'")[1]) for s in sent] == [[first], [second, third]]
        # The second batch waits for the rest of the window the first one started.
        assert waits == [pytest.approx(announce.COALESCE_SECONDS - 0.001)]
        now[0] += 0.002
        announcer.announce([later])  # soon after a batch: waits for the window too
        await announcer.drain()
        assert parse_payload(sent[-1].split("'")[1]) == [later]
        assert waits[1] == pytest.approx(announce.COALESCE_SECONDS - 0.003)
        now[0] += announce.COALESCE_SECONDS  # quiet for a window
        announcer.announce([quiet])
        await announcer.drain()
        assert parse_payload(sent[-1].split("'")[1]) == [quiet]
        assert len(waits) == 2  # sent at once

    asyncio.run(run())


@pytest.mark.postgres
def test_another_process_hears_every_committed_task(postgres_database: str) -> None:
    settings = Settings(database_url=postgres_database)
    tasks = [uuid.uuid4() for _ in range(IDS_PER_NOTIFICATION + 50)]

    async def run() -> None:
        writer = Database(create_engine(settings))
        other = Database(create_engine(settings))  # another process's hub, by its own LISTEN
        try:
            await other.changes.start()
            assert other.changes.listener is not None
            assert other.changes.listener.listening.is_set()
            with contextlib.ExitStack() as watching:
                events = [watching.enter_context(other.changes.watch(t)) for t in tasks]
                writer.after_commit(tasks[:1], wrote_outbox=True)
                writer.after_commit(tasks[1:], wrote_outbox=True)  # coalesced with the first
                await asyncio.wait_for(
                    asyncio.gather(*(event.wait() for event in events)), timeout=20
                )
            assert writer.announcer is not None
            # The others may hear a batch before its sender has counted it: let it finish.
            await writer.announcer.drain()
            assert 1 <= writer.announcer.sent <= 2
        finally:
            await writer.dispose()
            await other.dispose()

    asyncio.run(run())


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP port that accepts connections and never says a word (a database host cut
    off mid-way, as the network sees it)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join(timeout=5)
    for conn in accepted:
        conn.close()
    listener.close()


def test_a_silent_database_cannot_hold_a_shutdown(silent_server: int) -> None:
    settings = Settings(database_url=f"postgresql://postgres@127.0.0.1:{silent_server}/x")

    async def run() -> None:
        database = Database(create_engine(settings))
        assert database.announcer is not None
        database.announcer.announce([uuid.uuid4()])
        # asyncpg alone would wait 60 s to connect; the announcer gives up long before.
        await asyncio.wait_for(database.dispose(), timeout=20)

    asyncio.run(run())


def test_a_sqlite_writer_waits_for_its_turn_at_most_the_busy_timeout(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 's.db'}", sqlite_busy_timeout_ms=200)

    async def run() -> None:
        database = Database(create_engine(settings))
        await upgrade(database.engine)
        try:
            await database._sqlite_writer.acquire()  # another writer of this process
            with pytest.raises(sqlite3.OperationalError) as refused:
                async with database.transaction():
                    pass
            assert database_unavailable(refused.value)  # answered 503 ERR_NOT_READY
            with pytest.raises(sqlite3.OperationalError):
                await database.sqlite_script(lambda connection: None)
            database._sqlite_writer.release()
            async with database.transaction() as uow:  # the turn is free again
                await uow.commit()
        finally:
            await database.dispose()

    asyncio.run(run())
