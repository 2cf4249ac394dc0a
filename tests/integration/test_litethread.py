"""The SQLite thread (signoff.store.runtime.litethread): scripts that wait together run in one
trip to the thread, each in its own transaction; a failing script undoes only itself; a
script whose caller gave up before its group started never runs; the writer turn is held
for the whole group."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from signoff.store.runtime.litethread import MAX_GROUP, LiteThread


def _connect(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("CREATE TABLE IF NOT EXISTS t (v TEXT PRIMARY KEY)")
    return connection


def _insert(value: str, *, fail: bool = False):  # type: ignore[no-untyped-def]
    def script(connection: sqlite3.Connection) -> str:
        connection.execute("BEGIN IMMEDIATE")
        try:
            connection.execute("INSERT INTO t (v) VALUES (?)", (value,))
            if fail:
                raise ValueError(f"refused {value}")
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        return value

    return script


def _stored(path: Path) -> set[str]:
    with sqlite3.connect(path) as connection:
        return {row[0] for row in connection.execute("SELECT v FROM t")}


class Turns:
    """A writer turn that counts how often it was taken, and says when it is asked for.

    A test holds ``lock``, queues its scripts and waits for ``asked``: the thread's
    runner, created by the first script, is scheduled after the callers already
    scheduled, so when it asks for the turn every one of them has queued its script."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.taken = 0
        self.asked = asyncio.Event()

    @asynccontextmanager
    async def __call__(self) -> AsyncIterator[None]:
        self.asked.set()
        async with self.lock:
            self.taken += 1
            yield


def test_waiting_scripts_share_one_trip_and_fail_alone(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    trips: list[str] = []

    async def run() -> list[object]:
        turns = Turns()
        lite = LiteThread(lambda: _connect(path), turns)
        await lite.run(_insert("warm"))  # the connection and table exist from here on
        turns.asked.clear()
        first_trips = turns.taken

        def counting(script):  # type: ignore[no-untyped-def]
            def wrapped(connection: sqlite3.Connection) -> object:
                trips.append(threading.current_thread().name)
                return script(connection)

            return wrapped

        # Hold the turn so that all of them queue, then let them go at once.
        async with turns.lock:
            calls = [
                asyncio.ensure_future(lite.run(counting(_insert(f"v{n}", fail=n == 3))))
                for n in range(6)
            ]
            await turns.asked.wait()
        answers = await asyncio.gather(*calls, return_exceptions=True)
        assert turns.taken - first_trips == 1, "six waiting scripts, one writer turn"
        await lite.close()
        return answers

    answers = asyncio.run(run())
    assert answers[:3] == ["v0", "v1", "v2"]
    assert answers[4:] == ["v4", "v5"]
    assert isinstance(answers[3], ValueError)
    assert _stored(path) == {"warm", "v0", "v1", "v2", "v4", "v5"}  # v3 alone undone
    assert len(set(trips)) == 1
    assert trips[0].startswith("signoff-sqlite")


def test_a_group_holds_at_most_max_group_scripts(tmp_path: Path) -> None:
    path = tmp_path / "g.db"

    async def run() -> int:
        turns = Turns()
        lite = LiteThread(lambda: _connect(path), turns)
        await lite.run(_insert("warm"))
        turns.asked.clear()
        before = turns.taken
        async with turns.lock:
            calls = [lite.run(_insert(f"v{n}")) for n in range(MAX_GROUP + 1)]
            running = asyncio.gather(*calls)
            await turns.asked.wait()
        await running
        trips = turns.taken - before
        await lite.close()
        return trips

    assert asyncio.run(run()) == 2
    assert len(_stored(path)) == MAX_GROUP + 2


def test_a_caller_cancelled_before_its_group_starts_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "c.db"

    async def run() -> None:
        turns = Turns()
        lite = LiteThread(lambda: _connect(path), turns)
        await lite.run(_insert("warm"))
        turns.asked.clear()
        async with turns.lock:
            kept = asyncio.ensure_future(lite.run(_insert("kept")))
            dropped = asyncio.ensure_future(lite.run(_insert("dropped")))
            await turns.asked.wait()
            dropped.cancel()
            await asyncio.gather(dropped, return_exceptions=True)  # its cancellation ran
        assert await kept == "kept"
        with pytest.raises(asyncio.CancelledError):
            await dropped
        await lite.close()

    asyncio.run(run())
    assert _stored(path) == {"warm", "kept"}


def test_a_turn_that_cannot_be_had_fails_the_whole_group(tmp_path: Path) -> None:
    path = tmp_path / "t.db"

    @asynccontextmanager
    async def refused() -> AsyncIterator[None]:
        raise sqlite3.OperationalError("database is locked")
        yield  # pragma: no cover

    async def run() -> list[object]:
        lite = LiteThread(lambda: _connect(path), refused)
        answers = await asyncio.gather(
            lite.run(_insert("a")), lite.run(_insert("b")), return_exceptions=True
        )
        await lite.close()
        return answers

    answers = asyncio.run(run())
    assert all(isinstance(a, sqlite3.OperationalError) for a in answers)
    assert not path.exists()  # no script ran: the connection was never even opened


def test_core_work_runs_in_the_thread_as_one_transaction(tmp_path: Path) -> None:
    """run_core drives the store's kind of function (``await conn.execute`` only) on a
    SQLAlchemy connection in the thread: committed when it returns, undone when it
    raises; one that awaits anything else is refused and undone."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import AsyncConnection

    path = tmp_path / "core.db"
    threads: list[str] = []

    async def insert(conn: AsyncConnection, value: str, *, then_fail: bool = False) -> int:
        threads.append(threading.current_thread().name)
        await conn.execute(text("INSERT INTO t (v) VALUES (:v)"), {"v": value})
        if then_fail:
            raise ValueError("undo")
        return int((await conn.execute(text("SELECT count(*) FROM t"))).scalar_one())

    async def sleeps(conn: AsyncConnection) -> None:
        await conn.execute(text("INSERT INTO t (v) VALUES ('slept')"))
        await asyncio.sleep(0)

    async def values(conn: AsyncConnection) -> list[str]:
        return [row[0] for row in (await conn.execute(text("SELECT v FROM t ORDER BY v")))]

    async def run() -> None:
        lite = LiteThread(lambda: _connect(path), Turns())
        assert await lite.run_core(lambda conn: insert(conn, "a")) == 1
        with pytest.raises(ValueError, match="undo"):
            await lite.run_core(lambda conn: insert(conn, "b", then_fail=True))
        with pytest.raises(RuntimeError, match="awaited something besides the database"):
            await lite.run_core(sleeps)
        assert await lite.run_core(values, write=False) == ["a"]
        await lite.close()

    asyncio.run(run())
    assert _stored(path) == {"a"}
    assert {name.split("_")[0] for name in threads} == {"signoff-sqlite"}
