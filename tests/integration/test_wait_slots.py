"""One key cannot park more than ``SIGNOFF_MAX_LONG_POLLS_PER_KEY`` long-polls, nor one
console user open more than ``SIGNOFF_MAX_STREAMS_PER_KEY`` event streams: beyond, 429
``ERR_TOO_MANY_WAITS`` with ``Retry-After``; others are not affected, and a slot given
back is free again."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest

from tests.integration.test_console_auth import PASSWORD, _browser, _create_user, _sign_in
from tests.processes import wait_for
from tests.support import LiveServer, escalation, live_server


@pytest.fixture
def capped(make_settings, clock) -> Iterator[LiveServer]:  # type: ignore[no-untyped-def]
    settings = make_settings(max_long_polls_per_key=2, max_streams_per_key=1, run_workers=False)
    with live_server(settings, clock) as live:
        yield live


def _too_many(response: httpx.Response) -> None:
    assert response.status_code == 429, response.text
    assert response.json()["error_code"] == "ERR_TOO_MANY_WAITS"
    assert int(response.headers["Retry-After"]) > 0


def test_long_polls_beyond_the_cap_of_a_key_are_refused(capped: LiveServer) -> None:
    parked = capped.app.state.context.database.changes
    with (
        capped.new_client("producer") as producer,
        capped.new_client("reviewer") as busy,
        capped.new_client("reviewer") as other,
    ):
        task = producer.escalate(escalation()).json()
        path = f"/tasks/{task['id']}"
        answers: list[httpx.Response] = []

        def poll() -> None:
            with capped.client(busy.headers["Authorization"].removeprefix("Bearer ")) as c:
                answers.append(c.get(path, params={"wait": 60}, timeout=90))

        pollers = [threading.Thread(target=poll) for _ in range(2)]
        for poller in pollers:
            poller.start()
        wait_for(lambda: parked.waiting >= 2, seconds=30, what="two parked long-polls")
        _too_many(busy.get(path, params={"wait": 1}))
        assert other.get(path, params={"wait": 0.2}).status_code == 200  # another key
        assert busy.get(path).status_code == 200  # a plain read is not a wait
        assert busy.claim(task["id"]).status_code == 200  # a change answers both
        for poller in pollers:
            poller.join(timeout=60)
        assert [a.status_code for a in answers] == [200, 200]
        assert busy.get(path, params={"wait": 0.2}).status_code == 200  # slots given back


def test_event_streams_beyond_the_cap_of_a_user_are_refused(capped: LiveServer) -> None:
    _create_user(capped, password=PASSWORD)
    _create_user(capped, "bob", password=PASSWORD)
    accept = {"Accept": "text/event-stream"}
    with _browser(capped) as ann, _browser(capped) as bob:
        assert _sign_in(ann, "ann", PASSWORD).status_code == 303
        assert _sign_in(bob, "bob", PASSWORD).status_code == 303
        with ann.stream("GET", "/console/events", headers=accept) as first:
            assert first.status_code == 200
            chunks = first.iter_text()  # kept: dropping it would close the stream
            assert next(chunks).startswith("retry:")
            _too_many(ann.get("/console/events", headers=accept))
            with bob.stream("GET", "/console/events", headers=accept) as bobs:
                assert bobs.status_code == 200  # another user

        # The closed stream's slot comes back once the server sees it gone.
        def reopened() -> bool:
            with ann.stream("GET", "/console/events", headers=accept) as again:
                return again.status_code == 200

        wait_for(reopened, seconds=60, what="the slot of the closed stream")
