"""A line diff is bounded: a change too large to show line by line says so at once, in the
API, the console and the resume page, and the server keeps answering everyone else."""

from __future__ import annotations

import difflib
import random
import threading

import httpx

from signoff.domain.revisions import LINE_DIFF_MAX_LINES, unified_line_diff
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
from tests.support import LiveServer, escalation

SENTENCE = "This change is too large to show line by line"


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
        assert unified_line_diff(a, b, seconds=60) == expected
    a, b = _crafted(1, 20_000).splitlines(), _crafted(2, 20_000).splitlines()
    assert unified_line_diff(a, b, seconds=0) is None


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
