"""Tasks awaiting a person's vote (``GET /tasks?awaiting_my_vote=true``), on both engines:
the filter lists exactly the tasks on which a vote by that person would be accepted now."""

from __future__ import annotations

import copy
import re
from typing import Any

import httpx
import pytest

from signoff.client import Signoff
from tests.support import Client, LiveServer, escalation

SUBJECT: dict[str, Any] = {"title": "Pay ACME", "amount": "100 EUR", "actions": [{"id": "pay"}]}

PEOPLE = {
    "lena": ["legal"],
    "fiona": ["finance"],
    "bo": ["legal", "finance"],
    "oscar": ["marketing"],
    "rita": ["finance"],
}
PASSWORD = "correct horse battery staple"


@pytest.fixture
def people(server: LiveServer) -> dict[str, Client]:
    keys = {}
    with server.admin() as admin:
        for who, groups in PEOPLE.items():
            made = admin.post(
                "/api-keys", json={"role": "reviewer", "principal_id": who, "groups": groups}
            )
            assert made.status_code == 201, made.text
            keys[who] = server.client(made.json()["key"], who)
    return keys


@pytest.fixture
def producer(server: LiveServer):  # type: ignore[no-untyped-def]
    with server.new_client("producer", "bot") as client:
        yield client


def ask(producer: Client, rule: Any = None, **extra: Any) -> str:
    fields = {"approval_rule": rule} if rule is not None else {}
    body = escalation(subject=copy.deepcopy(SUBJECT), **fields, **extra)
    made = producer.escalate(body)
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def vote(voter: Client, task_id: str, **extra: Any) -> dict[str, Any]:
    current = voter.get(f"/tasks/{task_id}").json()
    body = {
        "decision": "APPROVED",
        "revision": current["current_revision"],
        "digest": current["digest"],
        **extra,
    }
    answer = voter.post(f"/tasks/{task_id}/votes", json=body)
    return {**answer.json(), "http": answer.status_code}


def scenario(producer: Client, people: dict[str, Client]) -> list[str]:
    """Tasks with different rules and votes so far (and one decided by one person)."""
    grouped = ask(producer, {"groups": {"legal": 1, "finance": 1}})
    legal_in = ask(producer, {"groups": {"legal": 1, "finance": 1}})
    assert vote(people["lena"], legal_in)["http"] == 200
    plain = ask(producer, {"approvals": 2, "exclude": ["requester"]}, requested_by="rita")
    staged = ask(
        producer,
        {
            "stages": [
                {"name": "finance", "groups": {"finance": 1}},
                {"name": "legal", "groups": {"legal": 1}},
            ],
            "exclude": ["earlier_stages"],
        },
    )
    assert vote(people["bo"], staged)["http"] == 200  # finance met: legal's stage now
    finance_only = ask(producer, {"groups": {"finance": 1}})
    single = ask(producer)
    return [grouped, legal_in, plain, staged, finance_only, single]


def awaiting(client: Client, limit: int = 50) -> list[str]:
    """Every page of the filter, followed by its cursors."""
    found: list[str] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"awaiting_my_vote": "true", "limit": limit}
        if cursor:
            params["cursor"] = cursor
        page = client.get("/tasks", params=params)
        assert page.status_code == 200, page.text
        found += [item["id"] for item in page.json()["items"]]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            return found


@pytest.mark.parametrize("who", sorted(PEOPLE))
def test_the_filter_lists_what_a_vote_would_be_accepted_on(
    server: LiveServer, people: dict[str, Client], producer: Client, who: str
) -> None:
    tasks = scenario(producer, people)
    person = people[who]
    listed = [task for task in awaiting(person) if task in tasks]
    # A page at a time gives the same tasks in the same order.
    assert [task for task in awaiting(person, limit=1) if task in tasks] == listed
    # What voting accepts: each task of the scenario, voted on by this person.
    accepted = [
        task
        for task in tasks
        if (answer := vote(person, task))["http"] == 200 and answer["vote"]["recorded"]
    ]
    assert sorted(listed) == sorted(accepted)
    assert tasks[-1] not in listed  # decided by one person: never awaits a vote


def test_what_each_person_awaits(
    server: LiveServer, people: dict[str, Client], producer: Client
) -> None:
    grouped, legal_in, plain, staged, finance_only, _single = scenario(producer, people)
    mine = {who: set(awaiting(client)) for who, client in people.items()}
    assert mine["lena"] == {grouped, plain, staged}
    assert mine["fiona"] == {grouped, legal_in, plain, finance_only}
    # bo voted at the staged rule's first stage, and it wants other eyes at the second.
    assert mine["bo"] == {grouped, legal_in, plain, finance_only}
    assert mine["oscar"] == {plain}
    assert mine["rita"] == {grouped, legal_in, finance_only}  # she requested ``plain``
    # The producer votes on nothing; a vote takes the task out of the voter's list.
    assert awaiting(producer) == []
    assert vote(people["fiona"], grouped)["http"] == 200
    assert grouped not in awaiting(people["fiona"])
    assert grouped in awaiting(people["lena"])


def test_the_filter_is_read_strictly(server: LiveServer, people: dict[str, Client]) -> None:
    refused = people["lena"].get("/tasks", params={"awaiting_my_vote": "maybe"})
    assert refused.status_code == 422
    assert refused.json()["error_code"] == "ERR_VALIDATION"


def test_the_sdk_lists_the_same(
    server: LiveServer, people: dict[str, Client], producer: Client
) -> None:
    scenario(producer, people)
    with Signoff(server.base_url, str(people["lena"].key), backoff=0) as lena:
        listed = [str(task.id) for task in lena.list_tasks(awaiting_my_vote=True, page_size=2)]
    assert listed == awaiting(people["lena"])
    assert len(listed) == 3


def console_view(server: LiveServer, who: str) -> tuple[int, list[str]]:
    """The "Awaiting my vote" tab's count and rows, for ``who`` signed in to the console."""
    with server.admin() as admin:
        made = admin.post(
            "/users",
            json={
                "principal_id": who,
                "role": "reviewer",
                "groups": PEOPLE[who],
                "password": PASSWORD,
            },
        )
    assert made.status_code == 201, made.text
    with httpx.Client(base_url=server.base_url, timeout=30) as browser:
        form = browser.get("/console/login").text
        csrf = re.search(r'name="csrf" value="([^"]+)"', form)
        assert csrf, form[:500]
        signed = browser.post(
            "/console/login",
            data={"username": who, "password": PASSWORD, "csrf": csrf.group(1)},
        )
        assert signed.status_code in (200, 302, 303), signed.text
        page = browser.get("/console", params={"view": "votes"})
    assert page.status_code == 200, page.text
    count = re.search(r'Awaiting my vote <span class="count">\((\d+)\)</span>', page.text)
    assert count, page.text[:2000]
    return int(count.group(1)), re.findall(r'<tr[^>]*data-task-id="([^"]+)"', page.text)


def test_the_console_view_and_its_count_match_the_filter(
    server: LiveServer, people: dict[str, Client], producer: Client
) -> None:
    scenario(producer, people)
    for who in ("lena", "oscar", "rita"):
        listed = awaiting(people[who])
        count, rows = console_view(server, who)
        assert (count, rows) == (len(listed), listed), who
