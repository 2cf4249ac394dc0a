"""No usable secret at rest: webhook signing secrets and unsent resume links are stored
encrypted; a process without the key refuses to sign; producer-scoped subscriptions."""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from signoff.bootstrap import prepare_database
from signoff.crypto import PREFIX, Keyring, load_keyring
from signoff.settings import Settings
from signoff.store.runtime.database import Database, create_engine
from signoff.webhooks import verify
from tests.conftest import TEST_ENCRYPTION_KEY
from tests.integration.test_waiting import (  # noqa: F401 (fixtures)
    local,
    mailbox,
    person,
    send_mail,
    waiting,
    waiting_task,
)
from tests.integration.test_webhooks import dispatch, register
from tests.mailbox import Mailbox
from tests.receiver import Receiver
from tests.support import LiveServer, escalation, live_server

OTHER_KEY = "Zm_sPFyiiYph3C-sAOcmfYODGEahGkdcbrodvbz5FaU="


@pytest.fixture
def hooks(make_settings, clock) -> Iterator[LiveServer]:  # type: ignore[no-untyped-def]
    settings = make_settings(
        run_workers=False, webhook_allow_private_networks=True, webhook_retry_jitter=0
    )
    with live_server(settings, clock) as live:
        yield live


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


def all_text(server: LiveServer) -> str:
    """Every value of every row of every table, as one string: what a reader of the
    database gets."""

    async def dump() -> str:
        database = Database(create_engine(server.settings))
        try:
            async with database.engine.connect() as connection:
                names = await connection.run_sync(
                    lambda sync: __import__("sqlalchemy").inspect(sync).get_table_names()
                )
                parts = []
                for name in names:
                    for row in await connection.execute(text(f'SELECT * FROM "{name}"')):
                        parts.extend(str(value) for value in row)
                return "\n".join(parts)
        finally:
            await database.dispose()

    return str(asyncio.run(dump()))


def test_webhook_secrets_are_encrypted_at_rest_and_still_sign(hooks, receiver) -> None:
    endpoint = register(hooks, f"{receiver.url}/hooks")
    secret = endpoint["secret"]
    (row,) = hooks.rows("webhook_endpoints")
    assert row["secret"].startswith(PREFIX)
    assert secret not in all_text(hooks)
    assert Keyring([TEST_ENCRYPTION_KEY]).decrypt(row["secret"]) == secret
    with hooks.admin() as admin:
        rotated = admin.post(f"/webhook-endpoints/{endpoint['id']}/rotate-secret").json()
    (row,) = hooks.rows("webhook_endpoints")
    assert row["previous_secret"].startswith(PREFIX)
    assert rotated["secret"] not in all_text(hooks)
    with hooks.new_client("producer") as producer:
        producer.escalate(escalation())
    assert dispatch(hooks) == 1
    (request,) = receiver.received
    verify(request.headers, request.body, rotated["secret"])
    verify(request.headers, request.body, secret)  # the previous one still signs too


def test_a_process_without_the_key_refuses_to_deliver(hooks, receiver) -> None:
    register(hooks, f"{receiver.url}/hooks")
    with hooks.new_client("producer") as producer:
        producer.escalate(escalation())
    stranger = LiveServer.__new__(LiveServer)
    stranger.settings = hooks.settings.model_copy(update={"encryption_keys": OTHER_KEY})
    stranger.clock = hooks.clock
    assert dispatch(stranger) == 0
    assert receiver.received == []  # never unsigned, never wrongly signed
    (delivery,) = hooks.rows("webhook_deliveries")
    assert (delivery["status"], delivery["attempt_count"]) == ("PENDING", 0)
    hooks.clock.advance(61)
    assert dispatch(hooks) == 1  # the process with the key delivers it
    assert len(receiver.received) == 1


def test_a_key_file_is_created_on_first_start_readable_only_by_its_owner(
    tmp_path: Path, capsys
) -> None:  # type: ignore[no-untyped-def]
    database = tmp_path / "signoff.db"
    settings = Settings(database_url=f"sqlite:///{database}")
    asyncio.run(prepare_database(settings))
    key_file = tmp_path / "signoff.key"
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    captured = capsys.readouterr()
    assert "encryption.key_generated" in captured.out + captured.err
    first = key_file.read_text()
    asyncio.run(prepare_database(settings))  # the second start keeps it
    assert key_file.read_text() == first
    captured = capsys.readouterr()
    assert "encryption.key_generated" not in captured.out + captured.err
    chosen = tmp_path / "elsewhere.key"
    load_keyring(Settings(database_url="postgresql://x/y", key_file=str(chosen)))
    assert chosen.exists()


