"""What every fault trial shares: the service's environment, a load of producers and
reviewers that keeps a ledger of what the service acknowledged, and the final audit that
compares the ledger, the database and what a real HTTP receiver got.

The audit's promises (docs/operations.md):

- no acknowledged write lost: every escalation answered 2xx is a task, every resolution
  answered 2xx is that task's decision;
- nothing duplicated: one task per idempotency key, one audit event per task version and
  type, one outbox event per published audit event, one delivery per event and endpoint;
- every audited change delivered: each published audit event reached the receiver
  (at least once, same ``webhook-id`` when repeated), in per-task order — the first
  arrivals of a task's events come in version order.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from sqlalchemy import select

from signoff.domain.states import TRANSITIONS
from signoff.settings import Settings
from signoff.store.runtime.database import Database, create_engine
from signoff.store.tables import metadata
from tests.conftest import TEST_ENCRYPTION_KEY
from tests.processes import wait_for
from tests.receiver import Receiver
from tests.support import ADMIN_KEY, escalation, example_resolve

PUBLISHED = {t.event_type for t in TRANSITIONS.values() if t.publish}
#: Definitive answers end a retry loop; anything else (no answer, 503) is retried with
#: the same body, as a producer would.
RETRYABLE = {502, 503, 504}


def service_env(database_url: str, **extra: str) -> dict[str, str]:
    """A fast-moving service: short polls, short attempt leases (so a killed dispatcher's
    attempt is made again within seconds), quick retries."""
    return {
        "SIGNOFF_DATABASE_URL": database_url,
        "SIGNOFF_BOOTSTRAP_ADMIN_KEY": ADMIN_KEY,
        # Every process must read the same webhook secrets.
        "SIGNOFF_ENCRYPTION_KEYS": TEST_ENCRYPTION_KEY,
        "SIGNOFF_WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
        "SIGNOFF_DISPATCHER_POLL_SECONDS": "0.2",
        "SIGNOFF_WEBHOOK_ATTEMPT_LEASE_SECONDS": "3",
        "SIGNOFF_WEBHOOK_TIMEOUT_SECONDS": "2",
        "SIGNOFF_WEBHOOK_RETRY_SCHEDULE": "0,1,1,1,1,1,1,1,1,1,1,1",
        "SIGNOFF_WEBHOOK_RETRY_JITTER": "0",
        "SIGNOFF_LOG_LEVEL": "info",
        **extra,
    }


def setup_service(base_url: str, receiver: Receiver) -> dict[str, str]:
    """Register the receiver for every event; make one producer and two reviewer keys.
    Returns ``{principal_id: key}``."""
    keys = {}
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as a:
        created = a.post("/webhook-endpoints", json={"url": receiver.url})
        assert created.status_code == 201, created.text
        for role, principal in (("producer", "bot"), ("reviewer", "ann"), ("reviewer", "bob")):
            response = a.post("/api-keys", json={"role": role, "principal_id": principal})
            assert response.status_code == 201, response.text
            keys[principal] = response.json()["key"]
    return keys


def answer_name(response: httpx.Response) -> str:
    """The status, or for a server error that is not a 503 problem document with
    ``Retry-After`` (what every database failure must answer) the status and its shape."""
    status = response.status_code
    if status < 500:
        return str(status)
    problem = response.headers.get("content-type", "").startswith("application/problem+json")
    if status == 503 and problem and "retry-after" in response.headers:
        return "503"
    return f"{status} {response.headers.get('content-type')}: {response.text[:200]}"


@dataclass
class Ledger:
    """What the service acknowledged (2xx), and every answer seen."""

    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    resolutions: dict[str, str] = field(default_factory=dict)
    answers: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def saw(self, answer: str) -> None:
        with self.lock:
            self.answers[answer] += 1


class Load:
    """Producers escalating and reviewers claiming and resolving, in threads, until
    :meth:`stop`. Each request is retried with the same body while the answer is not
    definitive (connection refused or reset while a process restarts, 503 during an
    outage)."""

    def __init__(self, base_url: str, keys: dict[str, str], *, producers: int = 2) -> None:
        self.base_url = base_url
        self.keys = keys
        self.ledger = Ledger()
        self._stop = threading.Event()
        self._failures: list[BaseException] = []
        self._threads = [
            threading.Thread(target=self._guarded, args=(self._produce,), daemon=True)
            for _ in range(producers)
        ] + [
            threading.Thread(target=self._guarded, args=(self._review, principal), daemon=True)
            for principal in keys
            if principal != "bot"
        ]

    def _guarded(self, target: Any, *args: Any) -> None:
        try:
            target(*args)
        except BaseException as exc:  # surfaced by check(), in the test's thread
            self._failures.append(exc)
            self._stop.set()

    def check(self) -> None:
        """Re-raise what failed in a load thread (an unexpected answer)."""
        if self._failures:
            raise self._failures[0]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)
            assert not thread.is_alive(), "a load thread did not stop"
        self.check()

    def acknowledged(self) -> int:
        self.check()
        return len(self.ledger.tasks)

    def _client(self, principal: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {self.keys[principal]}"},
            timeout=httpx.Timeout(30, connect=2),
        )

    def _send(self, client: httpx.Client, method: str, path: str, **kwargs: Any) -> Any:
        """The first definitive answer, or None when the load stopped first."""
        for _ in range(2000):  # bounded: ~2 minutes of refusals
            try:
                response = client.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                self.ledger.saw(type(exc).__name__)
            else:
                self.ledger.saw(answer_name(response))
                if response.status_code not in RETRYABLE:
                    return response
            if self._stop.is_set():
                return None
            time.sleep(0.05)  # pacing between retries, not a clock
        raise AssertionError(f"{method} {path}: no definitive answer")

    def _produce(self) -> None:
        with self._client("bot") as client:
            while not self._stop.is_set():
                body = escalation()
                response = self._send(client, "POST", "/tasks/escalate", json=body)
                if response is None:
                    return
                assert response.status_code in (200, 201), response.text
                with self.ledger.lock:
                    self.ledger.tasks[response.json()["id"]] = body

    def _review(self, principal: str) -> None:
        with self._client(principal) as client:
            while not self._stop.is_set():
                claimed = self._send(client, "POST", "/tasks/claim-next")
                if claimed is None:
                    return
                if claimed.status_code == 204:
                    time.sleep(0.02)
                    continue
                assert claimed.status_code == 200, claimed.text
                task = claimed.json()
                body = example_resolve() | {"operator_id": principal}
                resolved = self._send(
                    client,
                    "POST",
                    f"/tasks/{task['id']}/resolve",
                    json=body,
                    headers={"X-Lease-Token": task["lease_token"]},
                )
                if resolved is not None and resolved.status_code == 200:
                    with self.ledger.lock:
                        self.ledger.resolutions[task["id"]] = body["decision"]


@contextmanager
def running_load(base_url: str, keys: dict[str, str]) -> Iterator[Load]:
    load = Load(base_url, keys)
    with load:
        yield load


async def _read(database_url: str) -> dict[str, list[dict[str, Any]]]:
    database = Database(create_engine(Settings(database_url=database_url)))
    try:
        async with database.transaction(write=False) as uow:
            tables = {}
            for name in ("review_tasks", "task_events", "outbox_events", "webhook_deliveries"):
                result = await uow.connection.execute(select(metadata.tables[name]))
                tables[name] = [dict(row._mapping) for row in result]
            return tables
    finally:
        await database.dispose()


def read_database(database_url: str) -> dict[str, list[dict[str, Any]]]:
    return asyncio.run(_read(database_url))


def settled(database_url: str) -> bool:
    """Every event fanned out and every delivery finished."""
    tables = read_database(database_url)
    return all(e["fanned_out_at"] is not None for e in tables["outbox_events"]) and all(
        d["status"] != "PENDING" for d in tables["webhook_deliveries"]
    )


def audit(database_url: str, ledger: Ledger, receiver: Receiver) -> dict[str, int]:
    """Wait until the service has delivered everything, then check every promise.
    Returns a few counts for the test to print."""
    wait_for(lambda: settled(database_url), seconds=90, what="every delivery to finish")
    tables = read_database(database_url)
    tasks = {str(t["id"]): t for t in tables["review_tasks"]}

    # Unavailable is the only server error a client may see.
    failures = {a for a in ledger.answers if a.startswith("5") and a != "503"}
    assert not failures, f"server errors: {failures}"

    # No acknowledged write lost.
    for task_id, body in ledger.tasks.items():
        assert task_id in tasks, f"acknowledged escalation {task_id} is missing"
        assert tasks[task_id]["idempotency_key"] == body["idempotency_key"]
        assert tasks[task_id]["entity_id"] == body["entity_id"]
    for task_id, decision in ledger.resolutions.items():
        assert tasks[task_id]["status"] == "RESOLVED", task_id
        assert tasks[task_id]["decision"] == decision, task_id

    # Nothing duplicated.
    keys = Counter((t["producer_id"], t["idempotency_key"]) for t in tasks.values())
    assert max(keys.values(), default=1) == 1, "one idempotency key made two tasks"
    audited = Counter(
        (str(e["task_id"]), e["version"], e["event_type"]) for e in tables["task_events"]
    )
    assert max(audited.values(), default=1) == 1, "an audit event was written twice"
    published = {key for key in audited if key[2] in PUBLISHED}
    outbox = Counter(
        (str(e["task_id"]), e["task_version"], e["event_type"]) for e in tables["outbox_events"]
    )
    assert max(outbox.values(), default=1) == 1, "an outbox event was written twice"
    assert set(outbox) == published, "audit trail and outbox disagree"
    per_event = Counter(str(d["event_id"]) for d in tables["webhook_deliveries"])
    assert max(per_event.values(), default=1) == 1, "an event was fanned out twice"

    # Every audited change delivered, in per-task order.
    events = {str(e["id"]): e for e in tables["outbox_events"]}
    assert {str(d["event_id"]) for d in tables["webhook_deliveries"]} == set(events)
    assert {d["status"] for d in tables["webhook_deliveries"]} <= {"SUCCEEDED"}
    received_ids = [r.headers["webhook-id"] for r in receiver.received]
    assert set(received_ids) == set(events), "the receiver did not get every event"
    # Order is judged on each event's first arrival: a repeat (same webhook-id, which
    # receivers deduplicate on) may come later, e.g. an attempt given up on timeout whose
    # request the receiver still read after the next attempt had succeeded.
    arrivals: dict[str, list[int]] = defaultdict(list)
    seen: set[str] = set()
    for received in receiver.received:
        envelope = json.loads(received.body)
        event = events[envelope["id"]]
        assert envelope["type"] == event["event_type"]
        if envelope["id"] not in seen:
            seen.add(envelope["id"])
            arrivals[envelope["data"]["id"]].append(event["task_version"])
    for task_id, versions in arrivals.items():
        assert versions == sorted(versions), f"task {task_id}'s events arrived as {versions}"
    return {
        "acknowledged_tasks": len(ledger.tasks),
        "acknowledged_resolutions": len(ledger.resolutions),
        "events": len(events),
        "received": len(received_ids),
        "repeated": len(received_ids) - len(set(received_ids)),
    }


def fresh_id() -> str:
    return uuid.uuid4().hex[:12]
