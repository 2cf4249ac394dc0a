"""A decision is exact and recorded once whichever door it comes through.

The doors: the REST API, the console's form, the e-mail resume link (as a form and as
JSON), and the console's bulk actions. Both engines run side by side on one shared clock
and every step is compared between them; twin tasks decided through different doors
must leave identical rows, audit trails and outbox events.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    precondition,
    rule,
    run_state_machine_as_test,
)

from signoff.domain.clock import ManualClock
from tests.conftest import reset_postgres
from tests.doors import (
    GROUP,
    NOTES_LIMIT,
    OTHER_GROUP,
    REVIEWERS,
    SUBJECT,
    Answer,
    Deployment,
    Snapshot,
    deployments,
    door_neutral,
    door_recorded,
    twin_escalation,
)
from tests.support import escalation

TTL = 600


def _execution_refusal(answer: Answer) -> tuple[int, str | None, Any]:
    reason = answer.body.get("reason") if isinstance(answer.body, dict) else None
    return answer.status, answer.error_code, reason


def _approve_through_link_and_api(deployment: Deployment, clock: ManualClock) -> None:
    for handle in ("by-link", "by-api"):
        made = deployment.escalate(
            handle, twin_escalation(subject=SUBJECT, approval_ttl_seconds=TTL)
        )
        assert made.status == 201, made
        clock.advance(1)
    deployment.send_mail()
    by_link = deployment.resolve_link("alice", "by-link", "APPROVED", None, form=True)
    assert by_link.status == 200, by_link
    assert deployment.claim("alice", "by-api").status == 200
    by_api = deployment.resolve_api("alice", "by-api", "APPROVED", None)
    assert by_api.status == 200, by_api


def test_an_approval_through_a_resume_link_expires_like_one_through_the_api(
    database_url: str, clock: ManualClock
) -> None:
    with deployments({"only": database_url}, clock) as (deployment,):
        _approve_through_link_and_api(deployment, clock)
        clock.advance(TTL + 1)
        by_api = _execution_refusal(deployment.execute("by-api"))
        by_link = _execution_refusal(deployment.execute("by-link"))
    assert by_api == (409, "ERR_APPROVAL_NOT_VALID", "APPROVAL_EXPIRED")
    assert by_link == by_api, (
        f"after the approval TTL, execute answers {by_api} for the API's approval "
        f"but {by_link} for the resume link's"
    )


# The differential state machine ---------------------------------------------------------

WHO = st.sampled_from(REVIEWERS)
DECISIONS = st.sampled_from(["APPROVED", "REJECTED", "REVISION_REQUESTED"])
#: Notes as a person might send them, by name (the names keep a failing sequence
#: readable): none, plain, padded with whitespace, blank, exactly at the limit, and one
#: character over it.
NOTE_TEXTS: dict[str, str | None] = {
    "none": None,
    "plain": "looks right to me",
    "padded": "  the amount needs a second look  \n",
    "blank": "   ",
    "at-limit": "y" * NOTES_LIMIT,
    "over-limit": "x" * (NOTES_LIMIT + 1),
}
NOTES = st.sampled_from(list(NOTE_TEXTS))
DOORS = ("api", "console", "link-form", "link-json")


Refusal = tuple[int, str, str]


def expected_refusals(
    who: str, decision: str, notes: str | None, *, subject: bool
) -> list[Refusal]:
    """The rules every door applies to a decision: each refusal (status, error code,
    field) that applies, or none. When several apply, a door may answer with any of them;
    the rules do not order them."""
    found: list[Refusal] = []
    if who == "bot":
        found.append((403, "ERR_SELF_APPROVAL", ""))
    text = (notes or "").strip()
    if len(text) > NOTES_LIMIT:
        found.append((422, "ERR_VALIDATION", "notes"))
    if decision == "REVISION_REQUESTED" and not subject:
        found.append((422, "ERR_VALIDATION", "decision"))
    if decision != "APPROVED" and not text:
        found.append((422, "ERR_VALIDATION", "notes"))
    return found


def differences(left: Any, right: Any, path: str = "") -> list[str]:
    """Where two normalised values differ, as ``path: left != right`` lines."""
    if isinstance(left, dict) and isinstance(right, dict):
        found = []
        for key in sorted(set(left) | set(right), key=str):
            found += differences(
                left.get(key, "<absent>"), right.get(key, "<absent>"), f"{path}.{key}"
            )
        return found
    if isinstance(left, list) and isinstance(right, list):
        found = []
        for index in range(max(len(left), len(right))):
            a = left[index] if index < len(left) else "<absent>"
            b = right[index] if index < len(right) else "<absent>"
            found += differences(a, b, f"{path}[{index}]")
        return found
    if left != right:
        return [f"{path or '.'}: {_short(left)} != {_short(right)}"]
    return []


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 300 else text[:300] + "…"


class Doors(RuleBasedStateMachine):
    """Every step runs on both engines; answers and stored state must agree after it."""

    urls: Callable[[], dict[str, str]]
    #: Whether twin tasks are decided through two doors and compared (the doors' own
    #: test); without it every door is still used, and compared between engines only.
    twins_compared: bool = True

    tasks = Bundle("tasks")
    twins = Bundle("twins")

    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock()
        self._stack = ExitStack()
        self.engines: list[Deployment] = self._stack.enter_context(
            deployments(type(self).urls(), self.clock)
        )
        self.count = 0
        self.log: list[str] = []
        self.subject: dict[str, bool] = {}
        #: Twins whose decision was refused: the API and the console had claimed in a step
        #: of their own, a link claims nothing for a refused decision, so from then on the
        #: twins agree on what was decided, not on who holds them.
        self.claims_differ: set[tuple[str, str]] = set()

    def teardown(self) -> None:
        self._stack.close()

    # Comparing ----------------------------------------------------------------------------

    def _each(self, step: str, act: Callable[[Deployment], Answer], *handles: str) -> Answer:
        """Run one step on every engine and compare its answer and the touched tasks."""
        self.log.append(step)
        answers = [act(engine) for engine in self.engines]
        first, *others = self.engines
        for engine, answer in zip(others, answers[1:], strict=True):
            diff = differences(vars(answers[0]), vars(answer))
            assert not diff, self._say(
                step, f"the answers differ ({first.name} != {engine.name})", diff
            )
        for handle in handles:
            if handle not in first.task_ids:
                continue
            shots = [engine.snapshot(handle) for engine in self.engines]
            for engine, shot in zip(others, shots[1:], strict=True):
                for part in ("row", "trail", "outbox"):
                    diff = differences(getattr(shots[0], part), getattr(shot, part))
                    assert not diff, self._say(
                        step, f"the task's {part} differs ({first.name} != {engine.name})", diff
                    )
        return answers[0]

    def _say(self, step: str, what: str, diff: list[str]) -> str:
        steps = "\n  ".join(self.log)
        return f"after step {step!r}: {what}:\n  " + "\n  ".join(diff[:20]) + f"\nsteps:\n  {steps}"

    def _mail(self) -> None:
        for engine in self.engines:
            engine.send_mail()

    def _new(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    # Rules --------------------------------------------------------------------------------

    @rule(target=tasks, subject=st.booleans(), ttl=st.booleans(), group=st.booleans())
    def escalate(self, subject: bool, ttl: bool, group: bool) -> str:
        handle = self._new("t")
        fields: dict[str, Any] = {}
        if group:
            fields["assigned_group"] = GROUP
        if subject:
            fields["subject"] = SUBJECT
            if ttl:
                fields["approval_ttl_seconds"] = TTL
        body = escalation(**fields)
        self._each(f"escalate {handle} {fields}", lambda e: e.escalate(handle, body), handle)
        self.subject[handle] = subject
        self.clock.advance(1)  # distinct creation instants: claim-next's order is then total
        self._mail()
        return handle

    @rule(who=WHO, handle=tasks, via=st.sampled_from(["api", "console", "bulk"]))
    def claim(self, who: str, handle: str, via: str) -> None:
        if via == "bulk":
            self._each(
                f"bulk claim {handle} by sam", lambda e: e.bulk("sam", "claim", [handle]), handle
            )
        elif via == "console":
            self._each(
                f"console claim {handle} by {who}", lambda e: e.console_claim(who, handle), handle
            )
        else:
            self._each(f"claim {handle} by {who}", lambda e: e.claim(who, handle), handle)

    @rule(who=WHO)
    def claim_next(self, who: str) -> None:
        handles = list(self.subject)
        self._each(f"claim-next by {who}", lambda e: e.claim_next(who), *handles)

    @rule(who=WHO, handle=tasks)
    def renew(self, who: str, handle: str) -> None:
        self._each(f"renew {handle} by {who}", lambda e: e.renew(who, handle), handle)

    @rule(who=WHO, handle=tasks, via=st.sampled_from(["api", "console", "bulk"]))
    def release(self, who: str, handle: str, via: str) -> None:
        if via == "bulk":
            self._each(
                f"bulk release {handle} by sam",
                lambda e: e.bulk("sam", "release", [handle]),
                handle,
            )
        elif via == "console":
            self._each(
                f"console release {handle} by {who}",
                lambda e: e.console_release(who, handle),
                handle,
            )
        else:
            self._each(f"release {handle} by {who}", lambda e: e.release(who, handle), handle)

    @rule(
        who=st.sampled_from(["alice", "alice", "sam", "bot"]),
        handle=tasks,
        door=st.sampled_from(DOORS),
        decision=DECISIONS,
        notes=NOTES,
    )
    def resolve(self, who: str, handle: str, door: str, decision: str, notes: str) -> None:
        step = f"resolve {handle} by {who} through {door}: {decision}, notes {notes}"
        text = NOTE_TEXTS[notes]
        self._each(step, lambda e: _decide(e, door, who, handle, decision, text), handle)

    @rule(handle=tasks, amount=st.sampled_from(["100 EUR", "900 EUR"]))
    def revise(self, handle: str, amount: str) -> None:
        self._each(f"revise {handle} to {amount}", lambda e: e.revise(handle, amount), handle)
        self._mail()

    @rule(handle=tasks)
    def execute(self, handle: str) -> None:
        self._each(f"execute {handle}", lambda e: e.execute(handle), handle)

    @rule(handle=tasks, outcome=st.sampled_from(["complete", "fail"]))
    def report(self, handle: str, outcome: str) -> None:
        self._each(f"{outcome} the action of {handle}", lambda e: e.report(handle, outcome), handle)

    @rule(handle=tasks)
    def cancel(self, handle: str) -> None:
        self._each(f"cancel {handle}", lambda e: e.cancel(handle), handle)

    @rule(handle=tasks, group=st.sampled_from([GROUP, OTHER_GROUP]), bulk=st.booleans())
    def reassign(self, handle: str, group: str, bulk: bool) -> None:
        if bulk:
            self._each(
                f"bulk reassign {handle} to {group}",
                lambda e: e.bulk("sam", "reassign", [handle], group),
                handle,
            )
        else:
            self._each(f"reassign {handle} to {group}", lambda e: e.reassign(handle, group), handle)
        self._mail()

    @rule(handle=tasks)
    def force_release(self, handle: str) -> None:
        self._each(f"force-release {handle}", lambda e: e.force_release(handle), handle)

    @rule(seconds=st.sampled_from([30, 301, TTL + 1, 901]))
    def advance(self, seconds: int) -> None:
        self.log.append(f"advance the clock {seconds} s")
        self.clock.advance(seconds)

    # Twins: the same decision through two doors --------------------------------------------

    @precondition(lambda self: self.twins_compared)
    @rule(
        target=twins,
        doors=st.lists(st.sampled_from(DOORS), min_size=2, max_size=2, unique=True),
        who=st.sampled_from(["alice", "alice", "bot"]),
        subject=st.booleans(),
        decision=DECISIONS,
        notes=NOTES,
    )
    def decide_twins(
        self, doors: list[str], who: str, subject: bool, decision: str, notes: str
    ) -> tuple[str, str]:
        text = NOTE_TEXTS[notes]
        if who == "bot":
            doors = [d if d in ("api", "console") else "api" for d in doors]
            doors = doors if doors[0] != doors[1] else ["api", "console"]
        pair = (self._new("twin"), self._new("twin"))
        for engine in self.engines:
            for handle in pair:
                # One operation for both: twins differ by the door only.
                engine.operation_ids[handle] = f"op-{pair[0]}"
        fields: dict[str, Any] = {"assigned_group": GROUP}
        if subject:
            fields |= {"subject": SUBJECT, "approval_ttl_seconds": TTL}
        for handle in pair:
            body = twin_escalation(**fields)
            self._each(
                f"escalate {handle} {fields}",
                lambda e, h=handle, b=body: e.escalate(h, b),
                handle,
            )
            self.subject[handle] = subject
        self._mail()
        step = f"{decision} by {who} with notes {notes}"
        answers = [
            self._each(
                f"{step} on {handle} through {door}",
                lambda e, h=handle, d=door: _decide(e, d, who, h, decision, text),
                handle,
            )
            for handle, door in zip(pair, doors, strict=True)
        ]
        expected = expected_refusals(who, decision, text, subject=subject)
        if expected:
            self.claims_differ.add(pair)
        for engine in self.engines:
            self._compare_twins(
                engine,
                pair,
                doors,
                f"{step} (expected {expected or 'a decision'})",
                refused=bool(expected),
            )
        if not expected:  # each decision records the door it came through
            for engine in self.engines:
                for handle, door in zip(pair, doors, strict=True):
                    recorded = door_recorded(engine.snapshot(handle))
                    assert recorded == door.removesuffix("-form").removesuffix("-json"), self._say(
                        step, f"{door} recorded as {recorded} on {engine.name}", []
                    )
        problems = []
        for door, answer in zip(doors, answers, strict=True):
            try:
                self._check_answer(door, answer, expected, step)
            except AssertionError as error:
                problems.append(str(error).split("\nsteps:")[0])
        assert not problems, self._say(step, "doors answer against the rules", problems)
        self.clock.advance(1)
        return pair

    @precondition(lambda self: self.twins_compared)
    @rule(
        pair=twins,
        step=st.sampled_from(["execute", "complete", "fail", "revise", "cancel", "reassign"]),
    )
    def twins_go_on(self, pair: tuple[str, str], step: str) -> None:
        answers = []
        for handle in pair:
            act: Callable[[Deployment], Answer] = {
                "execute": lambda e, h=handle: e.execute(h),
                "complete": lambda e, h=handle: e.report(h, "complete"),
                "fail": lambda e, h=handle: e.report(h, "fail"),
                "revise": lambda e, h=handle: e.revise(h, "900 EUR"),
                "cancel": lambda e, h=handle: e.cancel(h),
                "reassign": lambda e, h=handle: e.reassign(h, OTHER_GROUP),
            }[step]
            answers.append(self._each(f"{step} {handle}", act, handle))
        self._mail()
        diff = differences(_neutral_answer(answers[0]), _neutral_answer(answers[1]))
        assert not diff, self._say(
            f"{step} {pair}", "twins decided through two doors answer differently", diff
        )
        for engine in self.engines:
            self._compare_twins(engine, pair, ["", ""], step, refused=pair in self.claims_differ)

    @precondition(lambda self: self.twins_compared)
    @rule(pair=twins, action=st.sampled_from(["claim", "release", "reassign"]))
    def twins_through_bulk(self, pair: tuple[str, str], action: str) -> None:
        """A supervisor's action through the API on one twin and through the console's
        bulk form on the other."""
        one, other = pair
        api: Callable[[Deployment], Answer] = {
            "claim": lambda e: e.claim("sam", one),
            "release": lambda e: e.force_release(one),
            "reassign": lambda e: e.reassign(one, OTHER_GROUP),
        }[action]
        self._each(f"{action} {one} through the API", api, one)
        self._each(
            f"{action} {other} through bulk",
            lambda e: e.bulk("sam", action, [other], OTHER_GROUP if action == "reassign" else ""),
            other,
        )
        self._mail()
        for engine in self.engines:
            self._compare_twins(
                engine,
                pair,
                ["the API", "bulk"],
                f"{action} by sam",
                refused=pair in self.claims_differ,
            )

    @precondition(lambda self: self.twins_compared)
    @rule(pair=twins, form=st.booleans())
    def withdrawn_links_decide_nothing(self, pair: tuple[str, str], form: bool) -> None:
        """Reassigned to a group alice is not in (through the API, and through bulk): her
        earlier links are withdrawn and decide nothing."""
        one, other = pair
        self._each(f"reassign {one} to {OTHER_GROUP}", lambda e: e.reassign(one, OTHER_GROUP), one)
        self._each(
            f"bulk reassign {other} to {OTHER_GROUP}",
            lambda e: e.bulk("sam", "reassign", [other], OTHER_GROUP),
            other,
        )
        self._mail()
        door = "link-form" if form else "link-json"
        for handle in pair:
            before = [e.snapshot(handle) for e in self.engines]
            step = f"alice approves {handle} through her withdrawn link ({door})"
            answer = self._each(
                step,
                lambda e, h=handle: _decide(e, door, "alice", h, "APPROVED", None),
                handle,
            )
            after = [e.snapshot(handle) for e in self.engines]
            for engine, old, new in zip(self.engines, before, after, strict=True):
                diff = differences(vars(old), vars(new))
                assert not diff, self._say(
                    step, f"on {engine.name}, a withdrawn link changed the task", diff
                )
            if before[0].row["status"] in ("PENDING_REVIEW", "CLAIMED"):
                assert answer.status in (0, 410), self._say(
                    step, "a withdrawn link did not answer 410", [f"{answer.status}"]
                )
        for engine in self.engines:
            self._compare_twins(
                engine, pair, ["the API", "bulk"], "reassign", refused=pair in self.claims_differ
            )

    def _compare_twins(
        self,
        engine: Deployment,
        pair: tuple[str, str],
        doors: list[str],
        step: str,
        *,
        refused: bool = False,
    ) -> None:
        """Twins must agree on everything; after a refused decision, on what was decided
        (the API and the console claim in a step of their own, a link does not)."""
        labels = engine.twin_labels(*pair)
        shots = [door_neutral(engine.snapshot(handle), labels) for handle in pair]
        if refused:
            shots = [decided_part(shot) for shot in shots]
        for part in ("row", "trail", "outbox"):
            diff = differences(getattr(shots[0], part), getattr(shots[1], part))
            assert not diff, self._say(
                f"{step} on {pair}",
                f"on {engine.name}, the {part} of the task decided through "
                f"{doors[0] or 'one door'} differs from its twin's, decided through "
                f"{doors[1] or 'another door'}",
                diff,
            )

    def _check_answer(self, door: str, answer: Answer, expected: list[Refusal], step: str) -> None:
        got = f"{answer.status} {answer.error_code} {_short(answer.body)}"
        what = f"{step} through {door}: expected {expected or 'a decision'}, got {got}"
        if not expected:
            assert answer.status == 200, self._say(step, "a valid decision was refused", [what])
            return
        if door in ("api", "link-json"):
            fields = [e.get("field") for e in (answer.body or {}).get("errors") or []]
            assert any(
                (answer.status, answer.error_code) == (status, code)
                and (not field or field in fields)
                for status, code, field in expected
            ), self._say(step, "the door's refusal differs from the rules", [what])
        else:
            # A page for a person: the refusal is its status, or shown in words with its
            # code on a page that stays usable.
            assert any(
                answer.status == status or answer.error_code == code for status, code, _ in expected
            ), self._say(step, "the page does not show the refusal the rules ask for", [what])


DECIDED_FIELDS = (
    "decision",
    "notes",
    "resolution_payload",
    "operator_id",
    "resolved_at",
    "approved_revision",
    "approved_digest",
    "approval_expires_at",
    "approver_key_id",
)
DECIDING_EVENTS = ("task.resolved", "task.approval_invalidated", "task.approval_carried_forward")


def decided_part(shot: Snapshot) -> Snapshot:
    """What a decision writes, and nothing a claim writes."""
    fields = {name: shot.row[name] for name in DECIDED_FIELDS}
    fields["resolved"] = shot.row["status"] == "RESOLVED"
    return Snapshot(
        fields,
        [event for event in shot.trail if event["event_type"] in DECIDING_EVENTS],
        [event for event in shot.outbox if event["event_type"] in DECIDING_EVENTS],
    )


def _decide(
    engine: Deployment, door: str, who: str, handle: str, decision: str, notes: str | None
) -> Answer:
    """A decision through one door, with the claim that door needs (a link claims itself)."""
    if door == "api":
        if (who, handle) not in engine.leases:
            engine.claim(who, handle)
        return engine.resolve_api(who, handle, decision, notes)
    if door == "console":
        engine.console_claim(who, handle)
        return engine.resolve_console(who, handle, decision, notes)
    return engine.resolve_link(who, handle, decision, notes, form=door == "link-form")


def _neutral_answer(answer: Answer) -> tuple[int, str | None, Any]:
    body = answer.body
    reason = body.get("reason") if isinstance(body, dict) else None
    return answer.status, answer.error_code, reason


def _play(tmp_path: Path, postgres_database: str, *, twins: bool) -> None:
    runs = iter(range(10_000))

    def urls() -> dict[str, str]:
        reset_postgres(postgres_database)
        database = tmp_path / f"run{next(runs)}.db"
        return {"sqlite": f"sqlite:///{database}", "postgresql": postgres_database}

    machine = type("Play", (Doors,), {"urls": staticmethod(urls), "twins_compared": twins})
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=6,
            stateful_step_count=12,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            # Every example starts two servers: shrinking would replay hundreds of them.
            # A failure prints its steps as run, and fails at the first divergent step.
            phases=[Phase.explicit, Phase.reuse, Phase.generate],
        ),
    )


def test_sqlite_and_postgresql_agree_step_by_step_whatever_the_door(
    tmp_path: Path, postgres_database: str
) -> None:
    _play(tmp_path, postgres_database, twins=False)


def test_the_same_decision_through_two_doors_leaves_the_same_task_trail_and_outbox(
    tmp_path: Path, postgres_database: str
) -> None:
    _play(tmp_path, postgres_database, twins=True)


# Every door against the API, case by case ----------------------------------------------

#: (door, who, subject, decision, notes): each door against the API on twin tasks, for
#: every decision and kind of notes, and the producer's own principal trying its doors.
MATRIX = (
    [
        (door, "alice", True, decision, notes)
        for door in ("console", "link-form", "link-json")
        for decision in ("APPROVED", "REJECTED", "REVISION_REQUESTED")
        for notes in NOTE_TEXTS
    ]
    + [
        (door, "alice", False, "REVISION_REQUESTED", "plain")
        for door in ("console", "link-form", "link-json")
    ]
    + [
        ("console", "bot", subject, decision, "plain")
        for subject in (True, False)
        for decision in ("APPROVED", "REJECTED", "REVISION_REQUESTED")
    ]
)


def test_each_door_decides_like_the_api_and_as_the_rules_say(
    engine: str, database_url: str
) -> None:
    """Not one sequence but the whole table, so one run lists every case that differs."""
    machine = type("Table", (Doors,), {"urls": staticmethod(lambda: {engine: database_url})})()
    failures = []
    try:
        for door, who, subject, decision, notes in MATRIX:
            machine.log = []
            try:
                machine.decide_twins(["api", door], who, subject, decision, notes)
            except AssertionError as error:
                shown = re.split(r"\n\s*steps:", str(error))[0].splitlines()[:8]
                failures.append(
                    f"- {who}, {decision}, notes {notes}, subject {subject}, "
                    f"API against {door}:\n    " + "\n    ".join(shown)
                )
    finally:
        machine.teardown()
    if failures:
        pytest.fail(
            f"{len(failures)} of {len(MATRIX)} decisions differ between the API and another "
            "door, or from the rules:\n" + "\n".join(failures),
            pytrace=False,
        )


def test_a_reassignment_withdraws_the_old_links_whichever_door_moved_the_task(
    engine: str, database_url: str
) -> None:
    machine = type("Once", (Doors,), {"urls": staticmethod(lambda: {engine: database_url})})()
    try:
        for form in (False, True):
            pair = machine.decide_twins(["api", "console"], "bot", True, "APPROVED", "plain")
            machine.withdrawn_links_decide_nothing(pair, form)
    finally:
        machine.teardown()
