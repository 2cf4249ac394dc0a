"""The evidence export streams, on both engines: the trail and the checkpoints are read a
page at a time and written as they are read, into the same bytes a single read gives;
the CLI and the HTTP route write the same bundle, which ``signoff verify`` accepts; an
export cut off part way, or one that cannot be written, leaves nothing that passes."""

from __future__ import annotations

import asyncio
import copy
import json
import re
import sqlite3
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError

from signoff.cli import main
from signoff.domain.clock import rfc3339
from signoff.domain.evidence_check import parse_bundle, verify_bundle
from signoff.domain.json_output import compact_json
from signoff.services import evidence
from signoff.services.context import ServiceContext
from signoff.services.evidence_export import export_stream
from signoff.settings import Settings
from signoff.store import evidence as store
from signoff.store.runtime.database import Database, create_engine
from signoff.store.tables import checkpoints, task_events
from tests.conftest import TEST_ENCRYPTION_KEY
from tests.support import ADMIN_KEY, Client, LiveServer, escalation, live_server, logging_kept

SUBJECT: dict[str, Any] = {"title": "Pay ACME", "amount": "100 EUR", "actions": [{"id": "pay"}]}
PAGE = 2


def service(server: LiveServer, work: Callable[[ServiceContext], Awaitable[Any]]) -> Any:
    async def run() -> Any:
        database = Database(create_engine(server.settings))
        try:
            return await work(ServiceContext(database, server.settings, server.clock))
        finally:
            await database.dispose()

    return asyncio.run(run())


def paged(context: ServiceContext, size: int) -> ServiceContext:
    settings = context.settings.model_copy(update={"export_page_size": size})
    return ServiceContext(context.database, settings, context.clock)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with logging_kept(), pytest.raises(SystemExit) as ended:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(ended.value.code or 0), out, err


def trail(server: LiveServer, tasks: int) -> None:
    """``tasks`` tasks, every other one claimed and decided, and a checkpoint after each
    third, so the trail and the checkpoints span several pages."""
    producer = server.new_client("producer", "bot")
    reviewer = server.new_client("reviewer", "rita")
    for number in range(tasks):
        made = producer.escalate(escalation(subject=copy.deepcopy(SUBJECT)))
        assert made.status_code == 201, made.text
        if number % 2:
            decide(reviewer, made.json()["id"])
        if number % 3 == 2:
            server.clock.advance(1)
            assert service(server, lambda ctx: evidence.make_checkpoint(ctx, settle_seconds=0))


def decide(reviewer: Client, task_id: str) -> None:
    token = reviewer.claim(task_id).json()["lease_token"]
    task = reviewer.get(f"/tasks/{task_id}").json()
    body = {"decision": "APPROVED", "revision": 1, "digest": task["digest"]}
    assert reviewer.resolve(task_id, token, body).status_code == 200


async def one_read(ctx: ServiceContext, since: str | None = None) -> str:
    """The bundle as the export wrote it in one piece before it streamed: one object,
    every record of every touched task by task then id, every checkpoint, as one
    compact JSON text."""
    moment = None if since is None else evidence.parse_range(since, None)[0]
    async with ctx.database.transaction(write=False) as uow:
        query = select(task_events.c.task_id).distinct()
        if moment is not None:
            query = query.where(task_events.c.created_at >= moment)
        touched = sorted((await uow.connection.execute(query)).scalars())
        records = [
            record.as_json() | {"receipt": jws}
            for task_id in touched
            for record, jws in await store.task_records(uow.connection, task_id)
        ]
        marks = (await uow.connection.execute(select(checkpoints).order_by("seq"))).all()
    return compact_json(
        {
            "format": "signoff.evidence-bundle/v1",
            "exported_at": rfc3339(ctx.now()),
            "since": None if moment is None else rfc3339(moment),
            "until": None,
            "keys": await evidence.jwks(ctx),
            "records": records,
            "checkpoints": [{"checkpoint": m.jws, "leaves": m.leaves} for m in marks],
        }
    )


async def fragments(ctx: ServiceContext, since: str | None = None) -> list[str]:
    moment = None if since is None else evidence.parse_range(since, None)[0]
    return [part async for part in await export_stream(ctx, since=moment)]


