"""Evidence anyone can check, on both engines, in one scenario: receipts returned with
decisions and votes, the hash chain, checkpoints, a key rotation, an export verified
offline (and by Node's crypto), then the database changed behind Signoff's back in every
way an attacker might — and ``signoff verify`` naming each change."""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import subprocess
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from signoff.cli import main
from signoff.client import AsyncSignoff, ReceiptInvalid, Signoff, verify_receipt
from signoff.crypto import Keyring
from signoff.domain.evidence import TrailRecord, b64url_decode, receipt_claims, sign_compact
from signoff.domain.evidence_check import verify_bundle
from signoff.services import evidence
from signoff.services.context import ServiceContext
from signoff.services.evidence_export import export_stream
from signoff.store.runtime.database import Database, create_engine
from signoff.store.runtime.migrate import downgrade, upgrade
from signoff.store.tables import receipts, signing_keys, task_events
from signoff.workers.sweeper import Sweeper
from tests.conftest import TEST_ENCRYPTION_KEY
from tests.support import Client, LiveServer, escalation, live_server, logging_kept

NODE_RECEIPTS = Path(__file__).resolve().parents[1] / "node" / "receipt.mjs"
SUBJECT: dict[str, Any] = {"title": "Pay ACME", "amount": "100 EUR", "actions": [{"id": "pay"}]}


def decide(producer: Client, reviewer: Client, decision: str = "APPROVED") -> tuple[str, Any]:
    """A task with a subject, claimed and decided: its id and the resolve response."""
    made = producer.escalate(escalation(subject=copy.deepcopy(SUBJECT)))
    assert made.status_code == 201, made.text
    task_id = made.json()["id"]
    token = reviewer.claim(task_id).json()["lease_token"]
    task = reviewer.get(f"/tasks/{task_id}").json()
    body = {
        "decision": decision,
        "notes": "checked in a test",
        "revision": task["current_revision"],
        "digest": task["digest"],
    }
    answer = reviewer.resolve(task_id, token, body)
    assert answer.status_code == 200, answer.text
    return task_id, answer


def service(server: LiveServer, work: Any) -> Any:
    async def run() -> Any:
        database = Database(create_engine(server.settings))
        try:
            context = ServiceContext(
                database=database, settings=server.settings, clock=server.clock
            )
            return await work(context)
        finally:
            await database.dispose()

    return asyncio.run(run())


async def exported_bundle(context: ServiceContext) -> Any:
    """The whole bundle an export streams, read back."""
    return json.loads("".join([part async for part in await export_stream(context)]))


def records(server: LiveServer, task_id: str) -> list[Any]:
    async def read(context: ServiceContext) -> list[Any]:
        async with context.database.transaction(write=False) as uow:
            rows = await uow.connection.execute(
                select(task_events.c.id, task_events.c.details)
                .where(task_events.c.task_id == uuid.UUID(task_id))
                .order_by(task_events.c.id)
            )
            return list(rows)

    return list(service(server, read))


def tamper(server: LiveServer, *statements: Any) -> None:
    async def write(context: ServiceContext) -> None:
        async with context.database.transaction() as uow:
            for statement in statements:
                await uow.connection.execute(statement)
            await uow.commit()

    service(server, write)


def receipt_of(server: LiveServer, record_id: int) -> str:
    async def read(context: ServiceContext) -> str:
        async with context.database.transaction(write=False) as uow:
            found = await uow.connection.execute(
                select(receipts.c.jws).where(receipts.c.record_id == record_id)
            )
            return str(found.scalar_one())

    return str(service(server, read))


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """The command line in this process (its logging set back after)."""
    with logging_kept(), pytest.raises(SystemExit) as ended:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(ended.value.code or 0), out, err


