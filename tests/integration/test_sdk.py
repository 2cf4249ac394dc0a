"""The Python SDK against a real Signoff (SQLite and PostgreSQL)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from signoff.client import (
    AlreadyExecuting,
    ApprovalNotValid,
    ExecutionLeaseLost,
    Forbidden,
    IdempotencyKeyReused,
    NotFound,
    Signoff,
    StaleRevision,
    Task,
    TaskConflict,
    digest,
)
from tests.support import LiveServer


@pytest.fixture
def sdk(server: LiveServer) -> Iterator[Any]:
    opened: list[Signoff] = []

    def make(role: str) -> Signoff:
        key = server.new_client(role).key
        assert key is not None
        client = Signoff(server.base_url, key, backoff=0)
        opened.append(client)
        return client

    yield make
    for client in opened:
        client.close()


def article(figure: str = "12%") -> dict[str, Any]:
    return {
        "title": "Central bank holds rates",
        "body": f"Inflation stood at {figure} in November.",
        "figures": {"inflation": figure},
        "actions": [{"id": "publish"}],
    }


def escalate(agent: Signoff, key: str, *, subject: dict[str, Any] | None = None, **kw: Any) -> Task:
    arguments: dict[str, Any] = {
        "key": key,
        "entity_type": "article",
        "entity_id": kw.pop("entity_id", key),
        "reason_code": "EDITORIAL_REVIEW",
        "attempted_actions": [
            {
                "action": "fact_check",
                "executed_at": kw.pop("executed_at", datetime(2026, 11, 30, 9, tzinfo=UTC)),
                "result": "one figure could not be sourced",
            }
        ],
        "evaluator_verdict": {"confidence_score": 0.42, "threshold": 0.9},
        "input_snapshot": {"title": "Central bank holds rates"},
        "trace_id": "trace-" + key,
        "subject": subject if subject is not None else article(),
    }
    return agent.escalate(**(arguments | kw))


def approve(editor: Signoff, task_id: str, decision: str = "APPROVED") -> Task:
    claimed = editor.claim(task_id)
    assert claimed.lease_token
    return editor.resolve(claimed, decision=decision, notes="checked")


def test_an_agent_escalates_and_a_reviewer_bot_decides(sdk: Any) -> None:
    agent, editor = sdk("producer"), sdk("reviewer")
    task = escalate(agent, f"story-{uuid.uuid4()}")
    assert task.status == "PENDING_REVIEW"
    assert task.digest == digest(article())
    assert task.current_revision == 1

    claimed = editor.claim_next(entity_type="article")
    assert claimed is not None
    assert claimed.id == task.id
    renewed = editor.renew(claimed)
    assert renewed.version > claimed.version
    resolved = editor.resolve(claimed, decision="APPROVED", notes="fine")
    assert resolved.is_approved
    assert resolved.approved_digest == digest(article())

    decided = agent.wait_for_decision(task.id, timeout=5)
    assert decided.decision == "APPROVED"
    assert [e.type for e in agent.task_events(task.id)][-1] == "task.resolved"


def test_wait_for_decision_wakes_when_a_person_decides(sdk: Any) -> None:
    agent, editor = sdk("producer"), sdk("reviewer")
    task = escalate(agent, f"story-{uuid.uuid4()}")
    outcome: list[Task] = []
    waiter = threading.Thread(
        target=lambda: outcome.append(agent.wait_for_decision(task.id, timeout=60))
    )
    waiter.start()
    approve(editor, task.id, decision="REJECTED")
    waiter.join()
    assert outcome[0].decision == "REJECTED"


def test_the_same_key_never_makes_a_second_task(sdk: Any) -> None:
    agent = sdk("producer")
    key = f"story-{uuid.uuid4()}"
    first = escalate(agent, key)
    assert escalate(agent, key).id == first.id  # a replay
    # A re-run whose attempted actions carry a fresh timestamp: the same escalation.
    rerun = escalate(agent, key, executed_at=datetime(2026, 11, 30, 10, tzinfo=UTC))
    assert rerun.id == first.id


def test_the_same_key_with_another_subject_is_refused_not_answered_with_the_old_task(
    server: LiveServer, sdk: Any
) -> None:
    agent, editor = sdk("producer"), sdk("reviewer")
    key = f"refund-{uuid.uuid4()}"
    small, large = {"text": "We will refund 50 EUR."}, {"text": "We will refund 5000 EUR."}
    first = escalate(agent, key, subject=small)
    approve(editor, first.id)
    with pytest.raises(IdempotencyKeyReused) as refused:
        escalate(agent, key, subject=large)
    assert refused.value.changed == ["subject"]
    assert refused.value.task_id == first.id
    assert "new revision" in refused.value.message

    # After the idempotency window the key is free, the escalation id still taken: the
    # same answer, and the same content still finds its task.
    server.clock.advance(server.settings.idempotency_ttl_seconds + 1)
    with pytest.raises(IdempotencyKeyReused):
        escalate(agent, key, subject=large)
    again = escalate(agent, key, subject=small)
    assert (again.id, again.decision, again.digest) == (first.id, "APPROVED", digest(small))


def test_the_same_key_with_another_snapshot_is_refused_on_the_one_step_path(sdk: Any) -> None:
    agent = sdk("producer")
    key = f"refund-{uuid.uuid4()}"
    # No subject, the default policy: the escalation's one-step (grouped) write path.
    first = agent.escalate(**plain_escalation(key, amount="50"))
    assert agent.escalate(**plain_escalation(key, amount="50")).id == first.id
    with pytest.raises(IdempotencyKeyReused) as refused:
        agent.escalate(**plain_escalation(key, amount="5000"))
    assert refused.value.changed == ["diagnostic_bundle.input_snapshot"]
    assert refused.value.task_id == first.id


def plain_escalation(key: str, *, amount: str) -> dict[str, Any]:
    return {
        "key": key,
        "entity_type": "refund",
        "entity_id": key,
        "reason_code": "ABOVE_LIMIT",
        "attempted_actions": [
            {"action": "policy", "executed_at": datetime.now(UTC), "result": "above limit"}
        ],
        "evaluator_verdict": {"confidence_score": 0.5, "threshold": 0.9},
        "input_snapshot": {"amount": amount},
        "trace_id": "refund",
    }


def test_another_key_for_the_same_entity_conflicts_or_adopts(sdk: Any) -> None:
    agent = sdk("producer")
    entity = f"a-{uuid.uuid4().hex[:8]}"
    first = escalate(agent, f"k1-{entity}", entity_id=entity)
    with pytest.raises(TaskConflict):
        escalate(agent, f"k2-{entity}", entity_id=entity)
    adopted = escalate(agent, f"k2-{entity}", entity_id=entity, on_conflict="adopt")
    assert adopted.id == first.id


def test_the_gate_refuses_what_changed_after_approval_until_it_is_approved_again(
    sdk: Any,
) -> None:
    agent, editor = sdk("producer"), sdk("reviewer")
    task = escalate(agent, f"story-{uuid.uuid4()}")
    approve(editor, task.id)

    # An automated step changed a figure after the approval: the digest of what would
    # run is computed locally, so the approval of revision 1 cannot cover it.
    changed = article("14%")
    with (
        pytest.raises(ApprovalNotValid) as refused,
        agent.execution(task.id, subject=changed, operation_id=f"publish-{task.id}"),
    ):
        pass
    assert refused.value.reason == "STALE_DIGEST"

    revised = agent.revise(task.id, changed, expected_revision=1)
    assert revised.status == "PENDING_REVIEW"
    assert revised.current_revision == 2
    claimed = editor.claim(task.id)
    with pytest.raises(StaleRevision):  # a decision about revision 1 is none about 2
        editor.resolve(claimed, decision="APPROVED", revision=1, digest=digest(article()))
    editor.release(claimed)
    approve(editor, task.id)

    operation = f"publish-{task.id}-r2"
    published: list[str] = []
    with agent.execution(task.id, subject=changed, operation_id=operation) as run:
        for action in run.pending:
            published.append(action)
            run.complete(action, {"url": "https://news.example/rates"})
    assert published == ["publish"]
    assert agent.get_task(task.id).execution_status == "COMPLETED"

    # The same operation again runs nothing: its stored outcome comes back.
    with agent.execution(task.id, subject=changed, operation_id=operation) as again:
        assert again.pending == []
        assert again.completed


def test_an_invalidated_approval_is_named_as_such_by_the_gate(sdk: Any) -> None:
    agent, editor = sdk("producer"), sdk("reviewer")
    task = escalate(agent, f"story-{uuid.uuid4()}")
    approve(editor, task.id)
    agent.revise(task.id, article("14%"), expected_revision=1)

    def refusal(subject: dict[str, Any]) -> str | None:
        with (
            pytest.raises(ApprovalNotValid) as refused,
            agent.execution(task.id, subject=subject, operation_id="op"),
        ):
            pass
        return refused.value.reason

    # What the approval covered, now invalidated by revision 2 (in review, then approved).
    assert refusal(article()) == "APPROVAL_INVALIDATED"
    assert refusal(article("99%")) == "NOT_DECIDED"  # never submitted; revision 2 waits
    approve(editor, task.id)
    assert refusal(article()) == "APPROVAL_INVALIDATED"
    assert refusal(article("99%")) == "STALE_DIGEST"


def test_an_id_never_reaches_another_route(server: LiveServer, sdk: Any) -> None:
    admin = Signoff(server.base_url, server.settings.bootstrap_admin_key or "", backoff=0)
    with admin:
        for task_id in ("../webhook-endpoints", "..", "../me"):
            with pytest.raises(NotFound):
                admin.get_task(task_id)


def test_an_undecided_task_does_not_pass_the_gate(sdk: Any) -> None:
    agent = sdk("producer")
    task = escalate(agent, f"story-{uuid.uuid4()}")
    with (
        pytest.raises(ApprovalNotValid) as refused,
        agent.execution(task.id, subject=article(), operation_id="op"),
    ):
        pass
    assert refused.value.reason == "NOT_DECIDED"


def test_list_tasks_iterates_over_every_page(sdk: Any) -> None:
    agent = sdk("producer")
    entity_type = f"doc-{uuid.uuid4().hex[:8]}"
    made = [escalate(agent, f"{entity_type}-{n}", entity_type=entity_type).id for n in range(5)]
    listed = [t.id for t in agent.list_tasks(entity_type=entity_type, page_size=2)]
    assert sorted(listed) == sorted(made)  # oldest first; the test clock stands still


def test_refusals_are_typed(sdk: Any) -> None:
    agent, editor = sdk("producer"), sdk("reviewer")
    with pytest.raises(NotFound) as missing:
        agent.get_task(str(uuid.uuid4()))
    assert missing.value.error_code == "ERR_TASK_NOT_FOUND"
    task = escalate(agent, f"story-{uuid.uuid4()}")
    with pytest.raises(Forbidden):
        agent.claim(task.id)
    with pytest.raises(Forbidden):  # only producers revise
        editor.revise(task.id, article("1%"), expected_revision=1)


def test_metadata_and_trace_context_travel_with_the_task(sdk: Any) -> None:
    agent, editor = sdk("producer"), sdk("reviewer")
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    correlation = {"langgraph": {"thread_id": "t-42", "node": "review"}}
    task = escalate(agent, f"story-{uuid.uuid4()}", metadata=correlation, traceparent=traceparent)
    assert task.metadata == correlation
    assert agent.get_task(task.id).metadata == correlation
    assert editor.get_task(task.id).metadata is None  # the producer's own, not the reviewer's


def test_one_executor_at_a_time_and_a_lapsed_lease_is_taken_over(
    server: LiveServer, sdk: Any
) -> None:
    agent, editor = sdk("producer"), sdk("reviewer")
    task = escalate(agent, f"story-{uuid.uuid4()}")
    approve(editor, task.id)
    operation = f"publish-{task.id}"

    crashed = agent.execution(task.id, subject=article(), operation_id=operation)
    crashed.__enter__()  # granted, then the process "dies": no report, no renewal
    crashed._stop.set()
    assert crashed.token
    assert crashed.pending == ["publish"]
    executing = list(agent.list_tasks(execution_status="EXECUTING", entity_type="article"))
    assert task.id in [t.id for t in executing]

    # While its lease lives, no other operation executes.
    with (
        pytest.raises(AlreadyExecuting) as busy,
        agent.execution(
            task.id, subject=article(), operation_id="another-operation", wait_for_lease=0
        ),
    ):
        pass
    assert busy.value.lease_expires_at is not None

    server.clock.advance(server.settings.execution_lease_seconds + 1)
    with agent.execution(task.id, subject=article(), operation_id="third") as successor:
        assert successor.token != crashed.token
        assert successor.pending == ["publish"]
        with pytest.raises(ExecutionLeaseLost):  # the dead one's token is fenced off
            crashed.complete("publish")
    assert agent.get_task(task.id).execution_status == "COMPLETED"


LINTED = [{"action": "lint", "executed_at": datetime.now(UTC), "result": "clean"}]


def test_a_reviewer_reads_the_subject_its_revisions_and_the_diff(server: LiveServer) -> None:
    producer = Signoff(server.base_url, str(server.new_client("producer").key))
    reviewer = Signoff(server.base_url, str(server.new_client("reviewer").key))
    with producer, reviewer:
        task = producer.escalate(
            key=f"reads-{uuid.uuid4().hex[:8]}", entity_type="article",
            entity_id=f"a-{uuid.uuid4().hex[:8]}", reason_code="EDITORIAL_REVIEW",
            attempted_actions=LINTED,
            evaluator_verdict={"confidence_score": 0.4, "threshold": 0.8},
            input_snapshot={}, trace_id="t-reads",
            subject={"title": "Rates", "body": "Held at 3.25%."},
        )  # fmt: skip
        producer.revise(task.id, {"title": "Rates", "body": "Cut to 3.00%."}, expected_revision=1)

        revisions = reviewer.revisions(task.id)
        assert [r.revision for r in revisions] == [1, 2]
        first = reviewer.get_revision(task.id, 1)
        assert first.subject == {"title": "Rates", "body": "Held at 3.25%."}
        current = reviewer.get_revision(task.id)
        assert current.revision == 2
        assert current.subject == {"title": "Rates", "body": "Cut to 3.00%."}
        assert current.digest == reviewer.get_task(task.id).digest
        changes = reviewer.diff(task.id, from_revision=1, to_revision=2)
        assert (changes.from_revision, changes.to_revision) == (1, 2)
        assert [c["path"] for c in changes.changed] == ["/body"]
        assert changes.changed[0]["to"] == "Cut to 3.00%."
        with pytest.raises(NotFound):
            reviewer.get_revision(task.id, 9)


def test_votes_through_the_sdk_and_a_wait_that_returns_at_the_quorum(sdk: Any) -> None:
    from signoff.client import AlreadyVoted, DecidedByVotes

    agent, first, second = sdk("producer"), sdk("reviewer"), sdk("reviewer")
    task = escalate(agent, "votes-" + uuid.uuid4().hex[:6], approval_rule={"approvals": 2})
    assert task.approval_progress is not None
    assert task.approval_progress.required == 2
    decided: list[Task] = []
    waiter = threading.Thread(
        target=lambda: decided.append(agent.wait_for_decision(task, timeout=30))
    )
    waiter.start()
    with pytest.raises(DecidedByVotes) as by_votes:
        first.claim(task)
    # The message names the SDK call to make; the problem keeps the server's words.
    assert "client.vote(...)" in by_votes.value.message
    assert "POST /tasks" not in by_votes.value.message
    assert f"POST /tasks/{task.id}/votes" in by_votes.value.problem["message"]
    one = first.vote(first.get_task(task), decision="APPROVED")
    assert one.status == "PENDING_REVIEW"
    assert one.approval_progress is not None
    assert one.approval_progress.text == "1 of 2 approvals"
    # Typed, and every field the server sends is named (nothing left in model_extra).
    (vote,) = one.votes or []
    assert (vote.decision, vote.revision, vote.digest) == ("APPROVED", 1, one.digest)
    assert not vote.model_extra
    assert not one.approval_progress.model_extra
    with pytest.raises(AlreadyVoted):
        first.vote(one, decision="REJECTED", notes="second thoughts")
    assert first.vote(one, decision="APPROVED").approval_progress == one.approval_progress
    # The wait did not return at the first vote; it returns at the quorum.
    assert decided == []
    done = second.vote(second.get_task(task), decision="APPROVED")
    waiter.join(timeout=30)
    assert done.is_approved
    assert [t.is_approved for t in decided] == [True]
    assert [v.voter for v in decided[0].votes or []] == [
        (first.get_task(task).votes or [])[0].voter,
        done.operator_id,
    ]
