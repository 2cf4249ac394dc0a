"""The transition table and the lease rules read from tasks."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from signoff.domain.clock import ManualClock
from signoff.domain.states import TRANSITIONS, Action, LeaseRule, Role, TaskStatus
from signoff.domain.tasks import Principal, Task, hash_lease_token, refusal_for, task_view


def _task(clock: ManualClock, **changes: object) -> Task:
    now = clock.now()
    values: dict[str, object] = dict(
        id=uuid.uuid4(),
        status=TaskStatus.CLAIMED,
        entity_type="t",
        entity_id="e",
        reason_code="r",
        precheck_hash="0" * 64,
        diagnostic_bundle={},
        producer_id="bot",
        version=2,
        claimed_by="alice",
        lease_token_hash=hash_lease_token("tok"),
        lease_expires_at=now + timedelta(seconds=60),
        decision=None,
        notes=None,
        resolution_payload=None,
        operator_id=None,
        created_at=now,
        updated_at=now,
        resolved_at=None,
    )
    values.update(changes)
    return Task(**values)  # type: ignore[arg-type]


ALICE = Principal(key_id=uuid.uuid4(), principal_id="alice", role=Role.REVIEWER)


def test_every_action_has_exactly_one_transition() -> None:
    assert set(TRANSITIONS) == set(Action)


def test_reviewers_lease_the_system_escalates_overseers_step_in_producers_do_the_rest() -> None:
    lease_actions = {
        Action.CLAIM,
        Action.RENEW,
        Action.RELEASE,
        Action.RESOLVE,
    }
    system_actions = {
        Action.ESCALATE_LEVEL,
        Action.REASSIGN,
        Action.EXPIRE,
        Action.TIME_OUT,
        Action.EXECUTION_STALLED,
    }
    overseer_actions = {Action.FORCE_RELEASE, Action.HAND_OVER, Action.WITHDRAW}
    vote_actions = {Action.VOTE, Action.DECIDE_BY_VOTES}
    for action, step in TRANSITIONS.items():
        if action in lease_actions or action in vote_actions:
            expected = {Role.REVIEWER, Role.SUPERVISOR}
        elif action in system_actions:
            expected = {Role.SYSTEM}
        elif action in overseer_actions:
            expected = {Role.SUPERVISOR, Role.ADMIN}
        else:
            expected = {Role.PRODUCER}
        assert step.roles == expected, action
        assert (step.lease is not LeaseRule.NONE) == (action in lease_actions), action


def test_leases_and_votes_never_meet_on_one_task() -> None:
    """A task with an approval rule is decided by votes and never leased; one without is
    decided under a lease and never voted on."""
    for action in (Action.CLAIM, Action.RESOLVE):
        assert TRANSITIONS[action].by_votes is False, action
    for action in (Action.VOTE, Action.DECIDE_BY_VOTES, Action.VOID_VOTES):
        assert TRANSITIONS[action].by_votes is True, action
        assert TRANSITIONS[action].lease is LeaseRule.NONE, action
    assert TRANSITIONS[Action.DECIDE_BY_VOTES].event_type == TRANSITIONS[Action.RESOLVE].event_type


def test_no_transition_leaves_a_final_status() -> None:
    final = {TaskStatus.EXPIRED, TaskStatus.CANCELLED}
    for step in TRANSITIONS.values():
        assert not (step.sources & final), step.action


def test_resolution_requires_a_live_lease_and_renewal_does_not() -> None:
    assert TRANSITIONS[Action.RESOLVE].lease is LeaseRule.HELD_LIVE
    assert TRANSITIONS[Action.RENEW].lease is LeaseRule.HELD
    assert TRANSITIONS[Action.CLAIM].sources == {TaskStatus.PENDING_REVIEW, TaskStatus.CLAIMED}


def test_a_lease_lapses_at_its_expiry_instant() -> None:
    clock = ManualClock()
    task = _task(clock)
    assert task.effective_status(clock.now()) is TaskStatus.CLAIMED
    clock.advance(59.999)
    assert not task.lease_lapsed(clock.now())
    clock.advance(0.001)
    assert task.lease_lapsed(clock.now())
    view = task_view(task, clock.now())
    assert (view["status"], view["claimed_by"], view["lease_expires_at"]) == (
        "PENDING_REVIEW",
        None,
        None,
    )


def test_refusals_name_the_precise_reason() -> None:
    clock = ManualClock()
    resolve = TRANSITIONS[Action.RESOLVE]
    kw = dict(task_id="x", principal=ALICE, now=clock.now())
    assert refusal_for(resolve, None, lease_token_hash="h", **kw).error_code == "ERR_TASK_NOT_FOUND"  # type: ignore[arg-type]
    task = _task(clock)
    assert refusal_for(resolve, task, lease_token_hash="other", **kw).error_code == "ERR_LEASE_LOST"  # type: ignore[arg-type]
    bob = Principal(key_id=uuid.uuid4(), principal_id="bob", role=Role.REVIEWER)
    kw_bob = dict(kw, principal=bob)
    assert (
        refusal_for(resolve, task, lease_token_hash=hash_lease_token("tok"), **kw_bob).error_code
        == "ERR_LEASE_LOST"
    )  # type: ignore[arg-type]
    clock.advance(60)
    kw["now"] = clock.now()
    assert (
        refusal_for(resolve, task, lease_token_hash=hash_lease_token("tok"), **kw).error_code
        == "ERR_LEASE_EXPIRED"
    )  # type: ignore[arg-type]
    claim = TRANSITIONS[Action.CLAIM]
    assert (
        refusal_for(
            claim, _task(clock, status=TaskStatus.RESOLVED), lease_token_hash=None, **kw
        ).error_code
        == "ERR_STATE_CONFLICT"
    )  # type: ignore[arg-type]


def test_exactly_the_changes_that_move_or_end_a_wait_withdraw_its_resume_links() -> None:
    ending = {action for action, step in TRANSITIONS.items() if step.ends_links}
    assert ending == {
        Action.REASSIGN,
        Action.HAND_OVER,
        Action.EXPIRE,
        Action.CANCEL,
        Action.WITHDRAW,
    }


def test_no_single_statement_can_be_built_for_a_change_that_ends_links() -> None:
    from signoff.store import oneshot

    with pytest.raises(ValueError, match="ends resume links"):
        oneshot._record(TRANSITIONS[Action.CANCEL], "u", "'{}'")