def test_rotating_keys_reencrypts_on_start(hooks, receiver) -> None:
    endpoint = register(hooks, f"{receiver.url}/hooks")
    rotated = hooks.settings.model_copy(
        update={"encryption_keys": f"{OTHER_KEY},{TEST_ENCRYPTION_KEY}"}
    )
    asyncio.run(prepare_database(rotated))
    (row,) = hooks.rows("webhook_endpoints")
    assert Keyring([OTHER_KEY]).decrypt(row["secret"]) == endpoint["secret"]


def test_no_usable_resume_link_is_stored(waiting: LiveServer, mailbox: Mailbox) -> None:  # noqa: F811
    producer = waiting.new_client("producer", "bot")
    person(waiting, "reviewer", "alice", ["reviewers"])
    task = waiting_task(waiting, producer)
    (queued,) = waiting.rows("notifications")
    assert "/r/" not in queued["body"]
    assert queued["resume_token"].startswith(PREFIX)
    # Every string in the database that could be a token is tried: none opens a link.
    stored = all_text(waiting)
    candidates = set(re.findall(r"[A-Za-z0-9_\-]{20,}", stored))
    for candidate in candidates:
        answer = httpx.get(
            f"{waiting.base_url}/r/{candidate}", headers={"Accept": "application/json"}
        )
        assert answer.status_code == 404, candidate
    send_mail(waiting)
    (message,) = mailbox.to("alice@example.org")
    (link,) = re.findall(r"https?://\S+/r/[A-Za-z0-9_-]+", Mailbox.body(message))
    assert httpx.get(local(waiting, link)).status_code == 200  # the sent link works
    (sent,) = waiting.rows("notifications")
    assert sent["status"] == "SENT"
    assert sent["resume_token"] is None
    assert link.rsplit("/", 1)[1] not in all_text(waiting)
    assert task["id"]


def _endpoint(client: Any, url: str, **filters: Any) -> dict[str, Any]:
    response = client.post("/webhook-endpoints", json={"url": url, **filters})
    assert response.status_code == 201, response.text
    return dict(response.json())


def test_producers_receive_only_their_own_tasks_events(hooks) -> None:  # type: ignore[no-untyped-def]
    with (
        Receiver() as for_a,
        Receiver() as for_b,
        Receiver() as resolved_only,
        Receiver() as for_admin,
        hooks.new_client("producer", "producer-a") as a,
        hooks.new_client("producer", "producer-b") as b,
        hooks.new_client("reviewer", "rev") as reviewer,
        hooks.admin() as admin,
    ):
        mine = _endpoint(a, f"{for_a.url}/a")
        assert mine["producer_id"] == "producer-a"
        theirs = _endpoint(b, f"{for_b.url}/b")
        _endpoint(a, f"{resolved_only.url}/r", event_types=["task.resolved"])
        _endpoint(admin, f"{for_admin.url}/all", event_types=[])  # empty: every type
        task_a = a.escalate(escalation()).json()["id"]
        task_b = b.escalate(escalation()).json()["id"]
        token = reviewer.claim(task_a).json()["lease_token"]
        assert reviewer.resolve(task_a, token).status_code == 200
        while dispatch(hooks):
            pass

        def tasks(receiver: Receiver) -> list[tuple[str, str]]:
            return [
                (json.loads(r.body)["data"]["id"], json.loads(r.body)["type"])
                for r in receiver.received
            ]

        assert {task for task, _ in tasks(for_a)} == {task_a}
        assert {task for task, _ in tasks(for_b)} == {task_b}
        assert tasks(resolved_only) == [(task_a, "task.resolved")]
        assert {task for task, _ in tasks(for_admin)} == {task_a, task_b}
        assert len(tasks(for_a)) == 3  # created, claimed, resolved

        # Producers see and manage only their own endpoints; others' are 404.
        assert [e["id"] for e in b.get("/webhook-endpoints").json()["items"]] == [theirs["id"]]
        assert len(admin.get("/webhook-endpoints").json()["items"]) == 4
        path = f"/webhook-endpoints/{mine['id']}"
        assert b.get(path).status_code == 404
        assert b.patch(path, json={"enabled": False}).status_code == 404
        assert b.post(f"{path}/rotate-secret").status_code == 404
        assert b.get(f"{path}/deliveries").status_code == 404
        assert b.delete(path).status_code == 404
        assert a.get(f"{path}/deliveries").status_code == 200
        assert a.patch(path, json={"enabled": False}).json()["enabled"] is False
        assert a.post(f"{path}/rotate-secret").status_code == 200
        assert a.delete(path).status_code == 204
        assert reviewer.get("/webhook-endpoints").status_code == 403