def test_receipts_chain_checkpoints_and_offline_verification_catch_every_tampering(
    server: LiveServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    producer = server.new_client("producer", "bot")
    reviewer = server.new_client("reviewer", "rita")
    alice, bob = server.new_client("reviewer", "alice"), server.new_client("reviewer", "bob")

    # A decision answers with its receipt; the SDK checks it against the published keys,
    # for the digest the producer computed, before acting.
    a, answered = decide(producer, reviewer)
    jwks = server.client(None).get("/.well-known/jwks.json").json()
    assert [(k["kty"], k["crv"], "exp" in k) for k in jwks["keys"]] == [("OKP", "Ed25519", False)]
    digest = answered.json()["digest"]
    claims = verify_receipt(
        answered.headers["Signoff-Receipt"], jwks, task_id=a, digest=digest, decision="APPROVED"
    )
    assert (claims["outcome"], claims["revision"], claims["who"]["principal"]) == (
        "RESOLVED",
        1,
        "rita",
    )
    assert claims["who"]["door"] == "api"  # the door the decision came through
    with pytest.raises(ReceiptInvalid, match="digest"):
        verify_receipt(answered.headers["Signoff-Receipt"], jwks, digest="0" * 64)

    # Each vote and the quorum moment get receipts; the chain links each record to the last.
    voted = producer.escalate(
        escalation(subject=copy.deepcopy(SUBJECT), approval_rule={"approvals": 2})
    ).json()
    for voter in (alice, bob):
        current = voter.get(f"/tasks/{voted['id']}").json()
        cast = voter.post(
            f"/tasks/{voted['id']}/votes",
            json={
                "decision": "APPROVED",
                "revision": current["current_revision"],
                "digest": current["digest"],
            },
        )
        assert cast.status_code == 200, cast.text
        assert "Signoff-Receipt" in cast.headers
    listed = reviewer.get(f"/tasks/{voted['id']}/receipts").json()["items"]
    assert [item["type"] for item in listed][-3:] == [
        "task.vote_cast",
        "task.vote_cast",
        "task.resolved",
    ]
    doors = [verify_receipt(item["receipt"], jwks)["who"]["door"] for item in listed[-3:]]
    assert doors == ["api", "api", "api"]  # each vote's door, and the deciding vote's
    assert listed[0]["prev_hash"] == ""
    assert all(y["prev_hash"] == x["hash"] for x, y in itertools.pairwise(listed))
    assert reviewer.get(f"/tasks/{uuid.uuid4()}/receipts").status_code == 404

    b, _ = decide(producer, reviewer, "REJECTED")
    e, _ = decide(producer, reviewer)
    f, _ = decide(producer, reviewer)
    g, _ = decide(producer, reviewer)

    # A checkpoint certifies everything so far; then the key is rotated.
    old = service(server, lambda ctx: _old_key(ctx))
    server.clock.advance(server.settings.checkpoint_settle_seconds + 1)
    assert service(server, lambda ctx: Sweeper(ctx).sweep_once()) == 0  # the sweeper's checkpoint
    assert service(server, evidence.checkpoint_if_due) is None  # not due again yet
    new_kid = service(server, evidence.rotate_signing_key)
    server.clock.advance(2 * evidence.KEY_TTL.total_seconds() + 1)  # past the old key's grace
    d, after = decide(producer, reviewer)
    server.clock.advance(1)
    assert service(server, lambda ctx: evidence.make_checkpoint(ctx, settle_seconds=0))["seq"] == 2
    jwks = server.client(None).get("/.well-known/jwks.json").json()
    assert [(k["kid"], "exp" in k) for k in jwks["keys"]] == [(new_kid, False), (old[0], True)]
    assert json.loads(b64url_decode(after.headers["Signoff-Receipt"].split(".")[0]))["kid"] == (
        new_kid
    )
    verify_receipt(answered.headers["Signoff-Receipt"], jwks)  # the old key still verifies

    # An untouched export verifies, with the published keys only; Node agrees.
    with server.admin() as admin:
        assert admin.get("/evidence/export", params={"since": "yesterday"}).status_code == 422
        assert reviewer.get("/evidence/export").status_code == 403
        bundle = admin.get("/evidence/export").json()
        later = (server.clock.now() + timedelta(days=1)).isoformat()
        empty = admin.get("/evidence/export", params={"since": later}).json()
    assert (len(empty["records"]), len(empty["checkpoints"])) == (0, 2)
    assert verify_bundle(empty, jwks).ok  # certified records outside the range are not asked for
    keys_file = tmp_path / "jwks.json"
    keys_file.write_text(json.dumps(jwks))
    clean = tmp_path / "clean.json"
    clean.write_text(json.dumps(bundle))
    status, out, _ = cli(capsys, "verify", str(clean), "--keys", str(keys_file))
    assert status == 0, out
    assert "OK" in out
    assert "2 checkpoints" in out
    node = subprocess.run(
        ["node", str(NODE_RECEIPTS)],
        input=json.dumps({"jwks": jwks, "receipts": [r["receipt"] for r in bundle["records"]]}),
        capture_output=True,
        text=True,
        check=False,
    )
    assert node.returncode == 0, node.stderr
    assert [p["record_id"] for p in json.loads(node.stdout)] == [r["id"] for r in bundle["records"]]

    # Behind Signoff's back: every change an attacker might make.
    rec = {t: records(server, t) for t in (a, b, d, e, f, g, voted["id"])}
    edited = dict(rec[a][-1].details) | {"decision": "REJECTED"}
    first_e, second_e = rec[e][0].id, rec[e][1].id
    e_rows = dict(service(server, lambda ctx: _full_rows(ctx, e)))
    forged = _forge(server, old, rec[d][-1].id)
    tamper(
        server,
        # edit a decision
        update(task_events).where(task_events.c.id == rec[a][-1].id).values(details=edited),
        # delete a trail row
        delete(receipts).where(receipts.c.record_id == rec[b][1].id),
        delete(task_events).where(task_events.c.id == rec[b][1].id),
        # reorder two records
        update(task_events).where(task_events.c.id == first_e).values(**e_rows[second_e]),
        update(task_events).where(task_events.c.id == second_e).values(**e_rows[first_e]),
        # swap receipts between tasks
        update(receipts)
        .where(receipts.c.record_id == rec[voted["id"]][0].id)
        .values(jws=receipt_of(server, rec[g][0].id)),
        # drop a whole task
        delete(receipts).where(receipts.c.task_id == uuid.UUID(f)),
        delete(task_events).where(task_events.c.task_id == uuid.UUID(f)),
        # replay an old receipt
        update(receipts)
        .where(receipts.c.record_id == rec[g][-1].id)
        .values(jws=receipt_of(server, rec[g][0].id)),
        # sign with the rotated-out key
        update(receipts).where(receipts.c.record_id == rec[d][-1].id).values(jws=forged),
    )
    monkeypatch.setenv("SIGNOFF_ENCRYPTION_KEYS", TEST_ENCRYPTION_KEY)
    tampered = tmp_path / "tampered.json"
    status, _, err = cli(
        capsys, "export", "--out", str(tampered), "--database-url", server.settings.database_url
    )
    assert status == 0, err
    status, out, _ = cli(capsys, "verify", str(tampered), "--keys", str(keys_file))
    assert status == 1
    failures = [line for line in out.splitlines() if line.startswith("FAIL")]
    expected = {
        f"task {a} record {rec[a][-1].id} (task.resolved): its contents do not match",
        f"task {b} record {rec[b][2].id} (task.resolved): the chain is broken",
        f"task {e} record {first_e} (task.claimed): the chain is broken",
        f"task {voted['id']} record {rec[voted['id']][0].id} (task.created): receipt refused: "
        f"the receipt is another task's (task {g}",
        f"task {f} record {rec[f][0].id}: certified by checkpoint 1 but missing (deleted)",
        f"task {g} record {rec[g][-1].id} (task.resolved): receipt refused: the receipt is of "
        f"another record of the task (record {rec[g][0].id}): replayed",
        f"task {d} record {rec[d][-1].id} (task.resolved): receipt refused: signed with key "
        f"{old[0]}, retired before the record was made",
    }
    for line in expected:
        assert any(failure.startswith(f"FAIL {line}") for failure in failures), (line, out)

    # A damaged bundle: one clear line, never a traceback.
    broken = tmp_path / "broken.json"
    broken.write_text(clean.read_text()[:-200])
    status, out, err = cli(capsys, "verify", str(broken))
    assert status == 2
    assert "truncated" in err
    assert "Traceback" not in err + out
    bundle["records"][0]["id"] = "seven"
    broken.write_text(json.dumps(bundle))
    status, _, err = cli(capsys, "verify", str(broken))
    assert status == 2
    assert "record #0 of the bundle is malformed" in err


async def _old_key(ctx: ServiceContext) -> tuple[str, str]:
    async with ctx.database.transaction(write=False) as uow:
        row = (await uow.connection.execute(select(signing_keys))).one()
    return str(row.kid), Keyring([TEST_ENCRYPTION_KEY]).decrypt(row.private_key)


async def _full_rows(ctx: ServiceContext, task_id: str) -> list[tuple[int, dict[str, Any]]]:
    async with ctx.database.transaction(write=False) as uow:
        rows = await uow.connection.execute(
            select(task_events).where(task_events.c.task_id == uuid.UUID(task_id))
        )
        return [(r.id, {k: v for k, v in r._mapping.items() if k != "id"}) for r in rows]


def _forge(server: LiveServer, old: tuple[str, str], record_id: int) -> str:
    """A receipt of ``record_id``, correct in every field, signed with the retired key."""
    exported = service(server, exported_bundle)["records"]
    record = TrailRecord.from_json(next(r for r in exported if r["id"] == record_id))
    key = Ed25519PrivateKey.from_private_bytes(b64url_decode(old[1]))
    return sign_compact(key, old[0], receipt_claims(record))


def test_the_bundle_verifier_reads_its_own_output() -> None:
    assert verify_bundle(
        {
            "format": "signoff.evidence-bundle/v1",
            "records": [],
            "checkpoints": [],
            "keys": {"keys": []},
        }
    ).ok


def test_records_written_before_the_chain_are_linked_by_the_migration(server: LiveServer) -> None:
    producer = server.new_client("producer", "bot")
    reviewer = server.new_client("reviewer", "rita")
    decide(producer, reviewer)
    waiting = producer.escalate(escalation(subject=copy.deepcopy(SUBJECT))).json()["id"]

    async def again(context: ServiceContext) -> None:
        await downgrade(context.database.engine, "0020")
        await upgrade(context.database.engine)

    service(server, again)  # the chain, keys and receipts go, then come back
    server.clock.advance(evidence.KEY_TTL.total_seconds())  # the server loads the new key
    token = reviewer.claim(waiting).json()["lease_token"]
    task = reviewer.get(f"/tasks/{waiting}").json()
    body = {"decision": "APPROVED", "revision": 1, "digest": task["digest"]}
    assert reviewer.resolve(waiting, token, body).status_code == 200
    bundle = service(server, exported_bundle)
    report = verify_bundle(bundle)
    assert report.failures == []
    assert (report.records, report.tasks) == (6, 2)


def test_two_processes_starting_at_once_share_one_signing_key(server: LiveServer) -> None:
    """The database holds one live key at most: of processes making one at once (or
    rotating at once), one key wins and every process signs with it."""
    tamper(server, update(signing_keys).values(retired_at=server.clock.now(), private_key=None))

    async def at_once(work: Any) -> list[str]:
        databases = [Database(create_engine(server.settings)) for _ in range(3)]
        try:
            contexts = [
                ServiceContext(database=d, settings=server.settings, clock=server.clock)
                for d in databases
            ]
            return list(await asyncio.gather(*(work(context) for context in contexts)))
        finally:
            for database in databases:
                await database.dispose()

    async def live(context: ServiceContext) -> list[str]:
        async with context.database.transaction(write=False) as uow:
            found = await uow.connection.execute(
                select(signing_keys.c.kid).where(signing_keys.c.retired_at.is_(None))
            )
            return [str(kid) for kid in found.scalars()]

    kids = asyncio.run(at_once(evidence.ensure_signing_key))
    assert len(set(kids)) == 1, kids
    assert service(server, live) == kids[:1]
    # Rotations at once (one after the other, where writes take turns): one key is live.
    rotated = asyncio.run(at_once(evidence.rotate_signing_key))
    (live_kid,) = service(server, live)
    assert live_kid in rotated
    assert kids[0] not in rotated
    # Not even a direct insert adds a second live key.
    with pytest.raises(IntegrityError):
        tamper(
            server,
            insert(signing_keys).values(
                kid="second", public_key="x", private_key="y", created_at=server.clock.now()
            ),
        )


@pytest.fixture
def every_grant_used(make_settings, clock) -> Any:  # type: ignore[no-untyped-def]
    """A server on which a remembered approval always decides (no audit sample)."""
    with live_server(make_settings(grant_audit_share=0.0), clock) as live:
        yield live


def test_each_kind_of_record_has_a_receipt_the_published_keys_verify(
    every_grant_used: LiveServer,
) -> None:
    """A revision request with fields, an expiry by the sweeper, an execution and its
    completed actions, an approval with edits and one by a grant: each record's receipt,
    read through the SDK, verifies with the published keys and states what happened."""
    server = every_grant_used
    producer = server.new_client("producer", "bot")
    rita = server.new_client("reviewer", "rita")
    subject = {**SUBJECT, "actions": [{"id": "pay"}, {"id": "notify"}]}
    sdk = Signoff(server.base_url, str(rita.key), backoff=0)
    keys = sdk.signing_keys()

    def stated(task_id: str) -> dict[str, dict[str, Any]]:
        """The task's receipts verified, the last of each action by its action."""
        listed = sdk.receipts(task_id)
        assert [r.prev_hash for r in listed[1:]] == [r.hash for r in listed[:-1]]
        verified = [verify_receipt(str(r.receipt), keys, task_id=task_id) for r in listed]
        return {claims["action"]: claims for claims in verified}

    def held(body: dict[str, Any]) -> tuple[dict[str, Any], str]:
        made = producer.escalate(body)
        assert made.status_code == 201, made.text
        return made.json(), rita.claim(made.json()["id"]).json()["lease_token"]

    # Changes asked for, field by field.
    asked, token = held(escalation(subject=copy.deepcopy(subject)))
    fields = [{"path": "/amount", "reason": "name the currency rate"}]
    pin = {"revision": 1, "digest": asked["digest"]}
    body = pin | {"decision": "REVISION_REQUESTED", "notes": "see the field", "fields": fields}
    assert rita.resolve(asked["id"], token, body).status_code == 200
    claims = stated(asked["id"])["resolve"]
    assert (claims["decision"], claims["revision"], claims["digest"]) == (
        "REVISION_REQUESTED",
        1,
        asked["digest"],
    )
    assert (claims["who"]["principal"], claims["who"]["door"]) == ("rita", "api")

    # Expired by the sweeper when the producer's timeout ran out.
    timed = producer.escalate(escalation(timeout={"after_seconds": 60, "outcome": "expire"}))
    server.clock.advance(60)
    service(server, lambda ctx: Sweeper(ctx).sweep_once())
    expired = [c for c in stated(timed.json()["id"]).values() if c["outcome"] == "EXPIRED"]
    assert len(expired) == 1, expired

    # Approved with edits: the receipt names the reviewer's revision and its digest.
    edited_subject = {**subject, "title": "Pay ACME Ltd"}
    editable, token = held(escalation(subject=copy.deepcopy(subject), editable=["/title"]))
    pin = {"revision": 1, "digest": editable["digest"]}
    body = pin | {"decision": "APPROVED_WITH_EDITS", "subject": edited_subject}
    answer = rita.resolve(editable["id"], token, body | {"remember_seconds": 3600})
    assert answer.status_code == 200, answer.text
    approved = answer.json()
    claims = verify_receipt(
        answer.headers["Signoff-Receipt"],
        keys,
        task_id=editable["id"],
        digest=approved["approved_digest"],
        decision="APPROVED_WITH_EDITS",
    )
    assert (claims["revision"], claims["digest"]) == (2, approved["digest"])
    assert claims["details"]["edited"]["from_digest"] == editable["digest"]
    grant_id = claims["details"]["remembered"]["id"]

    # The execution gate, then each action completed: each a receipt.
    gate = producer.post(
        f"/tasks/{editable['id']}/execute",
        json={"revision": 2, "digest": approved["digest"], "operation_id": "op-1"},
    )
    assert gate.status_code == 200, gate.text
    for action in ("pay", "notify"):
        done = producer.post(
            f"/tasks/{editable['id']}/actions/{action}/complete",
            headers={"X-Execution-Token": gate.json()["execution_token"]},
            json={"operation_id": "op-1", "result": {"ok": True}},
        )
        assert done.status_code == 200, done.text
    actions = stated(editable["id"])
    assert actions["execute"]["type"] == "task.execution_started"
    assert actions["complete_action"]["type"] == "task.action_completed"

    # The same edited action again: approved by the grant the edit remembered.
    again = producer.escalate(escalation(subject=copy.deepcopy(edited_subject)))
    assert again.json()["decision"] == "APPROVED_BY_GRANT", again.text

    async def by_grant() -> list[Any]:
        async with AsyncSignoff(server.base_url, str(rita.key), backoff=0) as client:
            return [r.receipt for r in await client.receipts(again.json()["id"])]

    claims = verify_receipt(asyncio.run(by_grant())[-1], keys, decision="APPROVED_BY_GRANT")
    assert claims["grant_id"] == grant_id
    sdk.close()
