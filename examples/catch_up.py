"""Reconcile at start: an agent that acts on decisions by webhook first reads what
happened to its tasks while it was away, then goes on with webhooks.

    SIGNOFF_URL=http://127.0.0.1:8000 SIGNOFF_API_KEY=<producer key> \\
        python examples/catch_up.py --cursor-file ./agent.cursor

Each run prints the events since the cursor kept in ``--cursor-file`` (all of them the
first time) and stores the new cursor only after handling them, so an event is handled
again after a crash, never lost. Handle events idempotently by their ``id`` (the same id
a webhook delivery carries in ``webhook-id``). Away longer than events are kept (7 days
after delivery), the cursor has expired: the agent then reconciles from its tasks and
reads on from the oldest cursor the server names.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from signoff.client import CursorExpired, Signoff


def handle(event: dict[str, Any]) -> None:
    """Where an agent resumes its work: here, one line per event."""
    data = event["data"]
    print(event["type"], data["id"], data["status"], data.get("decision") or "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("SIGNOFF_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--key", default=os.environ.get("SIGNOFF_API_KEY"))
    parser.add_argument("--cursor-file", type=Path, default=Path("agent.cursor"))
    args = parser.parse_args()
    if not args.key:
        parser.error("a producer key is needed: --key or SIGNOFF_API_KEY")
    stored = args.cursor_file.read_text().strip() if args.cursor_file.exists() else None
    with Signoff(args.url, args.key) as agent:
        try:
            caught = agent.events_since(stored or None)
        except CursorExpired as expired:
            # Some events were removed unread: look at the tasks themselves, then go on.
            for task in agent.list_tasks():
                print("reconcile", task.id, task.status, task.decision or "")
            caught = agent.events_since(expired.oldest_cursor)
        for event in caught.events:
            handle(event)
    if caught.cursor:
        args.cursor_file.write_text(caught.cursor + "\n")
    print(f"caught up: {len(caught.events)} events")


if __name__ == "__main__":
    main()