@pytest.fixture
def empty_database_url(engine: str, tmp_path: Path) -> Iterator[str]:
    """A database with no schema at all, of the parametrised engine."""
    if engine == "sqlite":
        yield f"sqlite:///{tmp_path / 'old.db'}"
        return
    import asyncpg

    from tests.conftest import POSTGRES_URL, _server_url

    name = f"signoff_test_{os.getpid()}_old"

    async def admin(statement: str) -> None:
        connection = await asyncpg.connect(POSTGRES_URL)
        try:
            await connection.execute(statement)
        finally:
            await connection.close()

    asyncio.run(admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    asyncio.run(admin(f'CREATE DATABASE "{name}"'))
    yield _server_url(name)
    asyncio.run(admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def test_the_migration_encrypts_clear_secrets_and_takes_links_out_of_bodies(
    empty_database_url: str,
) -> None:
    from signoff.store.runtime.migrate import upgrade

    keyring = Keyring([TEST_ENCRYPTION_KEY])
    link = "http://signoff.example/r/AbCdEfGhIjKlMnOpQrStUvWxYz012345"
    sent_link = "http://signoff.example/r/ZyXwVuTsRqPoNmLkJiHgFeDcBa987654"

    async def scenario() -> tuple[Any, list[Any]]:
        database = Database(create_engine(Settings(database_url=empty_database_url)))
        try:
            await upgrade(database.engine, "0006")
            async with database.engine.begin() as connection:
                now = datetime(2026, 12, 1, tzinfo=UTC)
                await connection.execute(
                    text(
                        "INSERT INTO webhook_endpoints (id, url, enabled, secret, previous_secret,"
                        " created_at, updated_at) VALUES (:id, 'https://x.example/', true,"
                        " 'whsec_clear', 'whsec_old', :now, :now)"
                    ),
                    {"id": "00000000-0000-0000-0000-000000000001", "now": now},
                )
                await connection.execute(
                    text(
                        "INSERT INTO review_tasks (id, status, entity_type, entity_id,"
                        " reason_code, precheck_hash, diagnostic_bundle, producer_id,"
                        " idempotency_key, version, created_at, updated_at) VALUES (:id,"
                        " 'PENDING_REVIEW', 'e', 'e1', 'r', :hash, '{}', 'p', 'k', 1, :now, :now)"
                    ),
                    {"id": "00000000-0000-0000-0000-000000000002", "hash": "0" * 64, "now": now},
                )
                for number, (status, url) in enumerate(
                    [("PENDING", link), ("SENT", sent_link)], start=3
                ):
                    await connection.execute(
                        text(
                            "INSERT INTO notifications (id, task_id, kind, principal_id, email,"
                            " subject, body, status, attempts, next_attempt_at, created_at)"
                            " VALUES (:id, :task, 'review_requested', 'alice', 'a@x', 's',"
                            " :body, :status, 0, :now, :now)"
                        ),
                        {
                            "id": f"00000000-0000-0000-0000-00000000000{number}",
                            "task": "00000000-0000-0000-0000-000000000002",
                            "body": f"Review needed.\nApprove or reject: {url}\n",
                            "status": status,
                            "now": now,
                        },
                    )
            await upgrade(database.engine, keyring=keyring)
            async with database.engine.connect() as connection:
                endpoint = (
                    await connection.execute(
                        text("SELECT secret, previous_secret FROM webhook_endpoints")
                    )
                ).one()
                notes = (
                    await connection.execute(
                        text("SELECT status, body, resume_token FROM notifications ORDER BY status")
                    )
                ).all()
            return endpoint, list(notes)
        finally:
            await database.dispose()

    endpoint, notes = asyncio.run(scenario())
    assert keyring.decrypt(endpoint.secret) == "whsec_clear"
    assert keyring.decrypt(endpoint.previous_secret) == "whsec_old"
    (pending, sent) = notes
    assert "/r/" not in pending.body
    assert "/r/" not in sent.body
    assert keyring.decrypt(pending.resume_token) == link.rsplit("/", 1)[1]
    assert sent.resume_token is None