def without_time(bundle: bytes) -> bytes:
    """The bundle with its ``exported_at`` blanked (the CLI reads the wall clock)."""
    return re.sub(rb'^(\{"format":"[^"]+","exported_at":)"[^"]*"', rb'\1""', bundle)


def test_a_paged_export_is_the_bundle_of_one_read_and_every_door_writes_it(
    make_settings: Any,
    clock: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with live_server(make_settings(export_page_size=PAGE), clock) as server:
        trail(server, 9)

        async def compare(ctx: ServiceContext) -> tuple[str, list[str], list[str]]:
            await evidence.sign_pending(ctx)  # the export signs first; the reference reads
            return await one_read(ctx), await fragments(ctx), await fragments(paged(ctx, 10_000))

        expected, small, whole = service(server, compare)
        assert "".join(small) == expected  # byte for byte the bundle of one read
        assert "".join(whole) == expected
        bundle = parse_bundle(expected)  # the format `signoff verify` reads
        report = verify_bundle(bundle)
        assert report.ok, report.failures
        assert (report.tasks, report.checkpoints) == (9, 3)
        assert report.records == len(bundle["records"]) > 4 * PAGE
        assert len(small) > len(whole) + len(bundle["records"]) // PAGE  # written per page

        # The store is read in pages: no read returns more than the page.
        async def pages(ctx: ServiceContext) -> tuple[list[int], list[int], list[Any]]:
            async with ctx.database.transaction(write=False) as uow:
                newest, last = await store.export_marks(uow.connection)
            sizes, leaves, seen, after = [], [], [], None
            while True:
                async with ctx.database.transaction(write=False) as uow:
                    page = await store.records_page(
                        uow.connection, None, None, upto=newest, after=after, limit=3
                    )
                if not page:
                    break
                sizes.append(len(page))
                seen += [record.id for record, _ in page]
                after = (uuid.UUID(page[-1][0].task_id), page[-1][0].id)
            done = 0
            while done < last:
                async with ctx.database.transaction(write=False) as uow:
                    marks = await store.checkpoints_page(
                        uow.connection, after=done, upto=last, leaves=1
                    )
                leaves.append(len(marks))
                done = int(marks[-1].seq)
            return sizes, leaves, seen

        sizes, leaves, seen = service(server, pages)
        assert max(sizes) == 3
        assert len(sizes) > 4
        assert seen == [record["id"] for record in bundle["records"]]
        assert leaves == [1, 1, 1]  # a checkpoint with more leaves than the page comes alone

        # The HTTP route streams the bytes the CLI writes, and both verify.
        with server.admin() as admin, admin.stream("GET", "/evidence/export") as answer:
            assert answer.status_code == 200
            assert answer.headers["content-type"] == "application/json"
            assert answer.headers.get("transfer-encoding") == "chunked"
            assert "content-length" not in answer.headers
            served = answer.read()
            refused = admin.get("/evidence/export", params={"until": "tomorrow"})
        assert refused.status_code == 422
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.json()["error_code"] == "ERR_VALIDATION"
        assert served == expected.encode()  # no new records: the same bundle
        monkeypatch.setenv("SIGNOFF_ENCRYPTION_KEYS", TEST_ENCRYPTION_KEY)
        monkeypatch.setenv("SIGNOFF_EXPORT_PAGE_SIZE", str(PAGE))
        (folder := tmp_path / "exports").mkdir()
        out = folder / "bundle.json"
        url = server.settings.database_url
        status, said, err = cli(capsys, "export", "--out", str(out), "--database-url", url)
        assert status == 0, err
        assert said.splitlines()[-1] == f"wrote {out}"
        assert without_time(out.read_bytes()) == without_time(served)
        assert [p.name for p in folder.iterdir()] == ["bundle.json"]
        status, said, _ = cli(capsys, "verify", str(out))
        assert status == 0, said
        assert f"OK {report.records} records of 9 tasks, 3 checkpoints" in said


def test_a_range_with_no_tasks_exports_only_keys_and_checkpoints(server: LiveServer) -> None:
    assert json.loads("".join(service(server, fragments)))["checkpoints"] == []
    trail(server, 3)
    later = rfc3339(server.clock.now() + timedelta(days=1))

    async def compare(ctx: ServiceContext) -> tuple[str, list[str]]:
        return await one_read(ctx, later), await fragments(paged(ctx, 1), later)

    expected, streamed = service(server, compare)
    assert "".join(streamed) == expected
    bundle = parse_bundle(expected)
    assert (bundle["records"], len(bundle["checkpoints"]), bundle["since"]) == ([], 1, later)
    assert verify_bundle(bundle).ok
    with server.admin() as admin:
        served = admin.get("/evidence/export", params={"since": later})
    assert served.status_code == 200
    assert served.json()["records"] == []


async def rename(ctx: ServiceContext, table: str, name: str) -> None:
    async with ctx.database.transaction() as uow:
        await uow.connection.execute(text(f"ALTER TABLE {table} RENAME TO {name}"))
        await uow.commit()


def test_an_export_cut_off_part_way_is_refused_by_verify(
    server: LiveServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The database fails after the first page: the stream stops with an error, and what
    was written before it is incomplete JSON that ``signoff verify`` refuses clearly."""
    trail(server, 4)

    async def cut(ctx: ServiceContext) -> tuple[list[str], BaseException]:
        stream = await export_stream(paged(ctx, 1))
        taken = [await anext(stream) for _ in range(7)]  # the head and the first page
        await rename(ctx, "receipts", "receipts_gone")
        try:
            with pytest.raises(DBAPIError) as failed:
                taken.append(await anext(stream))
        finally:  # the PostgreSQL database is kept for the next test
            await rename(ctx, "receipts_gone", "receipts")
        return taken, failed.value

    taken, failure = service(server, cut)
    assert "receipts" in str(failure)
    assert taken[5] == ',"records":['
    assert json.loads(taken[6])["task_id"]
    part = tmp_path / "part.json"
    part.write_text("".join(taken))
    status, out, err = cli(capsys, "verify", str(part))
    assert status == 2
    assert err.strip() == (
        f"signoff: error: {part}: the bundle is incomplete: its JSON ends before it closes "
        "(truncated: an export cut off part way, or a file copied in part)"
    )
    assert "Traceback" not in out + err


def test_an_export_that_cannot_be_written_leaves_nothing_and_says_why(
    server: LiveServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trail(server, 2)
    monkeypatch.setenv("SIGNOFF_ENCRYPTION_KEYS", TEST_ENCRYPTION_KEY)
    url = server.settings.database_url
    (folder := tmp_path / "exports").mkdir()
    missing = folder / "no-such-folder" / "bundle.json"
    status, out, err = cli(capsys, "export", "--out", str(missing), "--database-url", url)
    assert status != 0
    assert err.strip() == f"signoff: error: cannot write {missing}: No such file or directory"
    taken = folder / "taken"
    taken.mkdir()  # the bundle is written whole, then cannot take the folder's name
    status, out, err = cli(capsys, "export", "--out", str(taken), "--database-url", url)
    assert status != 0
    assert err.strip() == f"signoff: error: cannot write {taken}: Is a directory"
    assert "Traceback" not in out + err
    assert list(folder.iterdir()) == [taken]
    assert list(taken.iterdir()) == []


def test_a_route_cut_off_by_the_database_ends_without_its_last_chunk(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Over HTTP: a page that cannot be read after the body began (SQLite, where a stored
    time can be made unreadable) ends the response without its closing chunk; the client
    is told the body is incomplete, and the bytes it has are refused by verify."""
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'signoff.db'}",
        bootstrap_admin_key=ADMIN_KEY,
        encryption_keys=TEST_ENCRYPTION_KEY,
        export_page_size=1,
    )
    with live_server(settings) as server:
        trail(server, 2)
        with server.admin() as admin:
            assert admin.get("/evidence/export").status_code == 200  # every receipt signed
            with sqlite3.connect(tmp_path / "signoff.db") as database:
                database.execute(
                    "UPDATE task_events SET created_at = 'unreadable' "
                    "WHERE id = (SELECT max(id) FROM task_events)"
                )
            received: list[bytes] = []
            with admin.stream("GET", "/evidence/export") as answer:
                assert answer.status_code == 200
                with pytest.raises(httpx.RemoteProtocolError, match="incomplete"):
                    received.extend(answer.iter_raw())
    assert b'"records":[' in b"".join(received)
    part = tmp_path / "part.json"
    part.write_bytes(b"".join(received))
    capsys.readouterr()  # the server's own report of the failure
    status, out, err = cli(capsys, "verify", str(part))
    assert status == 2
    assert "the bundle is incomplete" in err
    assert "Traceback" not in out + err
