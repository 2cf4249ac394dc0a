"""An editorial agent on LangGraph: a person approves the exact article it publishes.

The graph drafts an article, asks an editor through Signoff (``request_approval``: the
thread waits in an ``interrupt()``, checkpointed in SQLite), refreshes its figures from the
data desk, and publishes through the execution gate. The gate compares the digest of what
is about to be published, computed here, with the approved one: when a figure changed
after the approval the gate refuses, the task goes back to the editor as revision 2, and
only the approved revision 2 is published — exactly once, even when a webhook arrives twice
and when the agent is killed between the gate and reporting the publication.

Run Signoff (private networks allowed: the agent listens on 127.0.0.1) ::

    SIGNOFF_BOOTSTRAP_ADMIN_KEY=local-admin-key-0000 SIGNOFF_WEBHOOK_ALLOW_PRIVATE_NETWORKS=true \\
        SIGNOFF_EXECUTION_LEASE_SECONDS=3 SIGNOFF_WEBHOOK_RETRY_SCHEDULE=0,1,1,2,5,10 \\
        SIGNOFF_DISPATCHER_POLL_SECONDS=0.1 python -m signoff serve --port 8765

then play the whole story (the editor, the agent, its crash and restart) ::

    python examples/langgraph_editorial.py demo --signoff-url http://127.0.0.1:8765 \\
        --admin-key local-admin-key-0000 --workdir /tmp/newsroom

or run only the agent (``agent --help``): with ``--webhook-secret`` it resumes from
Signoff's webhooks, without it by long-polling (no public address needed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict

import httpx
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from signoff.client import ApprovalNotValid, DecisionTimeout, Signoff, digest
from signoff.integrations.langgraph import (
    SqliteSeen,
    WebhookReceiver,
    continue_interrupted,
    pending_approval,
    request_approval,
    resume_when_decided,
    thread_config,
)

CRASH_ENV = "EDITORIAL_CRASH_AFTER_PUBLISH"  # the demo kills the first agent there


# --- the newsroom: a publication list that publishes each operation once -------------------
class Newsroom:
    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS publications (operation_id TEXT PRIMARY KEY, "
            "title TEXT, body TEXT, revision INTEGER, published_at TEXT)"
        )
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS publish_calls (operation_id TEXT, outcome TEXT, at TEXT)"
        )

    def publish(self, operation_id: str, article: dict[str, Any], revision: int | None) -> bool:
        """The side effect, idempotent by the execution's operation id."""
        new = self.db.execute(
            "INSERT OR IGNORE INTO publications VALUES (?, ?, ?, ?, ?)",
            (operation_id, article["title"], article["body"], revision, _now()),
        ).rowcount
        outcome = "published" if new else "already published"
        self.db.execute(
            "INSERT INTO publish_calls VALUES (?, ?, ?)", (operation_id, outcome, _now())
        )
        return bool(new)


def _now() -> str:
    return datetime.now(UTC).isoformat()


def say(*parts: Any) -> None:
    print(*parts, flush=True)


# --- the graph -------------------------------------------------------------------------------
class State(TypedDict, total=False):
    slug: str
    article: dict[str, Any]
    figures_refreshed: bool
    task_id: str
    outcome: str


def article_text(inflation: str) -> dict[str, Any]:
    return {
        "title": "Central bank holds rates as inflation cools",
        "body": f"Inflation stood at {inflation} in November; the bank held its rate at 3.25%.",
        "figures": {"inflation": inflation, "policy_rate": "3.25%"},
        "actions": [{"id": "publish"}],
    }


def build_graph(client: Signoff, newsroom: Newsroom, checkpointer: SqliteSaver) -> Any:
    def draft(state: State) -> State:
        return {"article": article_text("2.1%"), "figures_refreshed": False}

    def review(state: State) -> Command[Any]:
        # Signoff glue: escalate once per thread and node, wait in interrupt(), re-check.
        task = request_approval(
            client,
            subject=state["article"],
            entity=("article", state["slug"]),
            reason="EDITORIAL_REVIEW",
            attempted=[
                {
                    "action": "fact_check",
                    "executed_at": "2026-11-30T09:00:00Z",
                    "result": "figures match the data desk",
                },
            ],
            verdict={"confidence_score": 0.62, "threshold": 0.9},
        )
        say(f"agent: task {task.id} revision {task.current_revision} decided {task.decision}")
        update: State = {"task_id": task.id}
        if task.decision == "APPROVED":
            return Command(goto="refresh_figures", update=update)
        return Command(goto=END, update=update | {"outcome": f"not published ({task.decision})"})

    def refresh_figures(state: State) -> State:
        if state.get("figures_refreshed"):
            return {}
        say("agent: the data desk revised November's inflation from 2.1% to 2.3%")
        return {"article": article_text("2.3%"), "figures_refreshed": True}

    def publish(state: State) -> Command[Any]:
        article, task_id = state["article"], state["task_id"]
        # Signoff glue: the gate checks the digest of *this* article; one operation id per
        # version, used as the side effect's idempotency key.
        operation_id = f"publish-{task_id}-{digest(article)[:16]}"
        try:
            with client.execution(task_id, subject=article, operation_id=operation_id) as run:
                for action in run.pending:
                    new = newsroom.publish(operation_id, article, run.revision)
                    say(f"agent: {'published' if new else 'already published'} {operation_id}")
                    if os.environ.get(CRASH_ENV):
                        say("agent: killed between the gate and reporting the publication")
                        os.kill(os.getpid(), signal.SIGKILL)
                    run.complete(action, {"operation_id": operation_id})
        except ApprovalNotValid as refused:
            say(f"agent: the gate refused: {refused.reason}; back to the editor")
            return Command(goto="review", update={"outcome": f"refused {refused.reason}"})
        return Command(goto=END, update={"outcome": "published"})

    graph = StateGraph(State)
    graph.add_node("draft", draft)
    graph.add_node("review", review, destinations=("refresh_figures", END))
    graph.add_node("refresh_figures", refresh_figures)
    graph.add_node("publish", publish, destinations=("review", END))
    graph.add_edge(START, "draft")
    graph.add_edge("draft", "review")
    graph.add_edge("refresh_figures", "publish")
    return graph.compile(checkpointer=checkpointer)


