"""Signed callbacks: outbox → deliveries → a real HTTP receiver."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from standardwebhooks.webhooks import Webhook

from signoff.client import verify_event, verify_receipt
from signoff.domain.clock import ManualClock
from signoff.domain.evidence import b64url_decode
from signoff.services.context import ServiceContext
from signoff.settings import Settings
from signoff.store.runtime.database import Database, create_engine
from signoff.webhooks import WebhookVerificationError, verify, verify_asymmetric
from signoff.workers.dispatcher import Dispatcher
from tests.receiver import Answer, Receiver
from tests.support import LiveServer, escalation, live_server


async def _dispatch(settings: Settings, clock: ManualClock, dispatchers: int) -> int:
    database = Database(create_engine(settings))
    try:
        context = ServiceContext(database=database, settings=settings, clock=clock)
        workers = [Dispatcher(context) for _ in range(dispatchers)]
        counts = await asyncio.gather(*(w.run_once() for w in workers))
        return sum(counts)
    finally:
        await database.dispose()


def dispatch(server: LiveServer, dispatchers: int = 1) -> int:
    """One round of ``dispatchers`` concurrent dispatchers; returns attempts made."""
    return asyncio.run(_dispatch(server.settings, server.clock, dispatchers))


@pytest.fixture
def hooks(make_settings, clock: ManualClock) -> Iterator[LiveServer]:  # type: ignore[no-untyped-def]
    settings = make_settings(
        run_workers=False, webhook_allow_private_networks=True, webhook_retry_jitter=0
    )
    with live_server(settings, clock) as live:
        yield live


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


def register(server: LiveServer, url: str, **filters: object) -> dict:  # type: ignore[type-arg]
    with server.admin() as admin:
        response = admin.post("/webhook-endpoints", json={"url": url, **filters})
    assert response.status_code == 201, response.text
    return response.json()


def resolved_task(server: LiveServer) -> str:
    with (
        server.new_client("producer", "bot") as producer,
        server.new_client("reviewer", "alice") as alice,
    ):
        task_id = producer.escalate(escalation()).json()["id"]
        token = alice.claim(task_id).json()["lease_token"]
        assert alice.resolve(task_id, token).status_code == 200
    return str(task_id)


def test_the_resolved_callback_reaches_a_real_receiver_signed_both_ways(hooks, receiver) -> None:
    endpoint = register(hooks, f"{receiver.url}/hooks", event_types=["task.resolved"])
    secret = endpoint["secret"]
    assert secret.startswith("whsec_")
    task_id = resolved_task(hooks)
    assert dispatch(hooks) == 1
    (request,) = receiver.received
    envelope = json.loads(request.body)
    assert request.path == "/hooks"
    assert envelope["type"] == "task.resolved"
    assert envelope["data"]["id"] == task_id
    assert envelope["data"]["decision"] == "REJECTED"
    assert request.headers["webhook-id"] == envelope["id"]
    # The body carries the signed receipt of the decision, checked with public keys only.
    jwks = hooks.client(None).get("/.well-known/jwks.json").json()
    receipt = verify_receipt(envelope["receipt"], jwks, task_id=task_id, decision="REJECTED")
    assert (receipt["type"], receipt["task_version"]) == ("task.resolved", 3)
    assert verify_event(request.headers, request.body, secret).receipt == envelope["receipt"]
    expected = "sha256=" + hmac.new(secret.encode(), request.body, hashlib.sha256).hexdigest()
    assert request.headers["X-Signature-256"] == expected
    Webhook(secret).verify(request.body, request.headers)  # the standardwebhooks library
    verify(request.headers, request.body, secret)  # our helper, Standard Webhooks scheme
    github_only = {"X-Signature-256": expected}
    with pytest.raises(WebhookVerificationError):  # no timestamp: replayable, so opt-in only
        verify(github_only, request.body, secret)
    verify(github_only, request.body, secret, allow_body_only_signature=True)
    with pytest.raises(WebhookVerificationError):
        verify(request.headers, request.body + b" ", secret)
    assert dispatch(hooks) == 0  # delivered once


def test_failures_are_retried_on_schedule_with_the_same_webhook_id(hooks, receiver) -> None:
    register(hooks, receiver.url, event_types=["task.resolved"])
    receiver.answer(Answer(500), Answer(500))
    task_id = resolved_task(hooks)
    assert dispatch(hooks) == 1
    assert dispatch(hooks) == 0  # the next attempt waits 5 s
    hooks.clock.advance(5)
    assert dispatch(hooks) == 1
    hooks.clock.advance(299)
    assert dispatch(hooks) == 0
    hooks.clock.advance(1)
    assert dispatch(hooks) == 1
    assert len(receiver.ids()) == 3
    assert len(set(receiver.ids())) == 1
    with hooks.admin() as admin:
        (delivery,) = admin.get(f"/tasks/{task_id}/deliveries").json()["items"]
    assert delivery["status"] == "SUCCEEDED"
    assert [a["status_code"] for a in delivery["attempts"]] == [500, 500, 200]
    assert all(a["latency_ms"] >= 0 for a in delivery["attempts"])


def test_410_gone_disables_the_endpoint(hooks, receiver) -> None:
    endpoint = register(hooks, receiver.url)
    receiver.answer(Answer(410))
    resolved_task(hooks)
    dispatch(hooks)
    with hooks.admin() as admin:
        shown = admin.get(f"/webhook-endpoints/{endpoint['id']}").json()
    assert shown["enabled"] is False
    assert "410" in shown["disabled_reason"]
    resolved_task(hooks)
    dispatch(hooks)
    assert len(receiver.received) == 1


def test_a_redirect_is_a_failure_and_is_not_followed(hooks, receiver) -> None:
    register(hooks, f"{receiver.url}/first", event_types=["task.created"])
    receiver.answer(Answer(302, {"Location": f"{receiver.url}/elsewhere"}))
    with hooks.new_client("producer") as producer:
        producer.escalate(escalation())
    dispatch(hooks)
    assert [r.path for r in receiver.received] == ["/first"]
    (delivery,) = hooks.rows("webhook_deliveries")
    assert (delivery["status"], delivery["last_status_code"]) == ("PENDING", 302)


def test_exhausted_deliveries_are_dead_lettered_and_can_be_redelivered(
    make_settings, clock, receiver
) -> None:
    settings = make_settings(
        run_workers=False,
        webhook_allow_private_networks=True,
        webhook_retry_jitter=0,
        webhook_retry_schedule="0,10",
    )
    with live_server(settings, clock) as server:
        endpoint = register(server, receiver.url, event_types=["task.resolved"])
        receiver.answer(Answer(503), Answer(500))
        resolved_task(server)
        dispatch(server)
        server.clock.advance(10)
        dispatch(server)
        with server.admin() as admin:
            (dead,) = admin.get(f"/webhook-endpoints/{endpoint['id']}/deliveries").json()["items"]
            assert dead["status"] == "DEAD"
            assert admin.post(f"/deliveries/{dead['id']}/redeliver").status_code == 202
            dispatch(server)
            (again,) = admin.get(f"/webhook-endpoints/{endpoint['id']}/deliveries").json()["items"]
        assert again["status"] == "SUCCEEDED"
        assert len(again["attempts"]) == 3
        assert len(set(receiver.ids())) == 1


def test_retry_after_is_honoured(hooks, receiver) -> None:
    register(hooks, receiver.url, event_types=["task.resolved"])
    receiver.answer(Answer(429, {"Retry-After": "120"}))
    resolved_task(hooks)
    dispatch(hooks)
    hooks.clock.advance(119)
    assert dispatch(hooks) == 0
    hooks.clock.advance(1)
    assert dispatch(hooks) == 1


def test_a_tasks_events_reach_an_endpoint_in_order(hooks, receiver) -> None:
    register(hooks, receiver.url)
    receiver.answer(Answer(500))
    with hooks.new_client("producer") as producer, hooks.new_client("reviewer") as alice:
        task_id = producer.escalate(escalation()).json()["id"]
        alice.claim(task_id)
    dispatch(hooks)  # task.created fails; task.claimed must wait behind it
    assert [json.loads(r.body)["type"] for r in receiver.received] == ["task.created"]
    hooks.clock.advance(5)
    dispatch(hooks)
    dispatch(hooks)
    assert [json.loads(r.body)["type"] for r in receiver.received] == [
        "task.created",
        "task.created",
        "task.claimed",
    ]


def test_filters_choose_the_events_an_endpoint_gets(hooks, receiver) -> None:
    register(hooks, receiver.url, event_types=["task.created"], entity_types=["invoice"])
    with hooks.new_client("producer") as producer:
        producer.escalate(escalation(entity_type="transaction"))
        wanted = producer.escalate(escalation(entity_type="invoice")).json()["id"]
    dispatch(hooks)
    assert [json.loads(r.body)["data"]["id"] for r in receiver.received] == [wanted]


def test_two_dispatchers_never_send_an_attempt_twice(hooks, receiver) -> None:
    register(hooks, receiver.url, event_types=["task.created"])
    with hooks.new_client("producer") as producer:
        for _ in range(30):
            producer.escalate(escalation())
    while dispatch(hooks, dispatchers=2):
        pass
    counts = Counter(receiver.ids())
    assert len(counts) == 30
    assert set(counts.values()) == {1}


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/x",
        "http://localhost/x",
        "http://2130706433/",
        "http://0x7f.1/",
        "http://10.0.0.1/",
        "http://172.16.0.1/",
        "http://192.168.1.1/",
        "http://169.254.169.254/latest",
        "http://100.64.0.1/",
        "http://0.0.0.0/",
        "http://224.0.0.1/",
        "http://[::1]/",
        "http://[fd00::1]/",
        "http://[fe80::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:169.254.169.254]/",
        "ftp://example.com/",
        "http://user:pw@8.8.8.8/",
        "http://[::127.0.0.1]/",
        "http://[::ffff:0:7f00:1]/",
        "http://[64:ff9b::7f00:1]/",
        "http://[64:ff9b:1::a00:1]/",
        "http://[2002:c0a8:101::1]/",
        "http://8.8.8.8:0/",
    ],
)
def test_the_ssrf_guard_refuses_non_public_targets(server: LiveServer, url: str) -> None:
    with server.admin() as admin:
        response = admin.post("/webhook-endpoints", json={"url": url})
    assert response.status_code == 422
    assert response.json()["error_code"] == "ERR_WEBHOOK_URL_FORBIDDEN"
    assert server.count("webhook_endpoints") == 0


def test_during_a_rotation_both_secrets_verify(hooks, receiver) -> None:
    endpoint = register(hooks, receiver.url, event_types=["task.resolved"])
    with hooks.admin() as admin:
        rotated = admin.post(f"/webhook-endpoints/{endpoint['id']}/rotate-secret").json()
    resolved_task(hooks)
    dispatch(hooks)
    (request,) = receiver.received
    Webhook(endpoint["secret"]).verify(request.body, request.headers)
    Webhook(rotated["secret"]).verify(request.body, request.headers)
    expected = (
        "sha256=" + hmac.new(rotated["secret"].encode(), request.body, hashlib.sha256).hexdigest()
    )
    assert request.headers["X-Signature-256"] == expected
    hooks.clock.advance(86400)
    resolved_task(hooks)
    dispatch(hooks)
    latest = receiver.received[-1]
    with pytest.raises(WebhookVerificationError):
        Webhook(endpoint["secret"]).verify(latest.body, latest.headers)


def test_secrets_never_appear_in_listings(hooks, receiver) -> None:
    endpoint = register(hooks, receiver.url)
    with hooks.admin() as admin:
        listed = (
            admin.get("/webhook-endpoints").text
            + admin.get(f"/webhook-endpoints/{endpoint['id']}").text
        )
        patched = admin.patch(f"/webhook-endpoints/{endpoint['id']}", json={"enabled": False})
    assert endpoint["secret"] not in listed + patched.text
    assert patched.json()["enabled"] is False


def test_only_admins_manage_endpoints(hooks, receiver) -> None:
    with hooks.new_client("supervisor") as supervisor:
        assert supervisor.post("/webhook-endpoints", json={"url": receiver.url}).status_code == 403


def test_the_github_known_answer() -> None:
    from signoff.webhooks import x_signature_256

    assert (
        x_signature_256("It's a Secret to Everybody", b"Hello, World!")
        == "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    )


def test_the_service_delivers_on_its_own_when_workers_run(make_settings, clock, receiver) -> None:
    settings = make_settings(webhook_allow_private_networks=True, dispatcher_poll_seconds=0.05)
    with live_server(settings, clock) as server:
        register(server, receiver.url, event_types=["task.resolved"])
        resolved_task(server)
        import time

        deadline = time.monotonic() + 20
        while not receiver.received and time.monotonic() < deadline:
            time.sleep(0.02)
    assert len(receiver.received) == 1


NODE_VERIFIER = Path(__file__).resolve().parents[1] / "node" / "verify.mjs"


def test_node_libraries_verify_the_signatures_independently(hooks, receiver) -> None:
    endpoint = register(hooks, receiver.url, event_types=["task.resolved"])
    resolved_task(hooks)
    dispatch(hooks)
    (request,) = receiver.received
    document = {
        "secret": endpoint["secret"],
        "headers": request.headers,
        "body": request.body.decode(),
    }
    result = subprocess.run(
        ["node", str(NODE_VERIFIER)],
        input=json.dumps(document),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stdout.strip()) == (0, "ok"), result.stderr
    document["body"] += " "
    tampered = subprocess.run(
        ["node", str(NODE_VERIFIER)],
        input=json.dumps(document),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert tampered.returncode != 0


def test_an_endpoint_failing_for_five_days_is_disabled(hooks, receiver) -> None:
    endpoint = register(hooks, receiver.url, event_types=["task.created"])
    receiver.answer(*[Answer(500)] * 50)  # never succeeds
    with hooks.new_client("producer") as producer:
        producer.escalate(escalation())
        dispatch(hooks)
        hooks.clock.advance(4 * 86400)
        producer.escalate(escalation())
        dispatch(hooks)
        with hooks.admin() as admin:
            assert admin.get(f"/webhook-endpoints/{endpoint['id']}").json()["enabled"] is True
        hooks.clock.advance(86400)
        producer.escalate(escalation())
        dispatch(hooks)
    with hooks.admin() as admin:
        shown = admin.get(f"/webhook-endpoints/{endpoint['id']}").json()
    assert (shown["enabled"], shown["disabled_reason"]) == (False, "failing for 5 days")


def test_postgresql_wakes_an_idle_dispatcher_without_polling(
    postgres_database: str, receiver
) -> None:
    from datetime import UTC, datetime

    from tests.conftest import reset_postgres
    from tests.support import ADMIN_KEY

    reset_postgres(postgres_database)
    settings = Settings(
        database_url=postgres_database,
        bootstrap_admin_key=ADMIN_KEY,
        webhook_allow_private_networks=True,
        dispatcher_poll_seconds=60,  # only LISTEN/NOTIFY can wake it within the wait below
    )
    with live_server(settings, ManualClock(datetime.now(UTC))) as server:
        register(server, receiver.url, event_types=["task.resolved"])
        import time

        time.sleep(0.5)  # let the dispatcher go idle on its first empty round
        resolved_task(server)
        deadline = time.monotonic() + 15
        while not receiver.received and time.monotonic() < deadline:
            time.sleep(0.01)
    assert len(receiver.received) == 1


def test_the_host_header_names_the_port(hooks, receiver) -> None:
    register(hooks, receiver.url, event_types=["task.created"])
    with hooks.new_client("producer") as producer:
        producer.escalate(escalation())
    dispatch(hooks)
    (request,) = receiver.received
    assert request.headers["Host"] == receiver.url.removeprefix("http://")


def test_a_trickling_answer_is_a_timeout_not_a_success(make_settings, clock, receiver) -> None:
    settings = make_settings(
        run_workers=False,
        webhook_allow_private_networks=True,
        webhook_retry_jitter=0,
        webhook_timeout_seconds=1,
    )
    with live_server(settings, clock) as server:
        register(server, receiver.url, event_types=["task.created"])
        receiver.answer(Answer(200, trickle_bytes=20))  # ten seconds of body, one byte at a time
        with server.new_client("producer") as producer:
            producer.escalate(escalation())
        dispatch(server)
        (delivery,) = server.rows("webhook_deliveries")
    assert (delivery["status"], delivery["last_error"]) == ("PENDING", "timeout")


def test_one_slow_receiver_does_not_hold_up_another(make_settings, clock) -> None:
    import threading
    import time

    release = threading.Event()
    settings = make_settings(webhook_allow_private_networks=True, dispatcher_poll_seconds=0.05)
    with Receiver() as slow, Receiver() as fast, live_server(settings, clock) as server:
        slow.answer(Answer(200, hold=release))
        register(server, slow.url, event_types=["task.created"], entity_types=["slow"])
        register(server, fast.url, event_types=["task.created"], entity_types=["fast"])
        with server.new_client("producer") as producer:
            producer.escalate(escalation(entity_type="slow"))
            deadline = time.monotonic() + 20
            while not slow.received and time.monotonic() < deadline:
                time.sleep(0.02)
            producer.escalate(escalation(entity_type="fast"))
            while not fast.received and time.monotonic() < deadline:
                time.sleep(0.02)
        reached_fast_while_slow_held = bool(fast.received) and not release.is_set()
        release.set()
    assert reached_fast_while_slow_held


def test_deleting_an_endpoint_mid_delivery_is_harmless(hooks, receiver) -> None:
    import threading

    release = threading.Event()
    endpoint = register(hooks, receiver.url, event_types=["task.created"])
    receiver.answer(Answer(200, hold=release))
    with hooks.new_client("producer") as producer:
        producer.escalate(escalation())
    outcome: list[object] = []
    worker = threading.Thread(target=lambda: outcome.append(dispatch(hooks)))
    worker.start()
    for _ in range(1000):  # at most 20 s
        if receiver.received:
            break
        worker.join(timeout=0.02)
    assert receiver.received
    with hooks.admin() as admin:
        assert admin.delete(f"/webhook-endpoints/{endpoint['id']}").status_code == 204
    release.set()
    worker.join(timeout=30)
    assert outcome == [1]  # the round finished without raising
    assert hooks.count("webhook_deliveries") == 0
    assert hooks.count("delivery_attempts") == 0


def test_a_commit_wakes_the_dispatcher_of_the_same_process(make_settings, clock, receiver) -> None:
    import time

    # A poll far longer than the wait below: only the in-process wake-up can deliver in time
    # (on PostgreSQL LISTEN/NOTIFY would too; on SQLite it is the only way).
    settings = make_settings(webhook_allow_private_networks=True, dispatcher_poll_seconds=60)
    with live_server(settings, clock) as server:
        register(server, receiver.url, event_types=["task.resolved"])
        time.sleep(0.5)  # let the dispatcher go idle on its first empty round
        resolved_task(server)
        deadline = time.monotonic() + 15
        while not receiver.received and time.monotonic() < deadline:
            time.sleep(0.01)
    assert len(receiver.received) == 1


NODE_V1A = """
import { createPublicKey, verify } from "node:crypto";
const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const { jwk, headers, body } = JSON.parse(Buffer.concat(chunks).toString("utf8"));
const key = createPublicKey({ key: jwk, format: "jwk" });
const content = Buffer.from(`${headers["webhook-id"]}.${headers["webhook-timestamp"]}.${body}`);
const ok = headers["webhook-signature"].split(" ").some((s) => s.startsWith("v1a,") &&
  verify(null, content, key, Buffer.from(s.slice(4), "base64")));
