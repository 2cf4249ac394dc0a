"""Durable waiting: deadlines, escalation levels, a replica-safe sweeper,
notifications over real SMTP, resume links, cancellation. Time moves by the test clock."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from email.header import decode_header, make_header
from typing import Any

import httpx
import pytest

from signoff.domain.clock import ManualClock
from signoff.domain.tasks import Task
from signoff.services.context import ServiceContext
from signoff.settings import Settings
from signoff.store.runtime.database import Database, create_engine
from signoff.workers.dispatcher import Dispatcher
from signoff.workers.notifier import Notifier
from signoff.workers.sweeper import Sweeper
from tests.mailbox import Mailbox
from tests.receiver import Receiver
from tests.support import Client, LiveServer, escalation, live_server

PUBLIC = "http://signoff.test"
POLICY = {
    "name": "three-steps",
    "levels": [
        {"after_seconds": 60, "action": "remind", "notify": ["group:reviewers"]},
        {
            "after_seconds": 60,
            "action": "reassign",
            "assign_group": "supervisors",
            "notify": ["group:supervisors"],
        },
        {"after_seconds": 60, "action": "expire", "notify": []},
    ],
}
SUMMARY = {
    "recommendation": "REJECT",
    "rationale": "Counterparty country is on the watch list.",
    "risks": ["sanctions exposure"],
    "evidence_links": ["https://evidence.example/aml-04"],
    "generated_by": "risk-agent v2",
}


async def _with_context(
    settings: Settings, clock: ManualClock, work: Callable[[ServiceContext], Any]
) -> Any:
    database = Database(create_engine(settings))
    try:
        return await work(ServiceContext(database=database, settings=settings, clock=clock))
    finally:
        await database.dispose()


def sweep(
    server: LiveServer, *, sweepers: int = 1, after_each: Callable[[Task], None] | None = None
) -> int:
    async def work(context: ServiceContext) -> int:
        counts = await asyncio.gather(
            *(Sweeper(context, after_each=after_each).sweep_once() for _ in range(sweepers))
        )
        return sum(counts)

    return int(asyncio.run(_with_context(server.settings, server.clock, work)))


def send_mail(server: LiveServer) -> int:
    return int(
        asyncio.run(_with_context(server.settings, server.clock, lambda c: Notifier(c).send_once()))
    )


def deliver(server: LiveServer) -> int:
    return int(
        asyncio.run(
            _with_context(server.settings, server.clock, lambda c: Dispatcher(c).run_once())
        )
    )


@pytest.fixture
def mailbox() -> Iterator[Mailbox]:
    with Mailbox() as box:
        yield box


@pytest.fixture
def waiting(make_settings, clock: ManualClock, mailbox: Mailbox) -> Iterator[LiveServer]:  # type: ignore[no-untyped-def]
    settings = make_settings(
        run_workers=False,
        smtp_host="127.0.0.1",
        smtp_port=mailbox.port,
        public_base_url=PUBLIC,
        secret_key="test-secret-key-for-csrf",
        webhook_allow_private_networks=True,
        webhook_retry_jitter=0,
    )
    with live_server(settings, clock) as server:
        with server.admin() as admin:
            assert admin.post("/escalation-policies", json=POLICY).status_code == 201
        yield server


def person(server: LiveServer, role: str, principal: str, groups: list[str]) -> Client:
    with server.admin() as admin:
        response = admin.post(
            "/api-keys",
            json={
                "role": role,
                "principal_id": principal,
                "groups": groups,
                "email": f"{principal}@example.org",
            },
        )
    assert response.status_code == 201, response.text
    return server.client(response.json()["key"], principal)


def links_in(mailbox: Mailbox, address: str) -> list[str]:
    return [
        link
        for message in mailbox.to(address)
        for link in re.findall(re.escape(PUBLIC) + r"/r/[A-Za-z0-9_-]+", Mailbox.body(message))
    ]


def local(server: LiveServer, link: str) -> str:
    return link.replace(PUBLIC, server.base_url)


def waiting_task(server: LiveServer, producer: Client, **extra: Any) -> dict[str, Any]:
    body = escalation(policy="three-steps", assigned_group="reviewers", summary=SUMMARY, **extra)
    response = producer.escalate(body)
    assert response.status_code == 201, response.text
    return dict(response.json())


def events(client: Client, task_id: str) -> list[dict[str, Any]]:
    return list(client.get(f"/tasks/{task_id}/events").json()["items"])


def test_a_task_walks_remind_reassign_expire(waiting: LiveServer, mailbox: Mailbox) -> None:
    server = waiting
    producer = server.new_client("producer", "aml-bot")
    alice = person(server, "reviewer", "alice", ["reviewers"])
    sam = person(server, "supervisor", "sam", ["supervisors"])
    with server.admin() as admin:
        hook = Receiver().__enter__()
        admin.post(
            "/webhook-endpoints",
            json={"url": hook.url, "event_types": ["task.expired", "task.escalated"]},
        )
    task = waiting_task(server, producer)
    assert (task["escalation_level"], task["policy"], task["assigned_group"]) == (
        0,
        "three-steps",
        "reviewers",
    )
    assert task["summary"]["label"].startswith("AI recommendation")
    assert sweep(server) == 0

    # Level 1: a reminder reaches the reviewers' real SMTP inbox, with a decision link.
    server.clock.advance(60)
    assert sweep(server) == 1
    send_mail(server)
    reminder = mailbox.to("alice@example.org")[-1]
    body = Mailbox.body(reminder)
    assert "Reminder" in reminder["Subject"]
    assert "AI recommendation (a person decides): REJECT" in body
    assert "Evaluator confidence 0.41 against threshold 0.85" in body
    assert "sanctions exposure" in body
    assert "amount: 12500.00" in body
    alice_link = links_in(mailbox, "alice@example.org")[-1]
    shown = alice.get(f"/tasks/{task['id']}").json()
    assert shown["escalation_level"] == 1

    # Level 2: reassigned to the supervisors; out of the reviewers' reach, in sam's claim-next.
    server.clock.advance(60)
    assert sweep(server) == 1
    assert sam.get(f"/tasks/{task['id']}").json()["assigned_group"] == "supervisors"
    # Out of alice's groups: to her the task is not there any more.
    assert alice.get(f"/tasks/{task['id']}").json()["error_code"] == "ERR_TASK_NOT_FOUND"
    assert alice.post("/tasks/claim-next").status_code == 204
    assert alice.claim(task["id"]).json()["error_code"] == "ERR_TASK_NOT_FOUND"
    assert httpx.get(local(server, alice_link)).status_code == 410  # reassignment revoked it
    grant = sam.post("/tasks/claim-next").json()
    assert grant["id"] == task["id"]
    sam.release(task["id"], grant["lease_token"])
    send_mail(server)
    assert links_in(mailbox, "sam@example.org")

    # Level 3: expired; task.expired delivered once; a late decision is refused.
    server.clock.advance(60)
    assert sweep(server) == 1
    assert sweep(server) == 0
    while deliver(server):  # a task's events go out one at a time, in order
        pass
    kinds = [json.loads(r.body)["type"] for r in hook.received]
    assert kinds == ["task.escalated", "task.escalated", "task.expired"]
    hook.__exit__(None, None, None)
    expired = sam.get(f"/tasks/{task['id']}").json()
    assert (expired["status"], expired["deadline_at"]) == ("EXPIRED", None)
    late = sam.claim(task["id"])
    assert (late.status_code, late.json()["error_code"]) == (409, "ERR_TASK_EXPIRED")
    trail = [(e["type"], e["details"].get("level")) for e in events(sam, task["id"])]
    assert trail == [
        ("task.created", None),
        ("task.escalated", 1),
        ("task.escalated", 2),
        ("task.claimed", None),
        ("task.released", None),
        ("task.expired", 3),
    ]


def test_a_resolve_after_expiry_is_refused_and_changes_nothing(waiting: LiveServer) -> None:
    producer = waiting.new_client("producer", "bot")
    # In both groups the policy hands the task to, so it stays hers to read.
    alice = person(waiting, "reviewer", "alice", ["reviewers", "supervisors"])
    task = waiting_task(waiting, producer)
    token = alice.claim(task["id"]).json()["lease_token"]
    waiting.clock.advance(180)
    while sweep(waiting):  # one level per task per sweep
        pass
    refused = alice.resolve(task["id"], token)
    assert (refused.status_code, refused.json()["error_code"]) == (409, "ERR_TASK_EXPIRED")
    assert alice.get(f"/tasks/{task['id']}").json()["decision"] is None


def test_two_sweepers_apply_each_level_once(waiting: LiveServer) -> None:
    producer = waiting.new_client("producer", "bot")
    ids = [waiting_task(waiting, producer)["id"] for _ in range(8)]
    for _ in range(3):
        waiting.clock.advance(60)
        sweep(waiting, sweepers=2)
    with waiting.admin() as admin:
        for task_id in ids:
            levels = Counter(
                e["details"].get("level")
                for e in events(admin, task_id)
                if e["actor_id"] == "signoff-sweeper"
            )
            assert levels == {1: 1, 2: 1, 3: 1}, task_id
    assert waiting.count("outbox_events", event_type="task.expired") == 8


def test_a_sweeper_killed_mid_batch_leaves_each_level_to_be_applied_once(
    waiting: LiveServer,
) -> None:
    producer = waiting.new_client("producer", "bot")
    ids = [waiting_task(waiting, producer)["id"] for _ in range(4)]
    waiting.clock.advance(60)
    applied: list[str] = []

    def crash_after_two(task: Task) -> None:
        applied.append(str(task.id))
        if len(applied) == 2:
            raise RuntimeError("sweeper killed mid-batch")

    with pytest.raises(RuntimeError, match="killed"):
        sweep(waiting, after_each=crash_after_two)
    assert waiting.count("task_events", event_type="task.escalated") == 0  # the batch rolled back
    assert sweep(waiting) == 4
    assert sweep(waiting) == 0
    assert waiting.count("task_events", event_type="task.escalated") == 4
    assert set(ids) == {
        str(r["task_id"]) for r in waiting.rows("task_events", event_type="task.escalated")
    }


@pytest.fixture
def expire_only(waiting: LiveServer) -> LiveServer:
    with waiting.admin() as admin:
        policy = {"name": "expire-only", "levels": [{"after_seconds": 60, "action": "expire"}]}
        assert admin.post("/escalation-policies", json=policy).status_code == 201
    return waiting


def test_a_click_racing_the_final_expiry_is_recorded_once(
    expire_only: LiveServer, mailbox: Mailbox
) -> None:
    server = expire_only
    producer = server.new_client("producer", "bot")
    person(server, "reviewer", "alice", ["reviewers"])
    ids = []
    for _ in range(6):
        response = producer.escalate(escalation(policy="expire-only", assigned_group="reviewers"))
        ids.append(response.json()["id"])
    send_mail(server)
    links = links_in(mailbox, "alice@example.org")
    assert len(links) == 6
    server.clock.advance(60)
    results: list[int] = []

    def click(link: str) -> None:
        results.append(
            httpx.post(local(server, link), json={"decision": "APPROVED"}, timeout=30).status_code
        )

    threads = [threading.Thread(target=click, args=(link,)) for link in links]
    for thread in threads:
        thread.start()
    sweep(server)
    for thread in threads:
        thread.join()
    assert set(results) <= {200, 410}
    with server.admin() as admin:
        for task_id in ids:
            trail = [e["type"] for e in events(admin, task_id)]
            outcomes = [t for t in trail if t in ("task.resolved", "task.expired")]
            assert len(outcomes) == 1, trail
            status = admin.get(f"/tasks/{task_id}").json()["status"]
            assert status == {"task.resolved": "RESOLVED", "task.expired": "EXPIRED"}[outcomes[0]]


def test_links_decide_once_and_get_never_changes_state(
    waiting: LiveServer, mailbox: Mailbox
) -> None:
    producer = waiting.new_client("producer", "bot")
    person(waiting, "reviewer", "alice", ["reviewers"])
    bob = person(waiting, "reviewer", "bob", ["reviewers"])
    task = waiting_task(waiting, producer)
    send_mail(waiting)
    (link,) = links_in(mailbox, "alice@example.org")
    url = local(waiting, link)
    page = httpx.get(url)
    assert page.status_code == 200
    for text in ("Approve", "AI recommendation", "alice"):
        assert text in page.text
    for _ in range(3):
        httpx.get(url)
    assert producer.get(f"/tasks/{task['id']}").json()["version"] == 1  # GETs changed nothing

    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    forged = httpx.post(url, data={"csrf": "0" * 64, "decision": "APPROVED"})
    assert forged.status_code == 403
    as_bob = httpx.post(
        url, json={"decision": "APPROVED"}, headers={"Authorization": f"Bearer {bob.key}"}
    )
    assert (as_bob.status_code, as_bob.json()["error_code"]) == (403, "ERR_FORBIDDEN")
    unexplained = httpx.post(url, data={"csrf": csrf, "decision": "REJECTED", "notes": "  "})
    assert unexplained.status_code == 422
    assert "Notes are required to reject" in unexplained.text
    assert producer.get(f"/tasks/{task['id']}").json()["version"] == 1  # nothing claimed
    first = httpx.post(url, data={"csrf": csrf, "decision": "REJECTED", "notes": "Not ours."})
    assert first.status_code == 200
    assert "Recorded: REJECTED" in first.text
    second = httpx.post(url, data={"csrf": csrf, "decision": "APPROVED"})
    assert second.status_code == 200
    assert "already recorded: REJECTED" in second.text
    again = httpx.post(url, json={"decision": "APPROVED"})
    assert again.json()["state"] == "decided"
    shown = producer.get(f"/tasks/{task['id']}").json()
    assert (shown["decision"], shown["operator_id"]) == ("REJECTED", "alice")
    assert [e["type"] for e in events(producer, task["id"])].count("task.resolved") == 1
    assert httpx.get(f"{waiting.base_url}/r/forged-token-that-does-not-exist").status_code == 404
    assert (
        httpx.post(f"{waiting.base_url}/r/forged-token", json={"decision": "APPROVED"}).status_code
        == 404
    )


def test_links_stop_working_after_expiry_or_cancellation(
    waiting: LiveServer, mailbox: Mailbox
) -> None:
    producer = waiting.new_client("producer", "bot")
    alice = person(waiting, "reviewer", "alice", ["reviewers"])
    withdrawn = waiting_task(waiting, producer)
    send_mail(waiting)
    (link,) = links_in(mailbox, "alice@example.org")
    cancelled = producer.post(f"/tasks/{withdrawn['id']}/cancel")
    assert cancelled.json()["status"] == "CANCELLED"
    assert httpx.get(local(waiting, link)).status_code == 410
    assert httpx.post(local(waiting, link), json={"decision": "APPROVED"}).status_code == 410
    refused = alice.claim(withdrawn["id"])
    assert (refused.status_code, refused.json()["error_code"]) == (409, "ERR_TASK_CANCELLED")
    assert producer.post(f"/tasks/{withdrawn['id']}/cancel").status_code == 409
    waiting.clock.advance(600)
    assert sweep(waiting) == 0  # a cancelled task gets no further reminders
    assert producer.get(f"/tasks/{withdrawn['id']}").json()["escalation_level"] == 0


def test_a_resolved_task_gets_no_further_reminders(waiting: LiveServer) -> None:
    producer = waiting.new_client("producer", "bot")
    alice = person(waiting, "reviewer", "alice", ["reviewers"])
    task = waiting_task(waiting, producer)
    alice.resolve(task["id"], alice.claim(task["id"]).json()["lease_token"])
    waiting.clock.advance(600)
    assert sweep(waiting) == 0


def test_self_approval_by_link_is_impossible(waiting: LiveServer, mailbox: Mailbox) -> None:
    producer = waiting.new_client("producer", "alice")
    person(waiting, "reviewer", "alice", ["reviewers"])
    waiting_task(waiting, producer)
    send_mail(waiting)
    assert links_in(mailbox, "alice@example.org") == []  # the producer is never sent a link


def test_deadlines_come_from_the_request_or_the_policy(waiting: LiveServer) -> None:
    producer = waiting.new_client("producer", "bot")
    own = producer.escalate(
        escalation(review_deadline="2026-12-01T00:00:00+00:00", policy="three-steps")
    ).json()
    assert own["deadline_at"] == "2026-12-01T00:00:00.000000Z"
    default = producer.escalate(escalation()).json()
    assert (default["policy"], default["deadline_at"]) == ("default", "2026-12-01T12:00:00.000000Z")
    unknown = producer.escalate(escalation(policy="nope"))
    assert (unknown.status_code, unknown.json()["error_code"]) == (422, "ERR_UNKNOWN_POLICY")
    both = producer.escalate(
        escalation(deadline="2026-12-01T00:00:00Z", review_deadline="2026-12-01T00:00:00Z")
    )
    assert both.status_code == 422


@pytest.mark.parametrize(
    "levels",
    [
        [{"after_seconds": 60, "action": "remind"}],
        [{"after_seconds": 60, "action": "expire"}, {"after_seconds": 60, "action": "expire"}],
        [{"after_seconds": 0, "action": "expire"}],
        [{"after_seconds": 60, "action": "reassign"}, {"after_seconds": 60, "action": "expire"}],
        [
            {"after_seconds": 60, "action": "remind", "notify": ["everyone"]},
            {"after_seconds": 1, "action": "expire"},
        ],
        [],
    ],
)
def test_policies_that_could_wait_forever_or_make_no_sense_are_refused(
    waiting: LiveServer, levels
) -> None:
    with waiting.admin() as admin:
        response = admin.post("/escalation-policies", json={"name": "bad", "levels": levels})
    assert response.status_code == 422
    assert response.json()["errors"]


def test_policies_are_managed_by_admins(waiting: LiveServer) -> None:
    with waiting.admin() as admin:
        assert admin.post("/escalation-policies", json=POLICY).status_code == 409
        changed = {**POLICY, "levels": POLICY["levels"][-1:]}
        assert admin.put("/escalation-policies/three-steps", json=changed).status_code == 200
        assert (
            admin.get("/escalation-policies/three-steps").json()["levels"] == POLICY["levels"][-1:]
        )
        names = [p["name"] for p in admin.get("/escalation-policies").json()["items"]]
        assert names == ["default", "three-steps"]
        assert admin.delete("/escalation-policies/three-steps").status_code == 204
        assert admin.delete("/escalation-policies/three-steps").status_code == 404
        assert (
            admin.get("/escalation-policies/three-steps").json()["error_code"]
            == "ERR_POLICY_NOT_FOUND"
        )
    with waiting.new_client("supervisor") as supervisor:
        assert supervisor.post("/escalation-policies", json=POLICY).status_code == 403


def test_a_link_approves_only_the_revision_its_approver_saw(
    waiting: LiveServer, mailbox: Mailbox
) -> None:
    producer = waiting.new_client("producer", "bot")
    person(waiting, "reviewer", "alice", ["reviewers"])
    body = escalation(
        assigned_group="reviewers", policy="three-steps", subject={"pay": "100 EUR to ACME"}
    )
    task = producer.escalate(body).json()
    send_mail(waiting)
    (link,) = links_in(mailbox, "alice@example.org")
    url = local(waiting, link)
    page = httpx.get(url)
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    changed = producer.put(
        f"/tasks/{task['id']}/subject",
        headers={"If-Match": '"1"'},
        json={"subject": {"pay": "100000 EUR to MALLORY"}},
    )
    assert changed.status_code == 200
    stale_form = httpx.post(url, data={"csrf": csrf, "decision": "APPROVED", "revision": "1"})
    assert stale_form.status_code == 409
    no_revision = httpx.post(url, json={"decision": "APPROVED"})
    assert (no_revision.status_code, no_revision.json()["error_code"]) == (
        409,
        "ERR_STALE_REVISION",
    )
    assert producer.get(f"/tasks/{task['id']}").json()["decision"] is None
    seen = httpx.post(url, json={"decision": "APPROVED", "revision": 2})
    assert seen.json()["state"] == "decided"
    assert producer.get(f"/tasks/{task['id']}").json()["approved_revision"] == 2


def test_a_click_racing_a_reassignment_never_decides_through_a_withdrawn_link(
    waiting: LiveServer, mailbox: Mailbox
) -> None:
    server = waiting
    with server.admin() as admin:
        policy = {
            "name": "hand-over",
            "levels": [
                {"after_seconds": 60, "action": "reassign", "assign_group": "supervisors"},
                {"after_seconds": 60, "action": "expire"},
            ],
        }
        assert admin.post("/escalation-policies", json=policy).status_code == 201
    producer = server.new_client("producer", "bot")
    person(server, "reviewer", "alice", ["reviewers"])
    ids = [
        producer.escalate(escalation(policy="hand-over", assigned_group="reviewers")).json()["id"]
        for _ in range(6)
    ]
    send_mail(server)
    links = links_in(mailbox, "alice@example.org")
    server.clock.advance(60)
    threads = [
        threading.Thread(
            target=lambda link=link: httpx.post(
                local(server, link), json={"decision": "APPROVED"}, timeout=30
            )
        )
        for link in links
    ]
    for thread in threads:
        thread.start()
    sweep(server)
    for thread in threads:
        thread.join()
    with server.admin() as admin:
        for task_id in ids:
            trail = [e["type"] for e in events(admin, task_id)]
            if "task.escalated" in trail and "task.resolved" in trail:
                assert trail.index("task.resolved") < trail.index("task.escalated"), trail


def test_a_reassignment_ends_a_lease_held_in_the_old_group(waiting: LiveServer) -> None:
    producer = waiting.new_client("producer", "bot")
    alice = person(waiting, "reviewer", "alice", ["reviewers"])
    task = waiting_task(waiting, producer)
    token = alice.claim(task["id"]).json()["lease_token"]
    waiting.clock.advance(120)
    while sweep(waiting):
        pass
    renewed = alice.renew(task["id"], token)  # now another group's: not hers to see
    assert (renewed.status_code, renewed.json()["error_code"]) == (404, "ERR_TASK_NOT_FOUND")
    shown = producer.get(f"/tasks/{task['id']}").json()
    assert (shown["status"], shown["assigned_group"]) == ("PENDING_REVIEW", "supervisors")


def test_producer_text_cannot_break_or_forge_e_mail(waiting: LiveServer, mailbox: Mailbox) -> None:
    producer = waiting.new_client("producer", "bot")
    person(waiting, "reviewer", "alice", ["reviewers"])
    sly = SUMMARY | {"rationale": "fine\r\n\r\nApprove or reject: https://evil.example/r/AAAA"}
    producer.escalate(
        escalation("x\r\nBcc: victim@evil.test", assigned_group="reviewers", summary=sly)
    )
    producer.escalate(escalation(assigned_group="reviewers"))
    send_mail(waiting)
    received = mailbox.to("alice@example.org")
    assert len(received) == 2  # the odd one did not stop the other
    assert all(m["Bcc"] is None for m in received)
    for message in received:
        body = Mailbox.body(message)
        assert not any(
            line.startswith("Approve or reject: https://evil") for line in body.splitlines()
        )


def test_the_e_mail_and_the_resume_page_lead_with_the_headline_and_key_fields(
    waiting: LiveServer, mailbox: Mailbox
) -> None:
    producer = waiting.new_client("producer", "bot")
    person(waiting, "reviewer", "alice", ["reviewers"])
    subject = {"amount": 12500, "payee": {"name": "ACME <b>Ltd</b>"}, "lines": [{"sku": "A-1"}]}
    headline = {
        "title": "Release {/amount} to {/payee/name}",
        "fields": [
            {"label": "Amount", "pointer": "/amount", "type": "money", "currency": "EUR"},
            {"label": "Payee", "pointer": "/payee/name", "type": "person"},
        ],
    }
    bundle = escalation()["diagnostic_bundle"]
    bundle["input_snapshot"] = {"order": {"lines": [{"sku": "A-1", "qty": 2}]}}
    waiting_task(waiting, producer, subject=subject, headline=headline, diagnostic_bundle=bundle)
    send_mail(waiting)
    [message] = mailbox.to("alice@example.org")
    title = "Release €12,500.00 to ACME <b>Ltd</b>"
    subject_line = str(make_header(decode_header(message["Subject"])))
    assert subject_line == f"[Signoff] Review needed: {title} (AML_RULE_FAILED)"
    body = Mailbox.body(message).replace("\r\n", "\n")
    assert f"{title}\n  Amount: €12,500.00\n  Payee: ACME <b>Ltd</b>\n" in body
    assert '  order: {"lines": [{"sku": "A-1", "qty": 2}]}' in body  # nested, not "…"
    [link] = links_in(mailbox, "alice@example.org")
    page = httpx.get(local(waiting, link)).text
    assert '<h2 id="headline">Release €12,500.00 to ACME &lt;b&gt;Ltd&lt;/b&gt;</h2>' in page
    assert "<dt>Amount</dt><dd>€12,500.00</dd>" in page


@pytest.mark.parametrize(
    "extra",
    [
        {"summary": SUMMARY | {"evidence_links": ["javascript:alert(1)"]}},
        {"summary": SUMMARY | {"evidence_links": ["data:text/html,hi"]}},
        {"deadline": "9999-12-31T23:59:59Z"},
        {"deadline": "0001-01-01T00:00:00+01:00"},
    ],
)
def test_dangerous_or_impossible_waiting_fields_are_refused(waiting: LiveServer, extra) -> None:
    producer = waiting.new_client("producer", "bot")
    response = producer.escalate(escalation(assigned_group="reviewers", **extra))
    assert response.status_code == 422, response.text
    assert waiting.count("review_tasks") == 0


def test_the_resume_page_allows_no_script(waiting: LiveServer, mailbox: Mailbox) -> None:
    producer = waiting.new_client("producer", "bot")
    person(waiting, "reviewer", "alice", ["reviewers"])
    waiting_task(waiting, producer)
    send_mail(waiting)
    (link,) = links_in(mailbox, "alice@example.org")
    page = httpx.get(local(waiting, link))
    assert "default-src 'none'" in page.headers["content-security-policy"]
    smuggled = httpx.post(
        local(waiting, link),
        content=b'{"decision": "APPROVED"}',
        headers={"content-type": "text/plain; charset=application/json"},
    )
    assert smuggled.status_code in (403, 422)  # a form (without its CSRF token), not JSON
    assert waiting.rows("review_tasks")[0]["decision"] is None
    odd = httpx.post(
        local(waiting, link), data={"csrf": "x", "decision": "APPROVED", "revision": "²"}
    )
    # The unreadable revision is refused as it is read, before the form's token is checked.
    assert odd.status_code == 422, odd.text
    assert "must be a whole number" in odd.text
    assert waiting.rows("review_tasks")[0]["decision"] is None


@pytest.mark.parametrize(
    "policy",
    [
        {"name": "a/b", "levels": [{"after_seconds": 60, "action": "expire"}]},
        {"name": "default", "levels": [{"after_seconds": 1, "action": "expire"}]},
        {
            "name": "nul",
            "levels": [
                {"after_seconds": 60, "action": "reassign", "assign_group": "sup\u0000x"},
                {"after_seconds": 60, "action": "expire"},
            ],
        },
        # An action that is not a name at all (an object, a list) is refused, not a 500.
        {"name": "odd", "levels": [{"after_seconds": 1, "action": {}}]},
        {"name": "odd", "levels": [{"after_seconds": 1, "action": ["expire"]}]},
    ],
)
def test_policies_with_unusable_names_or_groups_are_refused(waiting: LiveServer, policy) -> None:
    with waiting.admin() as admin:
        assert admin.post("/escalation-policies", json=policy).status_code == 422


def test_a_replay_does_not_depend_on_the_policy_still_existing(waiting: LiveServer) -> None:
    with waiting.admin() as admin:
        admin.post(
            "/escalation-policies",
            json={"name": "temp", "levels": [{"after_seconds": 60, "action": "expire"}]},
        )
    producer = waiting.new_client("producer", "bot")
    body = escalation(policy="temp")
    first = producer.escalate(body)
    with waiting.admin() as admin:
        assert admin.delete("/escalation-policies/temp").status_code == 204
    again = producer.escalate(body)
    assert (again.status_code, again.headers.get("Idempotent-Replayed")) == (201, "true")
    assert again.content == first.content


def test_the_sweeper_purges_expired_idempotency_keys(waiting: LiveServer) -> None:
    producer = waiting.new_client("producer", "bot")
    kept_body = escalation()
    producer.escalate(escalation())
    waiting.clock.advance(waiting.settings.idempotency_ttl_seconds - 10)
    producer.escalate(kept_body)
    waiting.clock.advance(10)
    sweep(waiting)
    remaining = waiting.rows("idempotency_keys")
    assert [row["idempotency_key"] for row in remaining] == [kept_body["idempotency_key"]]
    replay = producer.escalate(kept_body)
    assert replay.headers.get("Idempotent-Replayed") == "true"


def test_a_policy_name_that_cannot_exist_is_refused_not_crashed(waiting: LiveServer) -> None:
    with waiting.admin() as admin:
        for method in ("get", "delete"):
            # U+0000 never reaches a query: the request boundary's text guard refuses it.
            response = getattr(admin, method)("/escalation-policies/a%00b")
            assert (response.status_code, response.json()["error_code"]) == (
                422,
                "ERR_VALIDATION",
            )


# The decision rules hold through a link exactly as through the API --------------------


def _open_link(waiting: LiveServer, mailbox: Mailbox, address: str) -> str:
    send_mail(waiting)
    (link,) = links_in(mailbox, address)
    return local(waiting, link)


def test_an_approval_through_a_link_expires_like_one_through_the_api(
    waiting: LiveServer, mailbox: Mailbox, clock: ManualClock
) -> None:
    producer = waiting.new_client("producer", "bot")
    alice = person(waiting, "reviewer", "alice", ["reviewers"])
    by_link, by_api = (
        waiting_task(
            waiting, producer, subject={"pay": f"{n} EUR to ACME"}, approval_ttl_seconds=60
        )
        for n in (100, 200)
    )
    send_mail(waiting)
    link_for = {link: None for link in links_in(mailbox, "alice@example.org")}
    assert len(link_for) == 2
    for link in link_for:  # which link is for which task: the page names the task
        shown = httpx.get(local(waiting, link), headers={"Accept": "application/json"})
        if shown.json()["task"]["id"] == by_link["id"]:
            answer = httpx.post(local(waiting, link), json={"decision": "APPROVED", "revision": 1})
            assert answer.json()["state"] == "decided", answer.text
    token = alice.claim(by_api["id"]).json()["lease_token"]
    pin = {"revision": 1, "digest": by_api["digest"]}
    assert alice.resolve(by_api["id"], token, {"decision": "APPROVED"} | pin).is_success
    for task in (by_link, by_api):
        shown = producer.get(f"/tasks/{task['id']}").json()
        assert shown["approval_expires_at"] is not None
    clock.advance(61)
    for task in (by_link, by_api):
        refused = producer.post(
            f"/tasks/{task['id']}/execute",
            json={"revision": 1, "digest": task["digest"], "operation_id": "op-1"},
        )
        assert (refused.status_code, refused.json()["reason"]) == (409, "APPROVAL_EXPIRED")


def test_a_link_decision_writes_what_the_api_writes(waiting: LiveServer, mailbox: Mailbox) -> None:
    producer = waiting.new_client("producer", "bot")
    alice = person(waiting, "reviewer", "alice", ["reviewers"])
    linked = waiting_task(waiting, producer)
    url = _open_link(waiting, mailbox, "alice@example.org")
    assert httpx.post(url, json={"decision": "REJECTED", "notes": "No."}).status_code == 200
    direct = waiting_task(waiting, producer)
    token = alice.claim(direct["id"]).json()["lease_token"]
    assert alice.resolve(direct["id"], token, {"decision": "REJECTED", "notes": "No."}).is_success

    def trail(task_id: str) -> list[tuple[str, str, str]]:
        return [(e["type"], e["actor_id"], e["status"]) for e in events(producer, task_id)]

    assert trail(linked["id"]) == trail(direct["id"])
    types = [t for t, _, _ in trail(linked["id"])]
    assert types == ["task.created", "task.claimed", "task.resolved"]
    keys = ("status", "decision", "notes", "operator_id", "approval_expires_at")
    first, second = (producer.get(f"/tasks/{t['id']}").json() for t in (linked, direct))
    assert {k: first[k] for k in keys} == {k: second[k] for k in keys}


def test_a_supervisors_reassignment_withdraws_the_old_groups_links(
    waiting: LiveServer, mailbox: Mailbox
) -> None:
    producer = waiting.new_client("producer", "bot")
    person(waiting, "reviewer", "alice", ["reviewers"])
    person(waiting, "reviewer", "lena", ["legal"])
    supervisor = person(waiting, "supervisor", "sam", [])
    task = waiting_task(waiting, producer)
    url = _open_link(waiting, mailbox, "alice@example.org")
    moved = supervisor.post(f"/tasks/{task['id']}/reassign", json={"group": "legal"})
    assert moved.status_code == 200, moved.text
    assert httpx.get(url).status_code == 410
    refused = httpx.post(url, json={"decision": "REJECTED", "notes": "Too late."})
    assert (refused.status_code, refused.json()["state"]) == (410, "gone")
    assert producer.get(f"/tasks/{task['id']}").json()["decision"] is None


def test_a_link_decides_nothing_once_its_approver_left_the_group(
    waiting: LiveServer, mailbox: Mailbox
) -> None:
    producer = waiting.new_client("producer", "bot")
    with waiting.admin() as admin:
        key = admin.post(
            "/api-keys",
            json={
                "role": "reviewer",
                "principal_id": "alice",
                "groups": ["reviewers"],
                "email": "alice@example.org",
            },
        ).json()
    task = waiting_task(waiting, producer)
    url = _open_link(waiting, mailbox, "alice@example.org")
    with waiting.admin() as admin:  # alice's only key goes; a new one has other groups
        assert admin.delete(f"/api-keys/{key['id']}").status_code == 204
    person(waiting, "reviewer", "alice", ["finance"])
    refused = httpx.post(url, json={"decision": "APPROVED"})
    assert (refused.status_code, refused.json()["error_code"]) == (403, "ERR_NOT_IN_GROUP")
    shown = producer.get(f"/tasks/{task['id']}").json()
    assert (shown["status"], shown["decision"]) == ("PENDING_REVIEW", None)


def test_notes_have_one_limit_and_one_rule_on_every_door(
    waiting: LiveServer, mailbox: Mailbox
) -> None:
    producer = waiting.new_client("producer", "bot")
    alice = person(waiting, "reviewer", "alice", ["reviewers"])
    linked = waiting_task(waiting, producer)
    url = _open_link(waiting, mailbox, "alice@example.org")
    direct = waiting_task(waiting, producer)
    token = alice.claim(direct["id"]).json()["lease_token"]
    too_long = "x" * 10_001
    answers = [
        alice.resolve(direct["id"], token, {"decision": "APPROVED", "notes": too_long}),
        httpx.post(url, json={"decision": "APPROVED", "notes": too_long}),
        alice.resolve(direct["id"], token, {"decision": "REJECTED"}),
        httpx.post(url, json={"decision": "REJECTED", "notes": " "}),
    ]
    for answer in answers:
        body = answer.json()
        assert (answer.status_code, body["error_code"]) == (422, "ERR_VALIDATION"), answer.text
        assert [e["field"] for e in body["errors"]] == ["notes"]
    assert "10,000" in answers[0].json()["errors"][0]["message"]
    assert answers[0].json()["errors"] == answers[1].json()["errors"]
    exactly = "y" * 10_000
    kept = alice.resolve(direct["id"], token, {"decision": "APPROVED", "notes": exactly})
    assert kept.json()["notes"] == exactly  # never cut
    for task in (linked, direct):
        assert len(events(producer, task["id"])) == (1 if task is linked else 3)


# A link decision is a claim and a resolve: what may happen between them ----------------


def _decide_with(
    waiting: LiveServer,
    link: str,
    decision: str,
    *,
    notes: str | None = None,
    before_claim: Callable[[ServiceContext], Any] | None = None,
    before_resolve: Callable[[ServiceContext], Any] | None = None,
    monkeypatch: pytest.MonkeyPatch,
) -> Any:
    """Decide through ``link`` in this process, running ``before_claim`` or
    ``before_resolve`` (another request's change, committed) at that moment."""
    from signoff.domain.states import Decision
    from signoff.services import resume_links
    from signoff.services import tasks as task_service

    real_claim, real_resolve = task_service.claim, task_service.resolve
    token = link.rsplit("/", 1)[1]

    async def work(context: ServiceContext) -> Any:
        async def claim(*args: Any, **kwargs: Any) -> Any:
            if before_claim is not None:
                await before_claim(context)
            return await real_claim(*args, **kwargs)

        async def resolve(*args: Any, **kwargs: Any) -> Any:
            if before_resolve is not None:
                await before_resolve(context)
            return await real_resolve(*args, **kwargs)

        monkeypatch.setattr(resume_links.task_service, "claim", claim)
        monkeypatch.setattr(resume_links.task_service, "resolve", resolve)
        return await resume_links.decide_by_link(
            context, token, Decision(decision), csrf=None, caller=None, notes=notes
        )

    return asyncio.run(_with_context(waiting.settings, waiting.clock, work))


def _supervisor(waiting: LiveServer) -> Any:
    from signoff.domain.states import Role
    from signoff.domain.tasks import Principal

    return Principal(key_id=uuid.uuid4(), principal_id="sam", role=Role.SUPERVISOR)


def test_a_reassignment_between_reading_a_link_and_claiming_decides_nothing(
    waiting: LiveServer, mailbox: Mailbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    from signoff.services import supervision

    producer = waiting.new_client("producer", "bot")
    person(waiting, "reviewer", "alice", ["reviewers", "legal"])  # allowed in both groups
    task = waiting_task(waiting, producer)
    url = _open_link(waiting, mailbox, "alice@example.org")

    async def move(context: ServiceContext) -> None:
        await supervision.reassign(context, _supervisor(waiting), task["id"], "legal")

    state = _decide_with(
        waiting, url, "REJECTED", notes="No.", before_claim=move, monkeypatch=monkeypatch
    )
    assert (state.http_status, state.state) == (410, "gone")
    shown = producer.get(f"/tasks/{task['id']}").json()
    assert (shown["status"], shown["decision"], shown["assigned_group"]) == (
        "PENDING_REVIEW",
        None,
        "legal",
    )


def test_a_change_after_the_claim_gives_the_task_back_and_says_what_the_link_shows(
    waiting: LiveServer, mailbox: Mailbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    from signoff.services import waiting as waiting_service

    producer = waiting.new_client("producer", "bot")
    person(waiting, "reviewer", "alice", ["reviewers"])
    task = waiting_task(waiting, producer)
    url = _open_link(waiting, mailbox, "alice@example.org")
    producer_principal = asyncio.run(
        _with_context(
            waiting.settings,
            waiting.clock,
            lambda c: _principal_of(c, producer.key or ""),
        )
    )

    async def cancel(context: ServiceContext) -> None:
        await waiting_service.cancel(context, producer_principal, task["id"])

    state = _decide_with(waiting, url, "APPROVED", before_resolve=cancel, monkeypatch=monkeypatch)
    assert (state.http_status, state.state) == (410, "gone")
    shown = producer.get(f"/tasks/{task['id']}").json()
    assert (shown["status"], shown["decision"], shown["claimed_by"]) == ("CANCELLED", None, None)


async def _principal_of(context: ServiceContext, key: str) -> Any:
    from signoff.services import keys

    return await keys.authenticate(context, key)


def test_a_failure_after_the_claim_leaves_no_lease_behind(
    waiting: LiveServer, mailbox: Mailbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    producer = waiting.new_client("producer", "bot")
    person(waiting, "reviewer", "alice", ["reviewers"])
    task = waiting_task(waiting, producer)
    url = _open_link(waiting, mailbox, "alice@example.org")

    async def crash(context: ServiceContext) -> None:
        raise RuntimeError("the process failed here")

    with pytest.raises(RuntimeError):
        _decide_with(waiting, url, "APPROVED", before_resolve=crash, monkeypatch=monkeypatch)
    shown = producer.get(f"/tasks/{task['id']}").json()
    assert (shown["status"], shown["claimed_by"], shown["decision"]) == (
        "PENDING_REVIEW",
        None,
        None,
    )


def test_a_link_never_takes_the_lease_its_approver_holds_in_the_console(
    waiting: LiveServer, mailbox: Mailbox
) -> None:
    producer = waiting.new_client("producer", "bot")
    alice = person(waiting, "reviewer", "alice", ["reviewers"])
    task = waiting_task(waiting, producer)
    url = _open_link(waiting, mailbox, "alice@example.org")
    token = alice.claim(task["id"]).json()["lease_token"]
    refused = httpx.post(url, json={"decision": "APPROVED"})
    assert (refused.status_code, refused.json()["error_code"]) == (409, "ERR_STATE_CONFLICT")
    assert "decide there" in refused.json()["message"]
    assert alice.renew(task["id"], token).status_code == 200  # her lease is still hers


def test_notes_with_nul_are_refused_on_every_door_before_anything_is_claimed(
    waiting: LiveServer, mailbox: Mailbox
) -> None:
    producer = waiting.new_client("producer", "bot")
    person(waiting, "reviewer", "alice", ["reviewers"])
    task = waiting_task(waiting, producer)
    url = _open_link(waiting, mailbox, "alice@example.org")
    page = httpx.get(url)
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    form = httpx.post(url, data={"csrf": csrf, "decision": "REJECTED", "notes": "a\x00b"})
    assert form.status_code == 422
    assert "U+0000" in form.text
    as_json = httpx.post(url, json={"decision": "REJECTED", "notes": "a\x00b"})
    assert (as_json.status_code, as_json.json()["error_code"]) == (422, "ERR_VALIDATION")
    assert producer.get(f"/tasks/{task['id']}").json()["version"] == 1


def test_an_open_link_shows_its_page_again_when_someone_else_holds_the_task(
    waiting: LiveServer, mailbox: Mailbox
) -> None:
    producer = waiting.new_client("producer", "bot")
    person(waiting, "reviewer", "alice", ["reviewers"])
    bob = person(waiting, "reviewer", "bob", ["reviewers"])
    task = waiting_task(waiting, producer)
    url = _open_link(waiting, mailbox, "alice@example.org")
    page = httpx.get(url)
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    assert bob.claim(task["id"]).status_code == 200
    busy = httpx.post(url, data={"csrf": csrf, "decision": "REJECTED", "notes": "Not ours."})
    assert busy.status_code == 409
    assert "Not ours." in busy.text  # the notes are kept
    assert 'name="decision"' in busy.text  # the form is there, to try again later


def test_after_a_reassignment_the_new_groups_link_decides(
    waiting: LiveServer, mailbox: Mailbox
) -> None:
    producer = waiting.new_client("producer", "bot")
    person(waiting, "reviewer", "alice", ["reviewers"])
    person(waiting, "reviewer", "lena", ["legal"])
    supervisor = person(waiting, "supervisor", "sam", [])
    task = waiting_task(waiting, producer)
    old = _open_link(waiting, mailbox, "alice@example.org")
    assert supervisor.post(f"/tasks/{task['id']}/reassign", json={"group": "legal"}).is_success
    new = _open_link(waiting, mailbox, "lena@example.org")
    assert httpx.get(old).status_code == 410
    decided = httpx.post(new, json={"decision": "REJECTED", "notes": "Legal says no."})
    assert decided.json()["state"] == "decided", decided.text
    assert producer.get(f"/tasks/{task['id']}").json()["operator_id"] == "lena"
