"""A line diff is bounded: a change too large to show line by line says so at once, in the
API, the console and the resume page, and the server keeps answering everyone else."""

from __future__ import annotations

import difflib
import os
import random
import threading
import time
from typing import Any

import httpx
import pytest

from signoff.domain.revisions import (
    DIFF_MAX_CHARS,
    LINE_DIFF_MAX_CHARS,
    LINE_DIFF_MAX_LINES,
    DiffBudget,
    structured_diff,
    unified_line_diff,
)
from signoff.services import revisions as revision_service
from tests.integration.test_approvals import SUBJECT, decide, new_subject_task, revise
from tests.integration.test_console_auth import (
    PASSWORD,
    _browser,
    _create_user,
    _csrf,
    _sign_in,
)
from tests.integration.test_waiting import (  # noqa: F401  (fixtures)
    links_in,
    local,
    mailbox,
    person,
    send_mail,
    waiting,
)
from tests.mailbox import Mailbox
from tests.processes import wait_for
from tests.support import LiveServer, escalation

SENTENCE = "This change is too large to show line by line"
WHOLE_DIFF_SENTENCE = "Some changes are too large to compare"


def _crafted(variant: int, size: int = 900_000) -> str:
    """Short lines drawn from ~110 distinct ones: difflib's slowest kind of input (its
    junk heuristic drops no line, and matches are many and short)."""
    pick = random.Random(variant)
    lines = [f"entry {k:03d}" for k in range(110)]
    text: list[str] = []
    total = 0
    while total < size:
        line = pick.choice(lines)
        text.append(line)
        total += len(line) + 1
    return "\n".join(text)


def _many_lines(variant: int) -> str:
    pick = random.Random(variant)
    return "\n".join(str(pick.randrange(100)) for _ in range(LINE_DIFF_MAX_LINES + 1))


def test_the_line_diff_matches_difflib_and_gives_up_when_out_of_time() -> None:
    pick = random.Random(7)
    for _ in range(200):
        a = [pick.choice("abcde") for _ in range(pick.randrange(30))]
        b = [pick.choice("abcde") for _ in range(pick.randrange(30))]
        expected = list(difflib.unified_diff(a, b, "from", "to", lineterm=""))
        assert unified_line_diff(a, b, DiffBudget(seconds=60)) == expected
    a, b = _crafted(1, 20_000).splitlines(), _crafted(2, 20_000).splitlines()
    assert unified_line_diff(a, b, DiffBudget(seconds=0)) is None