# --- the agent process -----------------------------------------------------------------------
def run_agent(args: argparse.Namespace) -> None:
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    client = Signoff(args.signoff_url, args.api_key)
    newsroom = Newsroom(workdir / "newsroom.db")
    checkpointer = SqliteSaver(sqlite3.connect(workdir / "checkpoints.db", check_same_thread=False))
    graph = build_graph(client, newsroom, checkpointer)
    config = thread_config(f"article-{args.slug}")

    if args.webhook_secret:  # Signoff glue: resume from verified, de-duplicated webhooks
        import uvicorn

        receiver = WebhookReceiver(
            graph,
            secrets=[args.webhook_secret],
            seen=SqliteSeen(str(workdir / "webhooks.db")),
            on_outcome=lambda event, outcome: say(
                f"agent: webhook {event.webhook_id} {event.type} v{event.task.version}: {outcome}"
            ),
        )
        server = uvicorn.Server(
            uvicorn.Config(receiver, host="127.0.0.1", port=args.port, log_level="warning")
        )
        threading.Thread(target=server.run, daemon=True).start()
        while not server.started:
            time.sleep(0.05)
        say(f"agent: listening on http://127.0.0.1:{args.port}/")

    if not graph.get_state(config).values:
        graph.invoke({"slug": args.slug}, config)
    else:  # Signoff glue: after a restart, finish what the dead process left
        say("agent: restarted; continuing the thread from its checkpoint")
        continue_interrupted(graph, config)
        with contextlib.suppress(DecisionTimeout):  # decided while we were down?
            resume_when_decided(graph, config, client, timeout=0)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while not stop.is_set():
        if not args.webhook_secret and pending_approval(graph, config):
            try:  # Signoff glue: the long-poll alternative
                resume_when_decided(graph, config, client, timeout=60)
            except DecisionTimeout:
                continue
        elif not args.webhook_secret and not graph.get_state(config).next:
            break
        else:
            stop.wait(0.2)
    say(f"agent: thread state: {graph.get_state(config).values.get('outcome')}")


# --- the demo: an editor, the agent, a crash, a restart, a duplicate -------------------------
def wait_until(check: Callable[[], Any], seconds: float, what: str) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up after {seconds} s waiting for {what}")
        time.sleep(0.1)


