"""W2's peers: **pgqueuer** and **procrastinate** running a job's whole life cycle
(enqueue → dequeue → ack/finish), what a team would otherwise build a review queue on.

    python -m bench.peers --seconds 6          # both, JSON on stdout

For each library, on a throw-away PostgreSQL database of its own (created with psql,
dropped after), with the library's schema set up by its own CLI (``pgq install``,
``procrastinate schema --apply``) and only its documented public async API:

* **enqueue/s**: 16 concurrent producers deferring one job per call for a short time
  (at most ``ENQUEUE_SECONDS``), counted from the calls that returned;
* **jobs/s**: after enough jobs are pre-enqueued (the library's batch API), 16 concurrent
  workers dequeue each job, run a no-op handler and ack it; completions are counted in
  the library's own job table at the start and at the end of a ``seconds`` window that
  opens after a short warm-up, so start-up and shutdown are left out. pgqueuer: 16
  QueueManagers, one connection each, dequeue batch 10 (its default); procrastinate: 16
  workers (``concurrency=1`` each) on one App's pool. Either way 16 dequeue loops, as
  Signoff's W2 has 16 reviewers and pgbench 16 clients; at most 16 + 2 connections.

The payload is Signoff's: ``diagnostic_bundle`` of tests/data/example-escalation.json
(JSON bytes for pgqueuer, a JSON task argument for procrastinate). Each library runs on
the event loop its own CLI runs it on (``pgq run``: uvloop; ``procrastinate worker``:
asyncio). Everything stays on 127.0.0.1; every loop is bounded in time and count.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import importlib.metadata
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import asyncpg
import procrastinate
import uvloop
from bench.common import pg_url, psql
from pgqueuer import AsyncpgDriver, Job, Queries, QueueManager

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "tests" / "data" / "example-escalation.json"
ENTRYPOINT = "bench_noop"
#: How long the producers defer jobs for the enqueue figure (seconds, at most).
ENQUEUE_SECONDS = 2.0
#: Consumers run this long before the measured window opens (seconds).
WARM_UP = 1.0
#: Bounds on any single loop: jobs deferred by all producers together, jobs per batch
#: call when pre-enqueueing, and the wait for a library to stop after its window.
MAX_ENQUEUED = 200_000
FILL_BATCH = 1_000
STOP_TIMEOUT = 30.0
#: pgqueuer's own default dequeue batch (``QueueManager.run(batch_size=10)``), also what
#: its tools/benchmark.py uses.
PGQUEUER_BATCH = 10


def __getattr__(name: str) -> Any:
    """``bench.peers.CLI_APP`` for procrastinate's CLI, which loads an App by dotted path
    (``procrastinate --app bench.peers.CLI_APP schema --apply``), on the database in
    ``BENCH_PEER_URL`` (set only for that subprocess). Built on first access, not at
    import, so that importing this module opens nothing and warns about nothing."""
    if name == "CLI_APP":
        url = os.environ["BENCH_PEER_URL"]
        return procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))
    raise AttributeError(name)


def bundle() -> dict[str, Any]:
    """The JSON document Signoff stores with each task (its ``diagnostic_bundle``)."""
    document: dict[str, Any] = json.loads(EXAMPLE.read_text())["diagnostic_bundle"]
    return document


def bundle_bytes() -> bytes:
    return json.dumps(bundle(), separators=(",", ":")).encode()


def load() -> float:
    return round(os.getloadavg()[0], 2)


@contextlib.contextmanager
def throwaway_database(name: str) -> Iterator[str]:
    """A new, empty PostgreSQL database (no Signoff schema); dropped after. Yields its URL."""
    psql("postgres", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    psql("postgres", f'CREATE DATABASE "{name}"')
    try:
        yield pg_url(name)
    finally:
        psql("postgres", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _cli(*command: str, env: dict[str, str] | None = None) -> None:
    """Run a library's CLI (``python -m …``) from the repository root; bounded."""
    subprocess.run(
        [sys.executable, "-m", *command],
        cwd=ROOT,
        env=os.environ | (env or {}),
        check=True,
        capture_output=True,
        timeout=120,
    )


async def enqueue_rate(defers: Sequence[Callable[[], Awaitable[object]]]) -> dict[str, Any]:
    """One concurrent producer per ``defers`` item, each looping on its ``defer()`` (one
    job per call) until ``ENQUEUE_SECONDS`` have passed or ``MAX_ENQUEUED`` jobs were
    deferred in all."""
    before = load()
    done = 0
    started = time.monotonic()
    deadline = started + ENQUEUE_SECONDS

    async def producer(defer: Callable[[], Awaitable[object]]) -> None:
        nonlocal done
        while time.monotonic() < deadline and done < MAX_ENQUEUED:
            await defer()
            done += 1

    await asyncio.gather(*(producer(defer) for defer in defers))
    elapsed = time.monotonic() - started
    return {
        "producers": len(defers),
        "jobs": done,
        "seconds": round(elapsed, 3),
        "rate_per_s": round(done / elapsed, 1),
        "load": [before, load()],
    }


