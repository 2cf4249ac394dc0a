"""Edits on tasks decided by votes (SQLite and PostgreSQL): an edit is a material change by
the voter — every earlier vote is void and the editor's approval is the first vote on the
new revision — and an edit racing a vote never lets a vote on the old revision count."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from signoff.domain.digests import json_digest
from tests.integration.test_approvals import execute
from tests.integration.test_votes import SUBJECT, ask, cast, events, person, producer
from tests.support import Client, LiveServer

__all__ = ["producer"]  # the fixture, shared with test_votes.py

EDITED = SUBJECT | {"amount": "90 EUR"}


def edit(voter: Client, task: dict[str, Any], revision: int = 1) -> httpx.Response:
    body = {
        "decision": "APPROVED_WITH_EDITS",
        "revision": revision,
        "digest": json_digest(SUBJECT),
        "subject": EDITED,
        "notes": "10 EUR less, as agreed",
    }
    return voter.post(f"/tasks/{task['id']}/votes", json=body)


def test_an_edit_voids_earlier_votes_and_counts_as_the_first_on_the_edit(
    server: LiveServer, producer: Client
) -> None:
    lena, mark = person(server, "lena"), person(server, "mark")
    task = ask(producer, {"approvals": 2}, editable=["/amount"])
    assert cast(lena, task).json()["approval_progress"]["approvals"] == 1
    edited = edit(mark, task)
    assert edited.status_code == 200, edited.text
    view = edited.json()
    assert (view["status"], view["current_revision"], view["digest"]) == (
        "PENDING_REVIEW",
        2,
        json_digest(EDITED),
    )
    assert [(v["voter"], v["decision"], v["revision"]) for v in view["votes"]] == [
        ("mark", "APPROVED", 2)
    ]
    assert view["approval_progress"]["approvals"] == 1
    assert view["vote"]["counted"] is True
    assert events(server, task["id"], "task.votes_voided") == 1
    assert events(server, task["id"], "task.revised") == 1
    assert producer.get(f"/tasks/{task['id']}/revisions/2").json()["created_by"] == "mark"
    # Outside what the producer allowed: refused, nothing written.
    wider = mark.post(
        f"/tasks/{task['id']}/votes",
        json={
            "decision": "APPROVED_WITH_EDITS",
            "revision": 2,
            "digest": json_digest(EDITED),
            "subject": EDITED | {"title": "Pay ACME Ltd"},
        },
    )
    assert (wider.status_code, wider.json()["error_code"]) == (422, "ERR_NOT_EDITABLE")
    # Lena votes again, on the edit: the quorum, and the producer is told it was edited.
    decided = cast(lena, task).json()
    assert (decided["decision"], decided["approved_revision"]) == ("APPROVED_WITH_EDITS", 2)
    assert execute(producer, task["id"], 1, json_digest(SUBJECT)).status_code == 409
    assert execute(producer, task["id"], 2, json_digest(EDITED)).status_code == 200


def test_an_edit_racing_a_vote_never_counts_a_vote_on_the_old_revision(
    server: LiveServer, producer: Client
) -> None:
    lena, mark = person(server, "lena"), person(server, "mark")
    outcomes = set()
    for _ in range(3):
        task = ask(producer, {"approvals": 2}, editable=["/amount"])
        with ThreadPoolExecutor(max_workers=2) as pool:
            edited = pool.submit(edit, mark, task)
            voted = pool.submit(cast_on_revision_1, lena, task)
            edit_answer, vote_answer = edited.result(), voted.result()
        assert edit_answer.status_code == 200, edit_answer.text
        assert vote_answer.status_code in (200, 409), vote_answer.text
        if vote_answer.status_code == 409:
            assert vote_answer.json()["error_code"] == "ERR_STALE_REVISION"
        outcomes.add(vote_answer.status_code)
        after = producer.get(f"/tasks/{task['id']}").json()
        # Whichever came first, only the editor's approval of the edit counts.
        assert (after["status"], after["current_revision"]) == ("PENDING_REVIEW", 2)
        assert [(v["voter"], v["revision"]) for v in after["votes"]] == [("mark", 2)]
        assert after["approval_progress"]["approvals"] == 1
    assert outcomes <= {200, 409}


def cast_on_revision_1(voter: Client, task: dict[str, Any]) -> httpx.Response:
    body = {"decision": "APPROVED", "revision": 1, "digest": json_digest(SUBJECT)}
    return voter.post(f"/tasks/{task['id']}/votes", json=body)