def run_demo(args: argparse.Namespace) -> None:
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    admin = httpx.Client(
        base_url=args.signoff_url, headers={"Authorization": f"Bearer {args.admin_key}"}
    )

    def key(role: str, principal: str) -> str:
        response = admin.post("/api-keys", json={"role": role, "principal_id": principal})
        response.raise_for_status()
        return str(response.json()["key"])

    run_id = uuid.uuid4().hex[:6]
    slug = f"rates-{run_id}"
    agent_key = key("producer", f"editorial-agent-{run_id}")
    editor = Signoff(args.signoff_url, key("reviewer", f"editor-{run_id}"))
    port = args.agent_port or _free_port()
    endpoint = admin.post(
        "/webhook-endpoints",
        json={
            "url": f"http://127.0.0.1:{port}/",
            "event_types": ["task.resolved", "task.expired", "task.cancelled"],
            "entity_types": ["article"],
            "description": "editorial agent (LangGraph)",
        },
    )
    endpoint.raise_for_status()
    endpoint_id, secret = endpoint.json()["id"], endpoint.json()["secret"]

    def start_agent(*, crash: bool) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
        if crash:
            env[CRASH_ENV] = "1"
        command = [sys.executable, __file__, "agent", "--signoff-url", args.signoff_url,
                   "--api-key", agent_key, "--webhook-secret", secret, "--port", str(port),
                   "--workdir", str(workdir), "--slug", slug]  # fmt: skip
        return subprocess.Popen(command, env=env)

    def task_of_article() -> Any:
        return next(iter(editor.list_tasks(entity_type="article", entity_id=slug)), None)

    def approve(revision: int) -> None:
        task = wait_until(
            lambda: (
                (t := task_of_article()) and t.is_active and t.current_revision == revision and t
            ),
            args.wait_seconds,
            f"revision {revision} to review",
        )
        claimed = editor.claim(task.id)
        editor.resolve(claimed, decision="APPROVED", notes=f"revision {revision} reads well")
        say(f"editor: approved revision {revision} of task {task.id} ({claimed.digest})")

    agent = start_agent(crash=True)
    try:
        approve(1)
        approve(2)  # after the gate refused the refreshed article
        agent.wait(timeout=args.wait_seconds)
        say(f"demo: the agent exited with {agent.returncode} (killed after publishing)")
        agent = start_agent(crash=False)
        task = wait_until(
            lambda: (t := task_of_article()) and t.execution_status == "COMPLETED" and t,
            args.wait_seconds,
            "the publication to be reported",
        )

        # Deliveries are at least once: have Signoff send the approval of revision 2 again,
        # once its first delivery is recorded (the agent reports the publication before
        # it answers the webhook, so the attempt may still be in flight; Signoff refuses
        # to redeliver an attempt in flight).
        def delivered_approval() -> Any:
            deliveries = admin.get(f"/tasks/{task.id}/deliveries").json()["items"]
            latest = max(
                (d for d in deliveries if d["event_type"] == "task.resolved"
                 and d["endpoint_id"] == endpoint_id),
                key=lambda d: d["created_at"],
            )  # fmt: skip
            return latest if latest["status"] == "SUCCEEDED" else None

        approval = wait_until(delivered_approval, args.wait_seconds, "the approval's delivery")
        seen = sqlite3.connect(workdir / "webhooks.db")

        def times_delivered() -> int:
            row = seen.execute(
                "SELECT deliveries FROM signoff_webhook_ids WHERE webhook_id = ?",
                (approval["event_id"],),
            ).fetchone()
            return int(row[0]) if row else 0

        before = times_delivered()
        admin.post(f"/deliveries/{approval['id']}/redeliver").raise_for_status()
        wait_until(lambda: times_delivered() > before, args.wait_seconds, "the redelivery")
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30)

        newsroom = sqlite3.connect(workdir / "newsroom.db")
        published = newsroom.execute("SELECT operation_id, revision FROM publications").fetchall()
        calls = [o for (o,) in newsroom.execute("SELECT outcome FROM publish_calls ORDER BY at")]
        events = [e.type for e in editor.task_events(task.id)]
        refusals = [
            e.details.get("reason")
            for e in editor.task_events(task.id)
            if e.type == "task.execution_refused"
        ]
        say(f"summary: task {task.id} {task.status}/{task.decision} revision "
            f"{task.current_revision}, execution {task.execution_status}")  # fmt: skip
        say(f"summary: gate refusals: {refusals}")
        say(f"summary: publications: {json.dumps(published)}")
        say(f"summary: publish calls: {calls}")
        say(f"summary: the approval of revision 2 ({approval['event_id']}) arrived "
            f"{times_delivered()} times")  # fmt: skip
        say(f"summary: audit trail: {', '.join(events)}")
    finally:
        if agent.poll() is None:  # the demo failed: do not leave the agent running
            agent.kill()
            agent.wait(timeout=30)
        admin.delete(f"/webhook-endpoints/{endpoint_id}")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="play the whole story once")
    demo.add_argument("--admin-key", default=os.environ.get("SIGNOFF_ADMIN_KEY"), required=False)
    demo.add_argument("--agent-port", type=int, default=0)
    demo.add_argument("--wait-seconds", type=float, default=60)
    agent = commands.add_parser("agent", help="run the agent (resumes after a crash)")
    agent.add_argument("--api-key", default=os.environ.get("SIGNOFF_API_KEY"))
    agent.add_argument("--webhook-secret", help="resume from webhooks (else: long-poll)")
    agent.add_argument("--port", type=int, default=8100)
    agent.add_argument("--slug", default="rates")
    for sub in (demo, agent):
        sub.add_argument(
            "--signoff-url", default=os.environ.get("SIGNOFF_URL", "http://127.0.0.1:8000")
        )
        sub.add_argument("--workdir", default="newsroom")
    args = parser.parse_args()
    if args.command == "demo":
        if not args.admin_key:
            parser.error("--admin-key (or SIGNOFF_ADMIN_KEY) is required")
        run_demo(args)
    else:
        if not args.api_key:
            parser.error("--api-key (or SIGNOFF_API_KEY) is required")
        run_agent(args)


if __name__ == "__main__":
    main()