async def prefill(batch_defer: Callable[[int], Awaitable[object]], jobs: int) -> dict[str, Any]:
    """Pre-enqueue ``jobs`` jobs through the library's batch API, ``FILL_BATCH`` per call
    (``batch_defer(k)`` defers ``k``); not a measured figure, timed to show its cost."""
    started = time.monotonic()
    for start in range(0, jobs, FILL_BATCH):
        await batch_defer(min(FILL_BATCH, jobs - start))
    return {"jobs": jobs, "seconds": round(time.monotonic() - started, 3)}


async def completion_rate(
    probe: asyncpg.Connection, completed: str, queued: int, seconds: int
) -> dict[str, Any]:
    """Jobs the running consumers completed per second over a ``seconds`` window opened
    after ``WARM_UP``, from the ``completed`` count (over the library's job table) read
    through ``probe`` at both ends. ``drained`` means the queue ran out before the
    window closed (the rate is then a floor, not the library's limit)."""
    await asyncio.sleep(WARM_UP)
    before = load()
    start_count, started = int(await probe.fetchval(completed)), time.monotonic()
    await asyncio.sleep(max(0.0, started + seconds - time.monotonic()))
    end_count, ended = int(await probe.fetchval(completed)), time.monotonic()
    return {
        "jobs": end_count - start_count,
        "seconds": round(ended - started, 3),
        "rate_per_s": round((end_count - start_count) / (ended - started), 1),
        "queued_at_start": queued,
        "drained": end_count >= queued,
        "load": [before, load()],
    }


# --- pgqueuer ------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _connections(url: str, n: int) -> AsyncIterator[list[asyncpg.Connection]]:
    """``n`` asyncpg connections, closed after (pgqueuer's drivers never close theirs)."""
    connections = [await asyncpg.connect(url) for _ in range(n)]
    try:
        yield connections
    finally:
        await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)


async def _pgqueuer_consume(url: str, workers: int, seconds: int) -> dict[str, Any]:
    """``workers`` QueueManagers (one connection each, batch ``PGQUEUER_BATCH``) with a
    no-op entrypoint; an ack deletes the job from the ``pgqueuer`` table (and logs it),
    so completions are the rows that left it. Connections: ``workers`` + 1 (the probe)."""
    async with _connections(url, workers + 1) as (probe, *connections):
        queued = int(await probe.fetchval("SELECT count(*) FROM pgqueuer"))
        completed = f"SELECT {queued} - count(*) FROM pgqueuer"
        managers = [QueueManager(Queries(AsyncpgDriver(c))) for c in connections]
        for qm in managers:

            @qm.entrypoint(ENTRYPOINT)
            async def noop(job: Job) -> None:
                return None

        runs = [asyncio.create_task(qm.run(batch_size=PGQUEUER_BATCH)) for qm in managers]
        try:
            figures = await completion_rate(probe, completed, queued, seconds)
        finally:
            for qm in managers:
                qm.shutdown.set()
            await asyncio.wait_for(asyncio.gather(*runs, return_exceptions=True), STOP_TIMEOUT)
        failed = await probe.fetchval(
            "SELECT count(*) FROM pgqueuer_log WHERE status IN ('exception', 'failed')"
        )
    return figures | {"failed": int(failed), "batch_size": PGQUEUER_BATCH}


async def _pgqueuer(url: str, seconds: int, workers: int, jobs: int) -> dict[str, Any]:
    payload = bundle_bytes()
    async with _connections(url, workers) as connections:
        producers = [Queries(AsyncpgDriver(c)) for c in connections]
        enqueue = await enqueue_rate(
            [functools.partial(q.enqueue, ENTRYPOINT, payload) for q in producers]
        )
        fill = await prefill(
            lambda k: producers[0].enqueue([ENTRYPOINT] * k, [payload] * k, [0] * k), jobs
        )
    cycle = await _pgqueuer_consume(url, workers, seconds)
    return {"enqueue": enqueue, "fill": fill, "cycle": cycle}


def pgqueuer_figures(seconds: int, workers: int, jobs: int) -> dict[str, Any]:
    """pgqueuer on a database of its own: ``pgq install``, then enqueue/s and jobs/s."""
    with throwaway_database("signoff_bench_peer_pgqueuer") as url:
        _cli("pgqueuer", "--pg-dsn", url, "install")
        figures = uvloop.run(_pgqueuer(url, seconds, workers, jobs))
    return _described("pgqueuer", "uvloop", workers, figures)


# --- procrastinate -------------------------------------------------------------------


def _procrastinate_app(url: str, workers: int) -> tuple[procrastinate.App, Any]:
    """An App on PsycopgConnector with a pool of ``workers`` + 2 connections (one per
    worker's query at a time, and the side tasks' heartbeats), and the no-op task."""
    size = workers + 2
    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=url, min_size=size, max_size=size)
    )

    @app.task(name=ENTRYPOINT)
    async def noop(bundle: dict[str, Any]) -> None:
        return None

    return app, noop