def _paragraphs(variant: int, strings: int = 48, size: int = 21_000) -> dict[str, str]:
    """About 1 MB of text in ``strings`` fields, each well within a line diff's own limits."""
    pick = random.Random(variant)
    return {
        f"part{n:02d}": "\n".join(
            f"clause {n}.{k}: " + "".join(pick.choice("abcdefgh ") for _ in range(40))
            for k in range(size // 55)
        )
        for n in range(strings)
    }


def test_the_line_diffs_of_a_whole_diff_share_one_budget() -> None:
    old = _paragraphs(1)
    assert all(len(text) < LINE_DIFF_MAX_CHARS for text in old.values())
    assert all(text.count("\n") < LINE_DIFF_MAX_LINES for text in old.values())
    new = {name: text.replace("clause", "Clause", 1) for name, text in old.items()}
    diff = structured_diff(old, new, [], [])
    shown = [c for c in diff["changed"] if "line_diff" in c]
    too_large = [c for c in diff["changed"] if c.get("line_diff_too_large")]
    assert len(shown) + len(too_large) == len(old)
    assert shown, "the budget shows what fits"
    assert too_large, "and marks the rest too large"
    assert sum(max(len(c["from"]), len(c["to"])) for c in shown) <= DIFF_MAX_CHARS
    assert all(c["from"] == old[c["path"][1:]] for c in too_large)  # the whole text stays
    assert diff["truncated"] is True
    small = structured_diff({"a": "x\ny"}, {"a": "x\nz"}, [], [])
    assert small["truncated"] is False
    assert small["changed"][0]["line_diff"][-1] == "+z"


def test_a_diff_budget_counts_the_cpu_time_it_spends_not_the_time_it_waits() -> None:
    budget = DiffBudget(seconds=0.05)
    time.sleep(0.2)  # waiting (for the CPU, the GIL, a lock) costs the budget nothing
    assert not budget.out_of_time()
    spins = 0
    while not budget.out_of_time():  # computing does
        spins += 1
    assert spins > 0
    assert not budget.take(1, 1)  # and once it is spent, nothing more is compared


def test_a_diff_is_worked_out_once_per_revision_pair(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[tuple[Any, ...]] = []
    real = revision_service.structured_diff

    def counted(*args: Any) -> dict[str, Any]:
        made.append(args)
        return real(*args)

    monkeypatch.setattr(revision_service, "structured_diff", counted)
    with (
        server.new_client("producer", "agent-7") as producer,
        server.new_client("reviewer", "editor-1") as editor,
    ):
        task = new_subject_task(producer, SUBJECT | {"body": "line one\nline two"})
        assert revise(producer, task["id"], 1, SUBJECT | {"body": "line one\nline 2"}).is_success
        path = f"/tasks/{task['id']}/diff"
        first = editor.get(path, params={"from": 1, "to": 2})
        second = editor.get(path, params={"from": 1, "to": 2})
        assert len(made) == 1
        backwards = editor.get(path, params={"from": 2, "to": 1})
        assert len(made) == 2  # another pair: worked out for itself
    assert first.status_code == second.status_code == backwards.status_code == 200
    assert first.content == second.content
    assert first.json()["truncated"] is False
    (change,) = first.json()["changed"]
    assert "+line 2" in change["line_diff"]
    assert "+line two" in backwards.json()["changed"][0]["line_diff"]


def test_diffs_keep_no_one_from_signing_in(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Diffs that take all the threads they may use (held here until the end) leave the
    password check of a sign-in threads of its own."""
    _create_user(server, password=PASSWORD)
    release = threading.Event()
    entered: list[int] = []
    real = revision_service.structured_diff

    def held(*args: Any) -> dict[str, Any]:
        entered.append(1)
        release.wait(120)
        return real(*args)

    monkeypatch.setattr(revision_service, "structured_diff", held)
    # More diffs than the event loop's default pool of threads has threads.
    many = min(32, (os.cpu_count() or 1) + 4) + 2
    answers: list[httpx.Response] = []
    with (
        server.new_client("producer", "agent-7") as producer,
        server.new_client("reviewer", "editor-1") as editor,
    ):
        task = new_subject_task(producer, SUBJECT | {"body": "version 1\n"})
        for revision in range(1, many + 1):
            body = SUBJECT | {"body": f"version {revision + 1}\n"}
            assert revise(producer, task["id"], revision, body).is_success
        diffs = [  # each a revision pair of its own: none is shared
            threading.Thread(
                target=lambda to=to: answers.append(
                    editor.get(
                        f"/tasks/{task['id']}/diff", params={"from": 1, "to": to}, timeout=180
                    )
                )
            )
            for to in range(2, many + 2)
        ]
        for thread in diffs:
            thread.start()
        try:
            wait_for(
                lambda: len(entered) >= 2 and len(server.running_requests()) >= many,
                seconds=60,
                what="the diffs to take their threads",
            )
            with _browser(server) as browser:
                signed_in = _sign_in(browser, "ann", PASSWORD)
        finally:
            release.set()
            for thread in diffs:
                thread.join()
    assert signed_in.status_code == 303
    assert [answer.status_code for answer in answers] == [200] * many


def test_a_crafted_diff_answers_too_large_and_the_server_keeps_answering(
    server: LiveServer,
) -> None:
    with server.new_client("producer", "agent-7") as producer:
        task = new_subject_task(producer, SUBJECT | {"body": _crafted(1), "notes": _many_lines(3)})
        changed = revise(
            producer,
            task["id"],
            1,
            SUBJECT | {"body": _crafted(2), "notes": _many_lines(4), "title": "Q3"},
        )
        assert changed.status_code == 200, changed.text
        answers: dict[str, httpx.Response] = {}
        order: list[str] = []

        def fetch(name: str, client: httpx.Client, path: str, **params: int) -> None:
            answers[name] = client.get(path, params=params, timeout=120)
            order.append(name)

        with (
            server.new_client("reviewer", "editor-1") as editor,
            httpx.Client(base_url=server.base_url) as anyone,
        ):
            diffs = [
                threading.Thread(
                    target=fetch,
                    args=(f"diff{n}", editor, f"/tasks/{task['id']}/diff"),
                    kwargs={"from": 1, "to": 2},
                )
                for n in range(3)
            ]
            for thread in diffs:
                thread.start()
            fetch("healthz", anyone, "/healthz")
            for thread in diffs:
                thread.join()
    assert answers["healthz"].status_code == 200
    for n in range(3):
        diff = answers[f"diff{n}"]
        assert diff.status_code == 200, diff.text
        changed_paths = {c["path"]: c for c in diff.json()["changed"]}
        for path in ("/body", "/notes"):
            assert changed_paths[path]["line_diff_too_large"] is True
            assert "line_diff" not in changed_paths[path]
        assert "line_diff" not in changed_paths["/title"]  # short strings: no line diff
        assert diff.json()["truncated"] is True
    assert sorted(order) == ["diff0", "diff1", "diff2", "healthz"]


def test_a_carried_forward_approval_records_the_too_large_marker(server: LiveServer) -> None:
    with (
        server.new_client("producer", "agent-7") as producer,
        server.new_client("reviewer", "editor-1") as editor,
    ):
        task = new_subject_task(
            producer, SUBJECT | {"appendix": _crafted(1)}, material_paths=["/body", "/actions"]
        )
        assert decide(editor, task["id"]).status_code == 200
        moved = revise(producer, task["id"], 1, SUBJECT | {"appendix": _crafted(2)})
        assert moved.json()["approved_revision"] == 2, moved.text
        carried = next(
            e
            for e in producer.get(f"/tasks/{task['id']}/events").json()["items"]
            if e["type"] == "task.approval_carried_forward"
        )
    (change,) = carried["details"]["diff"]["changed"]
    assert (change["path"], change["line_diff_too_large"]) == ("/appendix", True)


def test_the_console_says_the_change_is_too_large_in_a_sentence(server: LiveServer) -> None:
    _create_user(server, password=PASSWORD)
    with server.new_client("producer", "agent-7") as producer:
        task = new_subject_task(producer, SUBJECT | {"body": _crafted(1)})
        with _browser(server) as browser:
            assert _sign_in(browser, "ann", PASSWORD).status_code == 303
            first = browser.get(f"/console/tasks/{task['id']}")
            assert first.status_code == 200
            # The reviewer acts on the page: its script records that revision 1 was seen.
            seen = browser.post(
                f"/console/tasks/{task['id']}/viewed",
                data={"csrf": _csrf(first.text), "revision": "1"},
            )
            assert seen.status_code == 204
            assert revise(producer, task["id"], 1, SUBJECT | {"body": _crafted(2)}).is_success
            page = browser.get(f"/console/tasks/{task['id']}", timeout=120)
    assert page.status_code == 200
    assert "Changes from revision 1 to revision 2" in page.text
    assert SENTENCE in page.text
    assert WHOLE_DIFF_SENTENCE in page.text


def test_the_resume_page_says_the_change_is_too_large_in_a_sentence(
    waiting: LiveServer,  # noqa: F811
    mailbox: Mailbox,  # noqa: F811
) -> None:
    producer = waiting.new_client("producer", "bot")
    alice = person(waiting, "reviewer", "alice", ["reviewers"])
    subject = {"title": "Pay ACME", "terms": _crafted(1), "actions": [{"id": "pay"}]}
    body = escalation(assigned_group="reviewers", policy="three-steps", subject=subject)
    task = producer.escalate(body).json()
    send_mail(waiting)
    (link,) = links_in(mailbox, "alice@example.org")
    assert alice.get(f"/tasks/{task['id']}").status_code == 200  # alice saw revision 1
    assert revise(producer, task["id"], 1, subject | {"terms": _crafted(2)}).is_success
    page = httpx.get(local(waiting, link), timeout=120)
    assert page.status_code == 200
    assert "Changes from revision 1 to revision 2" in page.text
    assert SENTENCE in page.text
    assert WHOLE_DIFF_SENTENCE in page.text
