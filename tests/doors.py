"""Every door a decision can come through, on one live deployment, and what it leaves.

A :class:`Deployment` is a live Signoff server (SQLite or PostgreSQL) with a real SMTP
server for its resume links, the people who act on it (API keys and console users), and
the tokens each of them holds. It speaks of tasks by *handle* (a name the test chooses),
so one sequence of steps can be played against several deployments and their answers
and stored state compared after each step.

What a door legitimately adds of its own is named in :func:`door_neutral`, and only
there.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import urlencode

import httpx
from sqlalchemy import select

from signoff.domain.clock import ManualClock
from signoff.domain.digests import canonical_json
from signoff.services.context import ServiceContext
from signoff.settings import Settings
from signoff.store.runtime.database import Database, create_engine
from signoff.store.tables import outbox_events, review_tasks, task_events
from signoff.workers.notifier import Notifier
from tests.mailbox import Mailbox
from tests.support import Client, LiveServer, escalation, live_server

T = TypeVar("T")

PUBLIC = "http://signoff.test"
PASSWORD = "correct horse battery staple"
GROUP = "reviewers"
OTHER_GROUP = "auditors"
SUBJECT: dict[str, Any] = {"title": "Pay ACME", "amount": "100 EUR", "actions": [{"id": "pay"}]}
NOTES_LIMIT = 10_000

#: Who acts. The producer's principal ``bot`` also holds a reviewer key and a console
#: account: whatever it uses, it may decide nothing on a task it escalated.
REVIEWERS = ("alice", "sam", "bot")
ROLES = {"alice": "reviewer", "sam": "supervisor", "bot": "reviewer"}
GROUPS = {"alice": [GROUP], "sam": [GROUP, OTHER_GROUP], "bot": [GROUP]}
EMAILS = {"alice": "alice@example.org", "sam": "sam@example.org"}


def deployment_settings(database_url: str, mailbox: Mailbox, **overrides: Any) -> Settings:
    from tests.conftest import TEST_ENCRYPTION_KEY
    from tests.support import ADMIN_KEY

    values: dict[str, Any] = {
        "database_url": database_url,
        "bootstrap_admin_key": ADMIN_KEY,
        "encryption_keys": TEST_ENCRYPTION_KEY,
        # No background workers: mail goes out and nothing sweeps unless a step says so,
        # at the same instant of the shared clock on every deployment.
        "run_workers": False,
        "smtp_host": "127.0.0.1",
        "smtp_port": mailbox.port,
        "public_base_url": PUBLIC,
        "secret_key": "differential-secret-key-for-forms",
        # Sign-ins outlive any sequence's moves of the clock: a console door must never
        # turn into the sign-in page halfway through.
        "session_idle_seconds": 10**8,
        "session_max_seconds": 10**8,
        # Refused decisions leave their claims live; a sequence must never meet the cap
        # on one door and not on its twin's.
        "max_leases_per_principal": 1000,
    }
    values.update(overrides)
    return Settings(**values)


@dataclass(frozen=True)
class Answer:
    """An HTTP answer reduced to what must agree: status, error code, and the body with
    the deployment's own ids and tokens replaced by labels."""

    status: int
    error_code: str | None
    body: Any

    @property
    def refused(self) -> bool:
        return self.status >= 400


@dataclass
class Snapshot:
    """A task's stored state: its row, its audit trail and its outbox events (each read
    back from its canonical JSON text, so two events are equal exactly when their texts
    are)."""

    row: dict[str, Any]
    trail: list[dict[str, Any]]
    outbox: list[dict[str, Any]]


