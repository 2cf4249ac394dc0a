"""The TypeScript SDK's ``verifyReceipt`` on receipts a real server signed, on both
engines: the receipts and keys fetched through the SDK verify; a changed claim, another
key's signature, a retired key's and a receipt of something else are refused; and on each
receipt, real or tampered with, Python's ``verify_receipt`` gives the same verdict, the
same claims or the same reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import select

from signoff.client import ReceiptInvalid, verify_receipt
from signoff.domain.evidence import b64url, b64url_decode, sign_compact
from signoff.services import evidence
from signoff.services.context import ServiceContext
from signoff.store.tables import signing_keys
from tests.integration.test_evidence import decide, service
from tests.support import ADMIN_KEY, LiveServer
from tests.typescript import BUILT_TESTS, build, node

RETIRED = "signed with a key retired before the record was made"


@pytest.fixture(scope="module")
def built() -> None:
    build()


async def _only_key(ctx: ServiceContext) -> tuple[str, Ed25519PrivateKey]:
    async with ctx.database.transaction(write=False) as uow:
        row = (await uow.connection.execute(select(signing_keys))).one()
    raw = b64url_decode(ctx.keyring.decrypt(row.private_key))
    return str(row.kid), Ed25519PrivateKey.from_private_bytes(raw)


def _claims(receipt: str) -> dict[str, Any]:
    return json.loads(b64url_decode(receipt.split(".")[1]))  # type: ignore[no-any-return]


def _python_verdict(case: dict[str, Any]) -> dict[str, Any]:
    expected = case["expected"]
    try:
        claims = verify_receipt(
            case["receipt"],
            case["jwks"],
            task_id=expected.get("taskId"),
            digest=expected.get("digest"),
            decision=expected.get("decision"),
        )
    except ReceiptInvalid as error:
        return {"refused": str(error)}
    return {"claims": claims}


def test_typescript_and_python_give_the_same_verdict_on_real_and_tampered_receipts(
    built: None, server: LiveServer, tmp_path: Path
) -> None:
    producer = server.new_client("producer", "bot")
    reviewer = server.new_client("reviewer", "rita")
    approved, answer = decide(producer, reviewer)
    decision_receipt = answer.headers["Signoff-Receipt"]
    digest = answer.json()["digest"]

    # The key is rotated, and the next decision is made after the old key's exp.
    old_kid, old_key = service(server, _only_key)
    new_kid = service(server, evidence.rotate_signing_key)
    server.clock.advance(2 * evidence.KEY_TTL.total_seconds() + 1)
    rejected, later = decide(producer, reviewer, "REJECTED")
    jwks = server.client(None).get("/.well-known/jwks.json").json()
    assert {k["kid"]: "exp" in k for k in jwks["keys"]} == {new_kid: False, old_kid: True}

    listed = {
        task_id: [
            item["receipt"] for item in reviewer.get(f"/tasks/{task_id}/receipts").json()["items"]
        ]
        for task_id in (approved, rejected)
    }
    head, body, signature = later.headers["Signoff-Receipt"].split(".")
    later_claims = _claims(later.headers["Signoff-Receipt"])
    # The decision turned round, the header and signature kept.
    turned = b64url(json.dumps({**later_claims, "decision": "APPROVED"}).encode())
    stranger = Ed25519PrivateKey.generate()
    none_header = b64url(json.dumps({"alg": "none", "kid": new_kid}).encode())
    everything = {"taskId": approved, "digest": digest, "decision": "APPROVED"}

    # Each case, and the verdict it must get (None: its claims).
    cases: list[tuple[str, dict[str, Any], dict[str, str], str | None]] = [
        *((r, jwks, {"taskId": t}, None) for t, receipts in listed.items() for r in receipts),
        (decision_receipt, jwks, everything, None),
        (decision_receipt, jwks, {**everything, "decision": "REJECTED"},
         'the receipt\'s decision is "APPROVED", not "REJECTED"'),
        (decision_receipt, jwks, {"digest": "0" * 64},
         f'the receipt\'s digest is "{digest}", not "{"0" * 64}"'),
        (decision_receipt, jwks, {"taskId": rejected},
         f'the receipt\'s task_id is "{approved}", not "{rejected}"'),
        (f"{head}.{turned}.{signature}", jwks, {}, "the signature does not verify"),
        (sign_compact(stranger, new_kid, later_claims), jwks, {}, "the signature does not verify"),
        (sign_compact(stranger, "stranger", later_claims), jwks, {},
         'signed by an unknown key "stranger"'),
        (sign_compact(old_key, old_kid, later_claims), jwks, {}, RETIRED),
        (f"{head}.{body}.{signature}", {"keys": []}, {}, f'signed by an unknown key "{new_kid}"'),
        (f"{none_header}.{body}.{signature}", jwks, {}, "not signed with EdDSA"),
        (f"{head}.{body}", jwks, {}, "not a compact JWS"),
    ]  # fmt: skip
    given = [{"receipt": r, "jwks": k, "expected": e} for r, k, e, _ in cases]
    (tmp_path / "cases.json").write_text(
        json.dumps({"key": reviewer.key, "task_ids": [approved, rejected], "cases": given})
    )
    env = {"SIGNOFF_TEST_URL": server.base_url, "SIGNOFF_TEST_ADMIN_KEY": ADMIN_KEY}
    program = str(BUILT_TESTS / "server" / "receipts-program.js")
    answered = json.loads(node(program, str(tmp_path / "cases.json"), env=env))

    # What the SDK fetched verifies, and states what Python reads from the same receipts.
    for task_id, receipts in listed.items():
        assert answered["fetched"][task_id] == [
            verify_receipt(r, jwks, task_id=task_id) for r in receipts
        ]
    assert [c["action"] for c in answered["fetched"][rejected]][-1] == "resolve"

    python = [_python_verdict(case) for case in given]
    assert answered["verdicts"] == python
    for (receipt, _, _, reason), verdict in zip(cases, python, strict=True):
        if reason is None:
            assert verdict == {"claims": _claims(receipt)}
        else:
            assert verdict == {"refused": reason}