async def _procrastinate_consume(
    app: procrastinate.App, url: str, workers: int, seconds: int
) -> dict[str, Any]:
    """``workers`` procrastinate workers (``run_worker_async``, ``concurrency=1`` each) on
    the one App: ``workers`` dequeue loops, as pgqueuer's QueueManagers and Signoff's
    reviewers are. (One worker with ``concurrency=workers`` fetches one job at a time, so
    it is bound by one fetch's round trips.) A finished job stays in
    ``procrastinate_jobs`` as ``succeeded`` (``delete_jobs`` is ``never`` by default).
    ``listen_notify=False``: each worker's LISTEN would hold a pool connection of its own
    (16 more, with the service and pgbench's database on the same server) and only wakes
    an idle worker sooner; on a full queue no worker waits."""
    async with _connections(url, 1) as (probe,):
        queued = int(await probe.fetchval("SELECT count(*) FROM procrastinate_jobs"))
        completed = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
        runs = [
            asyncio.create_task(
                app.run_worker_async(
                    name=f"bench-{n}",
                    concurrency=1,
                    listen_notify=False,
                    install_signal_handlers=False,
                    shutdown_graceful_timeout=STOP_TIMEOUT / 2,
                )
            )
            for n in range(workers)
        ]
        try:
            figures = await completion_rate(probe, completed, queued, seconds)
        finally:
            for run in runs:
                run.cancel()  # a procrastinate worker stops gracefully when cancelled
            await asyncio.wait_for(asyncio.gather(*runs, return_exceptions=True), STOP_TIMEOUT)
        failed = await probe.fetchval(
            "SELECT count(*) FROM procrastinate_jobs WHERE status = 'failed'"
        )
    return figures | {"failed": int(failed)}


async def _procrastinate(url: str, seconds: int, workers: int, jobs: int) -> dict[str, Any]:
    app, noop = _procrastinate_app(url, workers)
    document = bundle()
    async with app.open_async():
        defer = functools.partial(noop.defer_async, bundle=document)
        enqueue = await enqueue_rate([defer] * workers)  # the App's pool is shared
        fill = await prefill(lambda k: noop.batch_defer_async(*[{"bundle": document}] * k), jobs)
        cycle = await _procrastinate_consume(app, url, workers, seconds)
    return {"enqueue": enqueue, "fill": fill, "cycle": cycle}


def procrastinate_figures(seconds: int, workers: int, jobs: int) -> dict[str, Any]:
    """procrastinate on a database of its own: ``procrastinate schema --apply``, then
    enqueue/s and jobs/s."""
    with throwaway_database("signoff_bench_peer_procrastinate") as url:
        _cli(
            "procrastinate",
            "--app",
            "bench.peers.CLI_APP",
            "schema",
            "--apply",
            env={"BENCH_PEER_URL": url},
        )
        figures = asyncio.run(_procrastinate(url, seconds, workers, jobs))
    return _described("procrastinate", "asyncio", workers, figures)


# --- both ----------------------------------------------------------------------------


def _described(library: str, loop: str, workers: int, figures: dict[str, Any]) -> dict[str, Any]:
    return {
        "library": library,
        "version": importlib.metadata.version(library),
        "loop": loop,
        "workers": workers,
        "payload_bytes": len(bundle_bytes()),
        "jobs_per_s": figures["cycle"]["rate_per_s"],
        "enqueue_per_s": figures["enqueue"]["rate_per_s"],
        **figures,
    }


#: Jobs/s well above what each library reached on the development box (2 shared cores;
#: pgqueuer's docs report 6–18k on bigger machines): sizes each queue so that the window
#: cannot drain it, without paying for a fill much larger than needed (procrastinate
#: defers about 3k jobs/s in batches). ``drained`` in the figures says if it did anyway.
CEILING = {"pgqueuer": 8_000, "procrastinate": 2_000}


def queue_depth(library: str, seconds: int) -> int:
    """Jobs to pre-enqueue for ``library`` before a ``seconds`` window (and the warm-up)."""
    return max(10_000, int(CEILING[library] * (seconds + WARM_UP)))


def run_peers(seconds: int, workers: int = 16) -> dict[str, Any]:
    """pgqueuer then procrastinate, one after the other (never at once), each on its own
    throw-away database: ``{library: figures}`` with ``jobs_per_s`` (the whole life
    cycle, ``workers`` concurrent workers) and ``enqueue_per_s`` (``workers`` producers)."""
    runs: dict[str, Callable[[int, int, int], dict[str, Any]]] = {
        "pgqueuer": pgqueuer_figures,
        "procrastinate": procrastinate_figures,
    }
    return {name: run(seconds, workers, queue_depth(name, seconds)) for name, run in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=6)
    parser.add_argument("--workers", type=int, default=16)
    args = parser.parse_args()
    # ``python -m`` makes this module ``__main__``, where procrastinate warns an App
    # should not live (its CLI could not find the task); ours runs in-process.
    logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)
    print(json.dumps(run_peers(args.seconds, args.workers), indent=2))


if __name__ == "__main__":
    main()