@dataclass
class Deployment:
    """One live server and everything the test holds against it."""

    name: str
    server: LiveServer
    mailbox: Mailbox
    producer: Client = field(init=False)
    api: dict[str, Client] = field(default_factory=dict)
    console: dict[str, httpx.Client] = field(default_factory=dict)
    console_csrf: dict[str, str] = field(default_factory=dict)
    task_ids: dict[str, str] = field(default_factory=dict)
    entities: dict[str, str] = field(default_factory=dict)
    idempotency_keys: dict[str, str] = field(default_factory=dict)
    leases: dict[tuple[str, str], str] = field(default_factory=dict)
    execution: dict[str, str] = field(default_factory=dict)
    links: dict[tuple[str, str], str] = field(default_factory=dict)
    operation_ids: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    # The test's own reads and mail runs: one event loop and one engine for the
    # deployment's life (an engine built and disposed per snapshot was most of a step).
    _runner: asyncio.Runner | None = field(default=None, init=False, repr=False)
    _database: Database | None = field(default=None, init=False, repr=False)

    # Setting up --------------------------------------------------------------------------

    def populate(self) -> None:
        with self.server.admin() as admin:
            made = admin.post("/api-keys", json={"role": "producer", "principal_id": "bot"})
            assert made.status_code == 201, made.text
            self.producer = self.server.client(made.json()["key"], "bot")
            self.labels[made.json()["id"]] = "key:bot/producer"
            for who in REVIEWERS:
                body: dict[str, Any] = {
                    "role": ROLES[who],
                    "principal_id": who,
                    "groups": GROUPS[who],
                }
                if who in EMAILS:
                    body["email"] = EMAILS[who]
                made = admin.post("/api-keys", json=body)
                assert made.status_code == 201, made.text
                self.api[who] = self.server.client(made.json()["key"], who)
                self.labels[made.json()["id"]] = f"key:{who}"
                user = admin.post(
                    "/users",
                    json={
                        "principal_id": who,
                        "role": ROLES[who],
                        "groups": GROUPS[who],
                        "password": PASSWORD,
                    },
                )
                assert user.status_code == 201, user.text
                self.labels[user.json()["id"]] = f"user:{who}"
        for who in REVIEWERS:
            self.console[who] = self._sign_in(who)

    def _sign_in(self, who: str) -> httpx.Client:
        browser = httpx.Client(base_url=self.server.base_url, follow_redirects=False, timeout=30)
        page = browser.get("/console/login")
        signed = browser.post(
            "/console/login",
            data={"username": who, "password": PASSWORD, "csrf": _csrf(page.text)},
        )
        assert signed.status_code in (302, 303), signed.text
        self.console_csrf[who] = _csrf(browser.get("/console").text)
        return browser

    def close(self) -> None:
        self.producer.close()
        for client in [*self.api.values(), *self.console.values()]:
            client.close()
        if self._runner is not None:
            if self._database is not None:
                self._runner.run(self._database.dispose())
            self._runner.close()

    def _run(self, work: Callable[[Database], Awaitable[T]]) -> T:
        """``work`` with the deployment's database, on the deployment's event loop."""
        if self._runner is None:
            self._runner = asyncio.Runner()

        async def call() -> T:
            if self._database is None:
                self._database = Database(create_engine(self.server.settings))
            return await work(self._database)

        return self._runner.run(call())

    # Reading ------------------------------------------------------------------------------

    def task_id(self, handle: str) -> str:
        return self.task_ids[handle]

    def twin_labels(self, *handles: str) -> dict[str, str]:
        """What tells twin tasks apart, each mapped to one label (for
        :func:`door_neutral`): their ids, entity ids and idempotency keys."""
        labels = {}
        for handle in handles:
            labels[self.task_id(handle)] = "<twin task>"
            labels[self.entities[handle]] = "<twin entity>"
            labels[self.idempotency_keys[handle]] = "<twin idempotency key>"
        return labels

    def send_mail(self) -> None:
        """Send what the notifier has queued and keep each approver's newest link."""

        async def work(database: Database) -> None:
            context = ServiceContext(
                database=database, settings=self.server.settings, clock=self.server.clock
            )
            while await Notifier(context).send_once():
                pass

        self._run(work)
        for message in self.mailbox.messages:
            body = Mailbox.body(message)
            for handle, entity in self.entities.items():
                if not re.search(re.escape(entity) + r"\b", body):
                    continue
                for link in re.findall(re.escape(PUBLIC) + r"/r/[A-Za-z0-9_-]+", body):
                    for who, address in EMAILS.items():
                        if message["To"] == address:
                            self.links[(who, handle)] = link.replace(PUBLIC, self.server.base_url)
        self.mailbox.messages.clear()

    def snapshot(self, handle: str) -> Snapshot:
        task_id = uuid.UUID(self.task_ids[handle])

        async def read(
            database: Database,
        ) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
            async with database.transaction(write=False) as uow:
                conn = uow.connection
                row = (
                    await conn.execute(select(review_tasks).where(review_tasks.c.id == task_id))
                ).one()
                trail = await conn.execute(
                    select(task_events)
                    .where(task_events.c.task_id == task_id)
                    .order_by(task_events.c.id)
                )
                outbox = await conn.execute(
                    select(outbox_events)
                    .where(outbox_events.c.task_id == task_id)
                    .order_by(outbox_events.c.task_version, outbox_events.c.created_at)
                )
                return (
                    dict(row._mapping),
                    [dict(r._mapping) for r in trail],
                    [dict(r._mapping) for r in outbox],
                )

        row, trail, outbox = self._run(read)
        events = []
        for event in trail:
            event.pop("id")
            # The chain link is over the task's id and times (test_evidence checks it).
            assert len(event.pop("hash")) == 64
            event.pop("prev_hash")
            events.append(self.neutral(event))
        messages = []
        for event in outbox:
            # Each engine draws its own event ids; when an event was fanned out to
            # webhook endpoints is the dispatcher's business, not the decision's; the
            # writing transaction's id is PostgreSQL's order for the catch-up read.
            event.pop("fanned_out_at", None)
            event.pop("commit_xid", None)
            event["id"] = "<event id>"
            if isinstance(event["payload"], dict) and "id" in event["payload"]:
                event["payload"]["id"] = "<event id>"
            messages.append(json.loads(canonical_json(self.neutral(event))))
        return Snapshot(self.neutral(row), events, messages)

    # Normalising --------------------------------------------------------------------------

    def neutral(self, value: Any) -> Any:
        """The deployment's own ids, keys and secrets replaced by labels. Times stay: the
        clock is shared, so every deployment must record the same instants."""
        if isinstance(value, dict):
            out = {}
            for key, item in value.items():
                if key in SECRET_FIELDS and item is not None:
                    out[key] = f"<{key}>"
                elif key in OWN_IDS and item is not None:
                    out[key] = "<own id>"
                else:
                    out[key] = self.neutral(item)
            return out
        if isinstance(value, list):
            return [self.neutral(item) for item in value]
        if isinstance(value, uuid.UUID):
            return self.neutral(str(value))
        if isinstance(value, datetime):
            return value.isoformat()
        if isinstance(value, str):
            if value in self.labels:
                return self.labels[value]
            for (who, handle), link in self.links.items():
                value = value.replace(link, f"<link {who} {handle}>")
            return value
        return value

    def answer(self, response: httpx.Response) -> Answer:
        content_type = response.headers.get("content-type", "")
        if "json" in content_type:
            body: Any = response.json() if response.content else None
            code = body.get("error_code") if isinstance(body, dict) else None
            return Answer(response.status_code, code, self.neutral(body))
        if "html" in content_type:
            return Answer(response.status_code, _console_code(response.text), _notices(response))
        return Answer(response.status_code, None, response.text or None)

    # Acting -------------------------------------------------------------------------------

    def escalate(self, handle: str, body: dict[str, Any]) -> Answer:
        response = self.producer.escalate(body)
        if response.status_code == 201:
            self.task_ids[handle] = response.json()["id"]
            self.entities[handle] = body["entity_id"]
            self.idempotency_keys[handle] = body["idempotency_key"]
        return self.answer(response)

    def claim(self, who: str, handle: str) -> Answer:
        response = self.api[who].claim(self.task_id(handle))
        if response.status_code == 200:
            self.leases[(who, handle)] = response.json()["lease_token"]
        return self.answer(response)

    def claim_next(self, who: str) -> Answer:
        response = self.api[who].post("/tasks/claim-next")
        if response.status_code == 200:
            by_id = {task_id: handle for handle, task_id in self.task_ids.items()}
            self.leases[(who, by_id[response.json()["id"]])] = response.json()["lease_token"]
        return self.answer(response)

    def renew(self, who: str, handle: str) -> Answer:
        token = self.leases.get((who, handle), "no-such-lease-token")
        return self.answer(self.api[who].renew(self.task_id(handle), token))

    def release(self, who: str, handle: str) -> Answer:
        token = self.leases.get((who, handle), "no-such-lease-token")
        return self.answer(self.api[who].release(self.task_id(handle), token))

    def resolve_api(self, who: str, handle: str, decision: str, notes: str | None) -> Answer:
        task = self.api[who].get(f"/tasks/{self.task_id(handle)}").json()
        body: dict[str, Any] = {"decision": decision, "operator_id": who}
        if notes is not None:
            body["notes"] = notes
        if task.get("current_revision") is not None:
            body |= {"revision": task["current_revision"], "digest": task["digest"]}
        token = self.leases.get((who, handle), "no-such-lease-token")
        return self.answer(self.api[who].resolve(self.task_id(handle), token, body))

    def console_claim(self, who: str, handle: str) -> Answer:
        return self._console_action(who, handle, "claim", {})

    def console_release(self, who: str, handle: str) -> Answer:
        return self._console_action(who, handle, "release", {})

    def resolve_console(self, who: str, handle: str, decision: str, notes: str | None) -> Answer:
        task = self.api[who].get(f"/tasks/{self.task_id(handle)}").json()
        form: dict[str, Any] = {"decision": decision}
        if notes is not None:
            form["notes"] = notes
        if task.get("current_revision") is not None:
            form |= {"revision": str(task["current_revision"]), "digest": task["digest"]}
        return self._console_action(who, handle, "decide", form)

    def _console_action(self, who: str, handle: str, action: str, form: dict[str, Any]) -> Answer:
        browser = self.console[who]
        response = browser.post(
            f"/console/tasks/{self.task_id(handle)}/{action}",
            data={"csrf": self.console_csrf[who], **form},
        )
        return self.answer(response)

    def bulk(self, who: str, action: str, handles: list[str], group: str = "") -> Answer:
        form: list[tuple[str, str]] = [("csrf", self.console_csrf[who]), ("action", action)]
        form += [("task", self.task_id(handle)) for handle in handles]
        if group:
            form.append(("group", group))
        response = self.console[who].post(
            "/console/bulk",
            content=urlencode(form),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        location = response.headers.get("location", "")
        return Answer(response.status_code, None, dict(httpx.URL(location).params))

    def resolve_link(
        self, who: str, handle: str, decision: str, notes: str | None, *, form: bool
    ) -> Answer:
        link = self.links.get((who, handle))
        if link is None:
            return Answer(0, "NO_LINK", None)
        task = self.api[who].get(f"/tasks/{self.task_id(handle)}").json()
        revision = task.get("current_revision")
        if form:
            page = httpx.get(link, timeout=30)
            match = re.search(r'name="csrf" value="([^"]+)"', page.text)
            data: dict[str, Any] = {"csrf": match.group(1) if match else "", "decision": decision}
            if revision is not None:
                data["revision"] = str(revision)
            if notes is not None:
                data["notes"] = notes
            return self.answer(httpx.post(link, data=data, timeout=30))
        body: dict[str, Any] = {"decision": decision}
        if revision is not None:
            body["revision"] = revision
        if notes is not None:
            body["notes"] = notes
        return self.answer(httpx.post(link, json=body, timeout=30))

    def revise(self, handle: str, amount: str) -> Answer:
        task_id = self.task_id(handle)
        current = self.producer.get(f"/tasks/{task_id}").json()
        response = self.producer.put(
            f"/tasks/{task_id}/subject",
            headers={"If-Match": f'"{current.get("current_revision")}"'},
            json={"subject": SUBJECT | {"amount": amount}},
        )
        return self.answer(response)

    def execute(self, handle: str) -> Answer:
        task_id = self.task_id(handle)
        current = self.producer.get(f"/tasks/{task_id}").json()
        response = self.producer.post(
            f"/tasks/{task_id}/execute",
            json={
                "revision": current.get("current_revision") or 1,
                "digest": current.get("digest") or "0" * 64,
                "operation_id": self.operation_ids.get(handle, f"op-{handle}"),
            },
        )
        if response.status_code == 200 and response.json().get("execution_token"):
            self.execution[handle] = response.json()["execution_token"]
        return self.answer(response)

    def report(self, handle: str, outcome: str) -> Answer:
        token = self.execution.get(handle, "no-such-execution-token")
        task = self.producer.get(f"/tasks/{self.task_id(handle)}").json()
        action = "pay" if task.get("current_revision") is not None else "execute"
        response = self.producer.post(
            f"/tasks/{self.task_id(handle)}/actions/{action}/{outcome}",
            headers={"X-Execution-Token": token},
            json={
                "operation_id": self.operation_ids.get(handle, f"op-{handle}"),
                "result": {"outcome": outcome},
            },
        )
        return self.answer(response)

    def cancel(self, handle: str) -> Answer:
        return self.answer(self.producer.post(f"/tasks/{self.task_id(handle)}/cancel"))

    def reassign(self, handle: str, group: str) -> Answer:
        response = self.api["sam"].post(
            f"/tasks/{self.task_id(handle)}/reassign", json={"group": group}
        )
        return self.answer(response)

    def force_release(self, handle: str) -> Answer:
        return self.answer(self.api["sam"].post(f"/tasks/{self.task_id(handle)}/force-release"))


#: Columns and fields holding a secret's hash: compared as present or absent.
SECRET_FIELDS = frozenset(
    {"lease_token_hash", "execution_token_hash", "lease_token", "execution_token"}
)
#: Ids each deployment draws at random for its own rows (never ids a caller gave).
OWN_IDS = frozenset({"webhook_id"})


def door_neutral(snapshot: Snapshot, twin_of: dict[str, str]) -> Snapshot:
    """What must be identical whichever door a decision came through, on twin tasks.

    Twins differ by what the producer sent to tell them apart (``twin_of`` maps each
    twin's id, entity id and idempotency key to one label). The only details allowed to
    name the door are listed here:

    - ``details.via`` in the audit trail (the resume link says it was used), and the
      ``door`` a decision or a vote records (what each door records is checked apart,
      :func:`door_recorded`);
    - the approver's credential (``approver_key_id``): an API key, a console account
      or the key a link is bound to, all of the same principal.
    """

    def fold(value: Any) -> Any:
        if isinstance(value, dict):
            out = {}
            for key, item in value.items():
                if key in ("via", "door"):
                    continue
                if key == "approver_key_id" and isinstance(item, str):
                    item = re.sub(r"^(key|user):", "credential:", item)
                out[key] = fold(item)
            return out
        if isinstance(value, list):
            return [fold(item) for item in value]
        if isinstance(value, str):
            for own, label in twin_of.items():
                value = value.replace(own, label)
            return value
        return value

    return Snapshot(
        fold(snapshot.row),
        [fold(event) for event in snapshot.trail],
        [fold(event) for event in snapshot.outbox],
    )


def door_recorded(snapshot: Snapshot) -> str | None:
    """The door the task's latest decision records in its audit event (``None``: none)."""
    decided = [e for e in snapshot.trail if e.get("action") == "resolve"]
    return decided[-1]["details"].get("door") if decided else None


def twin_escalation(**fields: Any) -> dict[str, Any]:
    """A task to be decided through a door: in the reviewers' group, so its approvers get
    a resume link, with a subject unless told otherwise."""
    fields.setdefault("assigned_group", GROUP)
    return escalation(**fields)


def _csrf(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, html[:2000]
    return match.group(1)


def _notices(response: httpx.Response) -> list[str]:
    return [
        re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z", "<time>", text)
        for text in re.findall(r'<p class="notice [a-z]+"[^>]*>([^<]*)</p>', response.text)
    ]


def _console_code(html: str) -> str | None:
    codes = re.findall(r'<p class="notice error" data-error-code="(ERR_[A-Z_]+)">', html)
    return codes[0] if codes else None


@contextmanager
def deployments(urls: dict[str, str], clock: ManualClock) -> Iterator[list[Deployment]]:
    """One live deployment per database URL, sharing ``clock``, each with its own mailbox."""
    with ExitStack() as stack:
        built = []
        for name, url in urls.items():
            mailbox = stack.enter_context(Mailbox())
            server = stack.enter_context(live_server(deployment_settings(url, mailbox), clock))
            deployment = Deployment(name, server, mailbox)
            deployment.populate()
            stack.callback(deployment.close)
            built.append(deployment)
        yield built