console.log(ok ? "ok" : "rejected");
"""


def test_asymmetric_signatures_verify_with_the_public_key_only(hooks, receiver) -> None:
    endpoint = register(
        hooks, receiver.url, event_types=["task.resolved"], asymmetric_signature=True
    )
    assert endpoint["asymmetric_signature"] is True
    resolved_task(hooks)
    assert dispatch(hooks) == 1
    (request,) = receiver.received
    versions = [s.split(",")[0] for s in request.headers["webhook-signature"].split(" ")]
    assert versions == ["v1", "v1a"]
    Webhook(endpoint["secret"]).verify(request.body, request.headers)  # v1 still verifies
    (jwk,) = hooks.client(None).get("/.well-known/jwks.json").json()["keys"]
    public_key = Ed25519PublicKey.from_public_bytes(b64url_decode(jwk["x"]))
    verify_asymmetric(request.headers, request.body, public_key)
    with pytest.raises(WebhookVerificationError):
        verify_asymmetric(request.headers, request.body + b" ", public_key)
    lowered = {k.lower(): v for k, v in request.headers.items()}
    node = subprocess.run(
        ["node", "--input-type=module", "-e", NODE_V1A],
        input=json.dumps({"jwk": jwk, "headers": lowered, "body": request.body.decode()}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert node.stdout.strip() == "ok", node.stderr
    with hooks.admin() as admin:
        changed = admin.patch(
            f"/webhook-endpoints/{endpoint['id']}", json={"asymmetric_signature": False}
        )
        assert changed.json()["asymmetric_signature"] is False
        refused = admin.patch(
            f"/webhook-endpoints/{endpoint['id']}", json={"asymmetric_signature": None}
        )
        assert refused.status_code == 422
