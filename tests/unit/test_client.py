"""The SDK through its ``transport=`` seam (``httpx.MockTransport``): no server, no network."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from signoff.client import (
    AlreadyExecuting,
    ApiError,
    ApprovalNotValid,
    AsyncSignoff,
    ConnectionFailed,
    DecisionTimeout,
    ExecutionLeaseLost,
    Forbidden,
    IdempotencyKeyReused,
    InsufficientContextProof,
    InvalidArgument,
    LeaseLost,
    NotFound,
    NotReady,
    Signoff,
    SignoffError,
    Task,
    TaskConflict,
    ValidationFailed,
    WebhookVerificationFailed,
    _execute_ops,
    _wait_ops,
    digest,
    escalation_ids,
    precheck_hash,
    verify_event,
)
from signoff.client import _ops as ops

Handler = Callable[[httpx.Request], httpx.Response]

ATTEMPTED = [
    {
        "action": "fact_check",
        "executed_at": datetime(2026, 11, 30, 9, 0, tzinfo=UTC),
        "result": "two figures unsourced",
    }
]


def task_json(**fields: Any) -> dict[str, Any]:
    base = {
        "id": "11111111-1111-5111-8111-111111111111",
        "status": "PENDING_REVIEW",
        "entity_type": "article",
        "entity_id": "a-1",
        "reason_code": "EDITORIAL_REVIEW",
        "precheck_hash": "0" * 64,
        "diagnostic_bundle": {},
        "producer_id": "agent",
        "version": 1,
    }
    return base | fields


def problem(status: int, code: str, **extra: Any) -> httpx.Response:
    body = {"type": f"urn:signoff:problem:{code}", "status": status, "error_code": code}
    return httpx.Response(status, json={**body, "message": code.lower(), **extra})


def answering_me(handler: Handler) -> Handler:
    """``handler`` behind a server that also says who the caller is (``GET /me``)."""

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/me":
            return httpx.Response(200, json={"principal_id": "agent", "role": "producer"})
        return handler(request)

    return answer


def client(handler: Handler, **kwargs: Any) -> Signoff:
    kwargs.setdefault("backoff", 0)
    transport = httpx.MockTransport(answering_me(handler))
    return Signoff("http://signoff.test", "key", transport=transport, **kwargs)


def escalate(c: Signoff, **overrides: Any) -> Any:
    arguments: dict[str, Any] = {
        "key": "article-a-1",
        "entity_type": "article",
        "entity_id": "a-1",
        "reason_code": "EDITORIAL_REVIEW",
        "attempted_actions": ATTEMPTED,
        "evaluator_verdict": {"confidence_score": 0.4, "threshold": 0.9},
        "input_snapshot": {"title": "Rates"},
        "trace_id": "trace-1",
    }
    return c.escalate(**(arguments | overrides))


# --- escalate -----------------------------------------------------------------------------


def test_escalate_derives_ids_from_the_key_and_computes_the_precheck_hash() -> None:
    sent: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == "Bearer key"
        assert request.headers["traceparent"] == "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
        sent.append(json.loads(request.content))
        return httpx.Response(201, json=task_json(id=sent[-1]["escalation_id"]))

    task = escalate(
        client(handler),
        metadata={"thread_id": "t-1"},
        subject={"title": "Rates", "figure": "12%"},
        traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01",
    )
    body = sent[0]
    escalation_id, idempotency_key = escalation_ids("article-a-1", "agent")
    assert (task.id, body["escalation_id"]) == (escalation_id, escalation_id)
    assert body["idempotency_key"] == idempotency_key
    actions = body["diagnostic_bundle"]["attempted_actions"]
    assert actions[0]["executed_at"] == "2026-11-30T09:00:00Z"
    assert body["precheck_hash"] == precheck_hash(actions)
    assert body["metadata"] == {"thread_id": "t-1"}
    assert "deadline" not in body
    assert "summary" not in body


def test_the_same_key_names_the_same_escalation_and_another_key_or_producer_another() -> None:
    assert escalation_ids("k-1", "agent") == escalation_ids("k-1", "agent")
    assert escalation_ids("k-1", "agent")[0] != escalation_ids("k-2", "agent")[0]
    # Another producer's same key names another escalation.
    assert escalation_ids("k-1", "agent")[0] != escalation_ids("k-1", "other-agent")[0]
    assert len(escalation_ids("k", "agent")[1]) >= 16  # the contract's minimum


def test_escalate_retries_a_5xx_and_a_dropped_connection_with_the_same_key() -> None:
    bodies: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(request.content)
        if len(bodies) == 1:
            return problem(503, "ERR_NOT_READY")
        if len(bodies) == 2:
            raise httpx.ReadError("connection reset")
        return httpx.Response(201, json=task_json())

    escalate(client(handler, retries=3))
    assert len(bodies) == 3
    assert len(set(bodies)) == 1


def test_retries_give_up_with_the_last_answer() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return problem(503, "ERR_NOT_READY")

    with pytest.raises(NotReady):
        escalate(client(handler, retries=2))

    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    with pytest.raises(ConnectionFailed):
        client(unreachable, retries=1).get_task("x")


def test_a_rerun_with_fresh_timestamps_returns_the_task_its_key_created() -> None:
    escalation_id, _ = escalation_ids("article-a-1", "agent")

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            return problem(422, "ERR_IDEMPOTENCY_KEY_REUSED")
        assert request.url.path == f"/tasks/{escalation_id}"
        return httpx.Response(200, json=task_json(id=escalation_id, version=4))

    assert escalate(client(handler)).version == 4


def test_a_reused_key_whose_task_holds_other_content_raises_naming_what_changed() -> None:
    escalation_id, _ = escalation_ids("article-a-1", "agent")

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            return problem(422, "ERR_IDEMPOTENCY_KEY_REUSED", task_id=escalation_id)
        bundle = {"input_snapshot": {"title": "Other"}}
        return httpx.Response(200, json=task_json(id=escalation_id, diagnostic_bundle=bundle))

    with pytest.raises(IdempotencyKeyReused) as refused:
        escalate(client(handler))
    assert refused.value.changed == ["diagnostic_bundle.input_snapshot"]
    assert refused.value.task_id == escalation_id
    assert refused.value.task.id == escalation_id


def test_a_status_or_decision_from_a_newer_server_is_kept_as_it_came() -> None:
    task = Task.model_validate(task_json(status="ON_HOLD", decision="ESCALATED_FURTHER"))
    assert (task.status, task.decision) == ("ON_HOLD", "ESCALATED_FURTHER")
    with pytest.raises(ValidationError):
        Task.model_validate(task_json(status=7))


def test_ids_are_one_path_segment_each_whatever_they_contain() -> None:
    seen: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.raw_path)
        return problem(404, "ERR_TASK_NOT_FOUND")

    c = client(handler)
    for task_id in ("../webhook-endpoints", "..", "a/b?c#d"):
        with pytest.raises(NotFound):
            c.get_task(task_id)
    assert seen == [b"/tasks/%2E%2E%2Fwebhook-endpoints", b"/tasks/%2E%2E", b"/tasks/a%2Fb%3Fc%23d"]
    report = _execute_ops.finish_action(
        "t", "../../x", succeeded=True, operation_id="op", result=None, token=None
    )
    call = next(report)
    assert isinstance(call, ops.Call)
    assert call.path == "/tasks/t/actions/%2E%2E%2F%2E%2E%2Fx/complete"
    with pytest.raises(InvalidArgument) as empty:
        c.get_task(" ")
    assert empty.value.field == "task_id"
    with pytest.raises(ValueError, match="endpoint_id"):  # InvalidArgument is a ValueError
        c.delete_webhook_endpoint("")


@pytest.mark.parametrize("key", ["", "  ", "\t"])
def test_an_empty_api_key_is_refused_when_the_client_is_made(key: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        Signoff("http://signoff.test", key)
    assert refused.value.field == "api_key"
    with pytest.raises(InvalidArgument):
        AsyncSignoff("http://signoff.test", key)


def test_a_reused_key_of_an_escalation_that_never_existed_still_raises() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            return problem(422, "ERR_IDEMPOTENCY_KEY_REUSED")
        return problem(404, "ERR_TASK_NOT_FOUND")

    with pytest.raises(IdempotencyKeyReused):
        escalate(client(handler))


def test_on_conflict_adopt_returns_the_entitys_active_task() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            return problem(409, "ERR_TASK_CONFLICT", task_id="other-task")
        assert request.url.path == "/tasks/other-task"
        return httpx.Response(200, json=task_json(id="other-task"))

    with pytest.raises(TaskConflict) as raised:
        escalate(client(handler))
    assert raised.value.task_id == "other-task"
    assert escalate(client(handler), on_conflict="adopt").id == "other-task"


def test_problems_become_the_matching_exception() -> None:
    cases = {
        (403, "ERR_OPERATOR_MISMATCH"): Forbidden,
        (404, "ERR_TASK_NOT_FOUND"): NotFound,
        (409, "ERR_LEASE_LOST"): LeaseLost,
        (409, "ERR_EXECUTION_LEASE_LOST"): ExecutionLeaseLost,
        (422, "ERR_INSUFFICIENT_CONTEXT_PROOF"): InsufficientContextProof,
        (422, "ERR_SOMETHING_NEW"): ValidationFailed,
        (418, "ERR_TEAPOT"): ApiError,
    }
    for (status, code), kind in cases.items():
        c = client(lambda _r, s=status, e=code: problem(s, e, errors=[{"field": "f"}]))
        with pytest.raises(kind) as raised:
            c.get_task("t")
        assert raised.value.error_code == code
        assert raised.value.status == status
        assert isinstance(raised.value, SignoffError)


# --- waiting ------------------------------------------------------------------------------


def test_wait_for_decision_long_polls_after_the_version_it_has_seen() -> None:
    seen: list[dict[str, str]] = []
    answers = iter(
        [
            task_json(version=1),
            task_json(version=2, status="CLAIMED"),
            task_json(version=3, status="RESOLVED", decision="APPROVED"),
        ]
    )

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(dict(request.url.params))
        return httpx.Response(200, json=next(answers))

    task = client(handler).wait_for_decision("t", timeout=600)
    assert task.decision == "APPROVED"
    assert seen[0] == {}
    assert seen[1] == {"wait": "60", "after_version": "1"}
    assert seen[2] == {"wait": "60", "after_version": "2"}


def test_wait_for_decision_polls_gently_when_the_server_does_not_hold_requests() -> None:
    # Driven step by step (the SDK's operations are generators): no clock, no sleep.
    now = [0.0]
    op = _wait_ops.wait_for_decision("t", timeout=30, poll_interval=2.0, clock=lambda: now[0])
    assert isinstance(next(op), ops.Call)  # the first read
    held = op.send(httpx.Response(200, json=task_json(version=1)))
    assert isinstance(held, ops.Call)
    assert held.params == {"wait": 30, "after_version": 1}
    assert held.hold == 30
    pause = op.send(httpx.Response(200, json=task_json(version=1)))  # answered at once
    assert pause == ops.Pause(2.0)
    now[0] = 29.5
    again = op.send(None)
    assert isinstance(again, ops.Call)
    assert again.params == {"wait": 1, "after_version": 1}
    with pytest.raises(StopIteration) as done:
        op.send(
            httpx.Response(200, json=task_json(version=2, status="RESOLVED", decision="REJECTED"))
        )
    assert done.value.value.decision == "REJECTED"


def test_wait_for_decision_with_a_revision_ignores_a_decision_about_another() -> None:
    answers = iter(
        [
            task_json(version=5, status="RESOLVED", decision="APPROVED", current_revision=1),
            task_json(version=7, status="RESOLVED", decision="APPROVED", current_revision=2),
        ]
    )
    c = client(lambda _r: httpx.Response(200, json=next(answers)))
    assert c.wait_for_decision("t", timeout=60, revision=2).version == 7


def test_wait_for_decision_times_out_with_the_last_task() -> None:
    c = client(lambda _r: httpx.Response(200, json=task_json()))
    with pytest.raises(DecisionTimeout) as raised:
        c.wait_for_decision("t", timeout=0)
    assert raised.value.task.version == 1
    assert isinstance(raised.value, TimeoutError)


# --- executing ----------------------------------------------------------------------------


class FakeGate:
    """Just enough of the execution gate to watch what the SDK sends."""

    def __init__(self, *, approved: dict[str, Any], lease_seconds: float = 30) -> None:
        self.approved_digest = digest(approved)
        self.requests: list[tuple[str, str, dict[str, Any], dict[str, str]]] = []
        self.lease_seconds = lease_seconds
        self.busy_once = False
        self.lose_lease = False
        self.actions = {"publish": "PENDING", "notify": "PENDING"}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else {}
        self.requests.append((request.method, request.url.path, body, dict(request.headers)))
        path = request.url.path
        if request.method == "GET":
            return httpx.Response(
                200,
                json=task_json(
                    status="RESOLVED",
                    decision="APPROVED",
                    current_revision=1,
                    digest=self.approved_digest,
                    approved_revision=1,
                    approved_digest=self.approved_digest,
                ),
            )
        now = datetime.now(UTC)
        if path.endswith("/execute"):
            if self.busy_once:
                self.busy_once = False
                lapse = (now + timedelta(milliseconds=10)).isoformat()
                return problem(409, "ERR_ALREADY_EXECUTING", execution_lease_expires_at=lapse)
            if body["digest"] != self.approved_digest:
                return problem(409, "ERR_APPROVAL_NOT_VALID", reason="STALE_DIGEST")
            return httpx.Response(
                200,
                json={
                    "task_id": "t",
                    "execution_status": "EXECUTING",
                    "operation_id": body["operation_id"],
                    "actions": [{"id": a, "status": s} for a, s in self.actions.items()],
                    "revision": 1,
                    "digest": body["digest"],
                    "granted_at": now.isoformat(),
                    "execution_token": "tok-1",
                    "execution_lease_expires_at": (
                        now + timedelta(seconds=self.lease_seconds)
                    ).isoformat(),
                },
            )
        if path.endswith("/execution/renew"):
            if self.lose_lease:
                return problem(409, "ERR_EXECUTION_LEASE_LOST")
            return httpx.Response(200, json={"task_id": "t", "execution_status": "EXECUTING"})
        if "/actions/" in path:
            assert request.headers["x-execution-token"] == "tok-1"
            action = path.split("/")[-2]
            self.actions[action] = "COMPLETED" if path.endswith("/complete") else "FAILED"
            return httpx.Response(
                200,
                json={
                    "task_id": "t",
                    "execution_status": "EXECUTING",
                    "actions": [{"id": a, "status": s} for a, s in self.actions.items()],
                },
            )
        return problem(404, "ERR_NOT_FOUND")

    def calls(self, suffix: str) -> list[dict[str, Any]]:
        return [body for _m, path, body, _h in self.requests if path.endswith(suffix)]


ARTICLE = {"title": "Rates", "figure": "12%", "actions": [{"id": "publish"}, {"id": "notify"}]}


def test_execution_sends_the_digest_of_what_runs_and_reports_each_action() -> None:
    gate = FakeGate(approved=ARTICLE)
    with client(gate).execution("t", subject=ARTICLE, operation_id="op-1") as run:
        assert run.pending == ["publish", "notify"]
        run.complete("publish", {"url": "https://example.test/a"})
    (sent,) = gate.calls("/execute")
    assert sent == {"revision": 1, "digest": digest(ARTICLE), "operation_id": "op-1"}
    assert [b["operation_id"] for b in gate.calls("/complete")] == ["op-1", "op-1"]
    assert gate.calls("/complete")[0]["result"] == {"url": "https://example.test/a"}


def test_a_locally_changed_subject_is_refused_whatever_the_approval_said() -> None:
    gate = FakeGate(approved=ARTICLE)
    changed = ARTICLE | {"figure": "14%"}
    with (
        pytest.raises(ApprovalNotValid) as raised,
        client(gate).execution("t", subject=changed, operation_id="op-1"),
    ):
        raise AssertionError("the block must not run")
    assert raised.value.reason == "STALE_DIGEST"
    assert gate.calls("/execute")[0]["digest"] == digest(changed)


def test_an_exception_in_the_block_fails_the_unreported_actions() -> None:
    gate = FakeGate(approved=ARTICLE)

    def publish_then_break() -> None:
        with client(gate).execution("t", subject=ARTICLE, operation_id="op-1") as run:
            run.complete("publish")
            raise RuntimeError("the newsletter service is down")

    with pytest.raises(RuntimeError):
        publish_then_break()
    failed = gate.calls("/fail")
    assert len(failed) == 1
    assert "newsletter" in failed[0]["result"]["error"]
    assert [p for _m, p, _b, _h in gate.requests if "/actions/" in p] == [
        "/tasks/t/actions/publish/complete",
        "/tasks/t/actions/notify/fail",
    ]


def test_the_execution_waits_for_another_executors_lease_to_lapse() -> None:
    gate = FakeGate(approved=ARTICLE)
    gate.busy_once = True
    with client(gate).execution("t", subject=ARTICLE, operation_id="op-1") as run:
        run.complete("publish")
        run.complete("notify")
    assert len(gate.calls("/execute")) == 2
    gate.busy_once = True
    with (
        pytest.raises(AlreadyExecuting),
        client(gate).execution("t", subject=ARTICLE, operation_id="op-1", wait_for_lease=0),
    ):
        pass


def test_the_execution_lease_is_renewed_while_the_block_runs() -> None:
    gate = FakeGate(approved=ARTICLE, lease_seconds=0.6)
    renewed = []
    with client(gate).execution("t", subject=ARTICLE, operation_id="op-1") as run:
        # Wait for the background renewal itself, not for a span of time.
        while not (renewed := gate.calls("/execution/renew")):
            time.sleep(0.01)
        run.complete("publish")
        run.complete("notify")
    renew_headers = [h for _m, p, _b, h in gate.requests if p.endswith("/execution/renew")]
    assert renewed
    assert renew_headers[0]["x-execution-token"] == "tok-1"


def test_a_lost_execution_lease_is_reported_on_the_run() -> None:
    gate = FakeGate(approved=ARTICLE, lease_seconds=0.6)
    gate.lose_lease = True

    def run_until_the_lease_is_lost() -> None:
        with client(gate).execution("t", subject=ARTICLE, operation_id="op-1") as run:
            while run.lease_lost is None:  # the background renewal's answer, not a span of time
                time.sleep(0.01)
            assert isinstance(run.lease_lost, ExecutionLeaseLost)
            raise run.lease_lost

    with pytest.raises(ExecutionLeaseLost):
        run_until_the_lease_is_lost()


def test_a_completed_operation_runs_nothing_again() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json=task_json(current_revision=1, digest=digest(ARTICLE)))
        assert request.url.path.endswith("/execute")
        return httpx.Response(
            200,
            json={
                "task_id": "t",
                "execution_status": "COMPLETED",
                "operation_id": "op-1",
                "actions": [{"id": "publish", "status": "COMPLETED"}],
            },
        )

    with client(handler).execution("t", subject=ARTICLE, operation_id="op-1") as run:
        assert run.pending == []
        assert run.completed
        assert run.token is None


# --- the async twin -----------------------------------------------------------------------


def test_the_async_client_behaves_the_same() -> None:
    gate = FakeGate(approved=ARTICLE)

    async def scenario() -> None:
        async with AsyncSignoff(
            "http://signoff.test", "key", transport=httpx.MockTransport(gate), backoff=0
        ) as c:
            task = await c.get_task("t")
            assert task.is_approved
            async with c.execution("t", subject=ARTICLE, operation_id="op-2") as run:
                await run.complete("publish")
            with pytest.raises(ApprovalNotValid):
                async with c.execution("t", subject={"other": 1}, operation_id="op-3"):
                    pass

    asyncio.run(scenario())
    assert [b["operation_id"] for b in gate.calls("/complete")] == ["op-2", "op-2"]


def test_list_tasks_follows_the_cursor() -> None:
    pages = {
        None: {"items": [task_json(id="a"), task_json(id="b")], "next_cursor": "c1"},
        "c1": {"items": [task_json(id="c")], "next_cursor": None},
    }

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.params["execution_status"] == "EXECUTING"
        return httpx.Response(200, json=pages[request.url.params.get("cursor")])

    ids = [t.id for t in client(handler).list_tasks(execution_status="EXECUTING")]
    assert ids == ["a", "b", "c"]


# --- webhooks -----------------------------------------------------------------------------

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
OLD_SECRET = "whsec_" + base64.b64encode(b"o" * 32).decode()


def signed(body: bytes, secret: str, *, at: int | None = None) -> dict[str, str]:
    timestamp = str(at if at is not None else int(time.time()))
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, f"evt-1.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return {
        "webhook-id": "evt-1",
        "webhook-timestamp": timestamp,
        "webhook-signature": "v1," + base64.b64encode(mac).decode(),
        "X-Signature-256": "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest(),
    }


EVENT = json.dumps(
    {
        "id": "evt-1",
        "type": "task.resolved",
        "created_at": "2026-11-30T12:00:00.000000Z",
        "data": task_json(status="RESOLVED", decision="APPROVED", metadata={"thread_id": "t-1"}),
    }
).encode()


def test_verify_event_returns_a_typed_event() -> None:
    event = verify_event(signed(EVENT, SECRET), EVENT, [SECRET])
    assert (event.type, event.task.decision, event.webhook_id) == (
        "task.resolved",
        "APPROVED",
        "evt-1",
    )
    assert event.metadata == {"thread_id": "t-1"}
    assert event.scheme == "standard-webhooks"


def test_verify_event_accepts_the_previous_secret_during_a_rotation() -> None:
    assert verify_event(signed(EVENT, OLD_SECRET), EVENT, [SECRET, OLD_SECRET]).id == "evt-1"
    with pytest.raises(WebhookVerificationFailed):
        verify_event(signed(EVENT, OLD_SECRET), EVENT, [SECRET])


def test_verify_event_refuses_tampering_staleness_and_a_downgrade() -> None:
    headers = signed(EVENT, SECRET)
    with pytest.raises(WebhookVerificationFailed):
        verify_event(headers, EVENT.replace(b"APPROVED", b"REJECTED"), [SECRET])
    with pytest.raises(WebhookVerificationFailed):
        verify_event(signed(EVENT, SECRET, at=int(time.time()) - 3600), EVENT, [SECRET])
    # A bad Standard Webhooks signature is not rescued by a good X-Signature-256.
    with pytest.raises(WebhookVerificationFailed):
        verify_event(headers | {"webhook-signature": "v1,AAAA"}, EVENT, [SECRET])


def test_verify_event_falls_back_to_x_signature_256_only_when_allowed() -> None:
    body_only = {"X-Signature-256": signed(EVENT, SECRET)["X-Signature-256"]}
    event = verify_event(body_only, EVENT, SECRET)
    assert event.scheme == "x-signature-256"
    assert event.dedupe_key == "evt-1"
    with pytest.raises(WebhookVerificationFailed):
        verify_event(body_only, EVENT, SECRET, allow_body_only_signature=False)


def test_verify_event_is_reexported_by_signoff_webhooks() -> None:
    from signoff import webhooks

    assert webhooks.verify_event is verify_event


def test_an_execution_completed_under_another_operation_is_not_waited_for() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if request.method == "GET":
            return httpx.Response(200, json=task_json(current_revision=1, digest=digest(ARTICLE)))
        return problem(409, "ERR_ALREADY_EXECUTING", execution_status="COMPLETED")

    with (
        pytest.raises(AlreadyExecuting),
        client(handler).execution("t", subject=ARTICLE, operation_id="op-other"),
    ):
        pass
    assert [c for c in calls if c.endswith("/execute")] == [calls[-1]]


def test_wait_for_decision_reconnects_through_a_restart_until_its_own_timeout() -> None:
    # A dropped connection and a restarting server (503) do not end the wait: it pauses
    # with backoff and asks again, the same long-poll, until the decision comes.
    now = [0.0]
    op = _wait_ops.wait_for_decision("t", timeout=600, clock=lambda: now[0])
    assert isinstance(next(op), ops.Call)
    held = op.send(httpx.Response(200, json=task_json(version=3, status="CLAIMED")))
    assert isinstance(held, ops.Call)
    pauses = []
    for error in (
        ConnectionFailed("GET /tasks/t: ConnectError"),
        ConnectionFailed("GET /tasks/t: RemoteProtocolError"),
        NotReady("restarting", status=503, error_code="ERR_NOT_READY", problem={}),
    ):
        now[0] += 1.0
        pause = op.throw(error)
        assert isinstance(pause, ops.Pause)
        assert 0 < pause.seconds <= _wait_ops.MAX_RECONNECT_PAUSE
        pauses.append(pause.seconds)
        again = op.send(None)
        assert isinstance(again, ops.Call)
        assert again.params == {"wait": 60, "after_version": 3}  # the same question again
    with pytest.raises(StopIteration) as done:
        op.send(
            httpx.Response(200, json=task_json(version=4, status="RESOLVED", decision="APPROVED"))
        )
    assert done.value.value.decision == "APPROVED"


def test_wait_for_decision_on_a_lost_server_times_out_only_at_its_timeout() -> None:
    now = [0.0]
    op = _wait_ops.wait_for_decision("t", timeout=10, clock=lambda: now[0])
    next(op)
    op.send(httpx.Response(200, json=task_json(version=1)))
    now[0] = 9.0
    pause = op.throw(ConnectionFailed("refused"))
    assert isinstance(pause, ops.Pause)
    assert pause.seconds <= 1.0  # never past the timeout
    now[0] = 10.0
    op.send(None)
    with pytest.raises(DecisionTimeout) as raised:  # a timeout, with the last task seen
        op.throw(ConnectionFailed("still refused"))
    assert raised.value.task.version == 1
    assert isinstance(raised.value.__cause__, ConnectionFailed)


def test_wait_for_decision_cannot_start_without_the_server() -> None:
    op = _wait_ops.wait_for_decision("t", timeout=0, clock=lambda: 0.0)
    next(op)
    with pytest.raises(ConnectionFailed):  # no task was ever seen: nothing to time out on
        op.throw(ConnectionFailed("refused"))


def test_wait_for_decision_raises_a_refusal_at_once() -> None:
    op = _wait_ops.wait_for_decision("t", timeout=600, clock=lambda: 0.0)
    next(op)
    with pytest.raises(NotFound):
        op.throw(NotFound("gone", status=404, error_code="ERR_TASK_NOT_FOUND", problem={}))


def test_reconnect_pauses_grow_and_stay_below_their_cap() -> None:
    for attempt in range(1, 40):
        pause = _wait_ops.reconnect_pause(attempt)
        assert 0 < pause <= min(_wait_ops.MAX_RECONNECT_PAUSE, 0.25 * 2**attempt)
    assert max(_wait_ops.reconnect_pause(30) for _ in range(200)) > 1.0
