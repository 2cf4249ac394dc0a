"""A process whose encryption key cannot open the receipts' signing key: it refuses to
start, saying which key it has; and a decision it answered anyway is committed and
answered without a receipt, which the next process with the key signs."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import delete

from signoff.bootstrap import prepare_database
from signoff.client import verify_receipt
from signoff.crypto import KeyringError
from signoff.services import evidence
from signoff.services.context import ServiceContext
from signoff.store.runtime.database import Database, create_engine
from signoff.store.tables import receipts
from tests.integration.test_evidence import cli, decide, service, tamper
from tests.support import LiveServer

OTHER_KEY = Fernet.generate_key().decode()


def test_a_process_with_another_encryption_key_refuses_to_start(
    server: LiveServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    other = server.settings.model_copy(update={"encryption_keys": OTHER_KEY})
    with pytest.raises(KeyringError, match="signing key") as refused:
        asyncio.run(prepare_database(other, clock=server.clock))
    assert "SIGNOFF_ENCRYPTION_KEYS" in str(refused.value)
    # The command line says it in one line, without a traceback, and exits non-zero.
    monkeypatch.setenv("SIGNOFF_ENCRYPTION_KEYS", OTHER_KEY)
    code, _out, err = cli(capsys, "migrate", "--database-url", server.settings.database_url)
    assert code != 0
    assert "signing key" in err
    assert "Traceback" not in err
    # With the database's key it starts as before.
    assert asyncio.run(prepare_database(server.settings, clock=server.clock)) is None


def test_a_decision_answered_without_the_key_is_signed_by_the_next_process_with_it(
    server: LiveServer,
) -> None:
    producer = server.new_client("producer", "bot")
    reviewer = server.new_client("reviewer", "rita")
    task_id, _answer = decide(producer, reviewer)
    tamper(server, delete(receipts).where(receipts.c.task_id == uuid.UUID(task_id)))

    def latest(settings: Any) -> str | None:
        async def run() -> str | None:
            database = Database(create_engine(settings))
            try:
                context = ServiceContext(database=database, settings=settings, clock=server.clock)
                return await evidence.latest_receipt(context, uuid.UUID(task_id))
            finally:
                await database.dispose()

        return asyncio.run(run())

    assert latest(server.settings.model_copy(update={"encryption_keys": OTHER_KEY})) is None
    receipt = latest(server.settings)
    assert receipt is not None
    keys = service(server, evidence.jwks)
    assert verify_receipt(receipt, keys, task_id=task_id)["task_id"] == task_id
