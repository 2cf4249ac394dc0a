"""The catch-up read after retention: a cursor before events that retention removed is
refused (410 ``ERR_CURSOR_EXPIRED``) with the oldest cursor from which nothing is missing,
instead of silently skipping them (SQLite and PostgreSQL)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from signoff.client import CursorExpired, Signoff
from signoff.domain.clock import ManualClock
from tests.integration.test_catchup import new_task, read, settled
from tests.integration.test_retention import DAY, dispatch_all, sweep
from tests.support import Client, live_server


def task_ids(page: dict[str, Any]) -> list[str]:
    return [event["data"]["id"] for event in page["items"]]


def expired(producer: Client, cursor: str | None) -> str:
    """The ``oldest_cursor`` of a refused read."""
    answer = producer.get("/events", params={"cursor": cursor} if cursor else {})
    assert answer.status_code == 410, answer.text
    problem = answer.json()
    assert problem["error_code"] == "ERR_CURSOR_EXPIRED"
    return str(problem["oldest_cursor"])


def test_a_read_from_before_what_retention_removed_says_so(
    make_settings, clock: ManualClock, tmp_path: Path
) -> None:
    settings = make_settings(run_workers=False, retention_batch_size=2)
    with live_server(settings, clock) as server:
        producer = server.new_client("producer", "away")
        neighbour = server.new_client("producer", "neighbour")
        old = [new_task(producer) for _ in range(3)]
        for task_id in old:  # ended, so nothing more happens to them
            assert producer.post(f"/tasks/{task_id}/cancel").status_code == 200
        settled(producer, None, 6)
        inside = read(producer, limit=1)["next_cursor"]  # after the first old event
        after_old = read(producer)["next_cursor"]  # after the last old event
        dispatch_all(server)  # fanned out (nobody listens): retention may remove them

        clock.advance(8 * DAY)
        recent = [new_task(producer) for _ in range(2)]
        mine = new_task(neighbour)
        settled(producer, after_old, 2)
        assert set(task_ids(read(producer))) == set(old) | set(recent)  # nothing removed yet
        settled(neighbour, None, 1)
        dispatch_all(server)
        sweep(server)
        assert server.count("outbox_events") == 3  # the old ones are gone

        # From the start, and from inside what was removed: refused, never a short page.
        oldest = expired(producer, None)
        assert expired(producer, inside) == oldest
        # From the oldest cursor (and from any cursor at or after it) nothing is missing.
        assert task_ids(read(producer, oldest)) == recent
        assert task_ids(read(producer, after_old)) == recent
        # Another producer lost nothing: it reads from the start as before.
        assert task_ids(read(neighbour)) == [mine]

        assert producer.key is not None
        cursor_file = tmp_path / "agent.cursor"
        cursor_file.write_text(inside + "\n")  # kept from before the removal
        with Signoff(server.base_url, producer.key, backoff=0) as agent:
            with pytest.raises(CursorExpired) as refused:
                agent.events_since(None)
            assert refused.value.oldest_cursor == oldest
            assert [e["data"]["id"] for e in agent.events_since(oldest).events] == recent

        # The example agent, away since before the removal, reconciles from its tasks and
        # reads on from the oldest cursor.
        example = Path(__file__).parents[2] / "examples" / "catch_up.py"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
        env |= {"SIGNOFF_URL": server.base_url, "SIGNOFF_API_KEY": producer.key}
        done = subprocess.run(
            [sys.executable, str(example), "--cursor-file", str(cursor_file)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        lines = done.stdout.splitlines()
        assert {line.split()[1] for line in lines if line.startswith("reconcile")} == {
            *old,
            *recent,
        }
        assert lines[-1] == "caught up: 2 events"
