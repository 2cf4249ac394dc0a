"""An order service that waits for a manager's approval through Signoff.

The saga: an order holds its stock and authorises its payment; an order above
``--limit`` escalates to Signoff and waits, without blocking anything, for a webhook:

    task.resolved APPROVED           → capture the payment         → PAID
    task.resolved REJECTED           → release stock, refund       → COMPENSATED
    task.expired (nobody decided)    → release stock, refund       → COMPENSATED

The webhook receiver verifies the signature over the raw bytes (``signoff.webhooks.verify``)
and is idempotent by ``webhook-id``: the event id goes into ``processed_events`` in the
same SQLite transaction as the saga step, so a retried or redelivered event is a no-op.

Run Signoff with private networks allowed (the receiver is on 127.0.0.1):

    SIGNOFF_BOOTSTRAP_ADMIN_KEY=local-admin-key-0000 SIGNOFF_WEBHOOK_ALLOW_PRIVATE_NETWORKS=true \\
        SIGNOFF_SWEEP_INTERVAL_SECONDS=0.5 SIGNOFF_DISPATCHER_POLL_SECONDS=0.1 \\
        python -m signoff serve --port 8765

then either serve orders (``PUT /stock/{sku} {"add"}``, ``POST /orders {"sku", "quantity",
"amount"}``, ``GET /orders/{id}``) ::

    python examples/order_service.py --signoff-url http://127.0.0.1:8765 \\
        --admin-key local-admin-key-0000 --port 8100

or drive the whole story once and print it ::

    python examples/order_service.py --signoff-url http://127.0.0.1:8765 \\
        --admin-key local-admin-key-0000 --demo
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sqlite3
import threading
import time
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import rfc8785

from signoff.webhooks import WebhookVerificationError, verify

ENTITY_TYPE = "order"
WEBHOOK_PATH = "/webhooks/signoff"
ORDER_NAMESPACE = uuid.UUID("6f1c55d2-3c55-4d6e-9a4b-0e7f3c1d2a10")

SCHEMA = """
CREATE TABLE IF NOT EXISTS stock (sku TEXT PRIMARY KEY, available INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS orders (
    id TEXT PRIMARY KEY, sku TEXT NOT NULL, quantity INTEGER NOT NULL, amount TEXT NOT NULL,
    status TEXT NOT NULL,   -- AWAITING_APPROVAL, PAID, COMPENSATED
    policy TEXT, task_id TEXT, created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS ledger (   -- every side effect, in order
    seq INTEGER PRIMARY KEY AUTOINCREMENT, order_id TEXT NOT NULL, entry TEXT NOT NULL,
    amount TEXT NOT NULL, at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS processed_events (   -- one row per webhook-id, ever
    webhook_id TEXT PRIMARY KEY, type TEXT NOT NULL, order_id TEXT, outcome TEXT NOT NULL,
    deliveries INTEGER NOT NULL, headers TEXT NOT NULL, body BLOB NOT NULL,
    first_seen TEXT NOT NULL);
"""


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class Orders:
    """The order table, the stock and the ledger, in one SQLite file."""

    def __init__(self, path: str) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._lock = threading.Lock()  # one writer at a time; each step is one transaction
        self._db.executescript(SCHEMA)

    def transaction(self) -> _Transaction:
        return _Transaction(self)

    def restock(self, sku: str, quantity: int) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT INTO stock VALUES (?, ?) "
                "ON CONFLICT(sku) DO UPDATE SET available = available + excluded.available",
                (sku, quantity),
            )

    def get(self, order_id: str) -> dict[str, Any] | None:
        with self.transaction() as db:
            row = db.execute("SELECT * FROM orders WHERE id = ?", (order_id,)).fetchone()
            return dict(row) if row else None

    def snapshot(self) -> dict[str, list[dict[str, Any]]]:
        """Everything the saga changes (to show that a duplicate changed nothing)."""
        with self.transaction() as db:
            return {
                table: [dict(r) for r in db.execute(f"SELECT * FROM {table} ORDER BY 1")]
                for table in ("orders", "stock", "ledger")
            }


class _Transaction:
    def __init__(self, orders: Orders) -> None:
        self.orders = orders

    def __enter__(self) -> sqlite3.Connection:
        self.orders._lock.acquire()
        self.orders._db.execute("BEGIN IMMEDIATE")
        return self.orders._db

    def __exit__(self, error_type: object, *_: object) -> None:
        try:
            self.orders._db.execute("ROLLBACK" if error_type else "COMMIT")
        finally:
            self.orders._lock.release()


class OrderService:
    def __init__(
        self, orders: Orders, signoff: httpx.Client, limit: Decimal, policy: str | None
    ) -> None:
        self.orders, self.signoff, self.limit, self.policy = orders, signoff, limit, policy
        self.webhook_secret = ""

    # --- placing an order -------------------------------------------------------------
    def place_order(
        self, sku: str, quantity: int, amount: Decimal, policy: str | None = None
    ) -> dict[str, Any]:
        order_id = f"ord_{uuid.uuid4().hex[:10]}"
        with self.orders.transaction() as db:
            held = db.execute(
                "UPDATE stock SET available = available - ? WHERE sku = ? AND available >= ?",
                (quantity, sku, quantity),
            ).rowcount
            if not held:
                raise ValueError(f"not enough {sku} in stock")
            status = "AWAITING_APPROVAL" if amount > self.limit else "PAID"
            db.execute(
                "INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?, NULL, ?, ?)",
                (order_id, sku, quantity, str(amount), status, policy or self.policy, now(), now()),
            )
            record(db, order_id, "hold_stock", str(quantity))
            record(db, order_id, "authorise_payment", str(amount))
            if status == "PAID":
                record(db, order_id, "capture_payment", str(amount))
        order = self.orders.get(order_id)
        assert order is not None
        if status == "AWAITING_APPROVAL":
            order = self.escalate(order)
        return order

    def escalate_unsent(self) -> None:
        """At start-up: escalate orders whose escalation may not have reached Signoff (the
        process died between committing the order and hearing back)."""
        with self.orders.transaction() as db:
            rows = db.execute(
                "SELECT * FROM orders WHERE status = 'AWAITING_APPROVAL' AND task_id IS NULL"
            ).fetchall()
        for row in rows:
            self.escalate(dict(row))

    def escalate(self, order: dict[str, Any]) -> dict[str, Any]:
        """Escalate outside any local transaction. The body is built from the stored order
        alone, so escalating the same order again (a retry after a timeout, a restart)
        sends the same key and body, and Signoff replays its first answer."""
        order_id, sku, quantity, amount = (order[k] for k in ("id", "sku", "quantity", "amount"))
        attempted = [
            {
                "action": "check_credit_limit",
                "executed_at": order["created_at"],
                "result": f"{amount} EUR exceeds the {self.limit} EUR auto-approval limit",
            },
            {
                "action": "hold_stock_and_authorise_payment",
                "executed_at": order["created_at"],
                "result": f"{quantity} x {sku} held; payment authorised, not captured",
            },
        ]
        body: dict[str, Any] = {
            # Derived from the order, so a retried escalation is recognised as the same one.
            "escalation_id": str(uuid.uuid5(ORDER_NAMESPACE, order_id)),
            "idempotency_key": f"order-approval-{order_id}",
            "entity_type": ENTITY_TYPE,
            "entity_id": order_id,
            "reason_code": "ORDER_ABOVE_LIMIT",
            "precheck_hash": hashlib.sha256(rfc8785.dumps(attempted)).hexdigest(),
            "diagnostic_bundle": {
                "trace_id": uuid.uuid5(ORDER_NAMESPACE, order_id).hex,
                "attempted_actions": attempted,
                "input_snapshot": {
                    "sku": sku,
                    "quantity": quantity,
                    "amount": amount,
                    "currency": "EUR",
                    "limit": str(self.limit),
                },
                "evaluator_verdict": {"confidence_score": 0.5, "threshold": 0.9},
            },
            "summary": {
                "recommendation": "APPROVE",
                "rationale": f"Returning customer; {amount} EUR is within their usual range.",
                "risks": [f"{amount} EUR is above the {self.limit} EUR limit"],
                "generated_by": "order-risk-model-v1",
            },
        }
        if order["policy"]:
            body["policy"] = order["policy"]
        response = self.signoff.post("/tasks/escalate", json=body)
        response.raise_for_status()
        with self.orders.transaction() as db:
            db.execute(
                "UPDATE orders SET task_id = ? WHERE id = ?", (response.json()["id"], order_id)
            )
        return self.orders.get(order_id) or {}

    # --- receiving a webhook ----------------------------------------------------------
    def receive(self, headers: dict[str, str], raw_body: bytes) -> tuple[int, str]:
        """Verify, deduplicate, run one saga step. Returns (HTTP status, outcome)."""
        try:
            verify(headers, raw_body, self.webhook_secret)  # the raw bytes, before parsing
        except WebhookVerificationError:
            return 400, "bad signature"
        webhook_id = {k.lower(): v for k, v in headers.items()}["webhook-id"]
        event = json.loads(raw_body)
        task = event["data"]
        order_id = task.get("entity_id") if task.get("entity_type") == ENTITY_TYPE else None
        with self.orders.transaction() as db:
            seen = db.execute(
                "UPDATE processed_events SET deliveries = deliveries + 1 WHERE webhook_id = ?",
                (webhook_id,),
            ).rowcount
            if seen:
                return 200, "duplicate: no-op"
            outcome = self._apply(db, event["type"], task, order_id)
            db.execute(
                "INSERT INTO processed_events VALUES (?, ?, ?, ?, 1, ?, ?, ?)",
                (
                    webhook_id,
                    event["type"],
                    order_id,
                    outcome,
                    json.dumps(headers),
                    raw_body,
                    now(),
                ),
            )
        return 200, outcome

    def _apply(
        self, db: sqlite3.Connection, event_type: str, task: dict[str, Any], order_id: str | None
    ) -> str:
        row = db.execute("SELECT * FROM orders WHERE id = ?", (order_id,)).fetchone()
        if row is None:
            return "ignored: not one of our orders"
        if row["status"] != "AWAITING_APPROVAL":
            return f"ignored: order already {row['status']}"
        if event_type == "task.resolved" and task.get("decision") == "APPROVED":
            record(db, row["id"], "capture_payment", row["amount"])
            new_status = "PAID"
        elif event_type == "task.expired" or (
            event_type == "task.resolved" and task.get("decision") == "REJECTED"
        ):
            record(db, row["id"], "release_stock", str(row["quantity"]))
            db.execute(
                "UPDATE stock SET available = available + ? WHERE sku = ?",
                (row["quantity"], row["sku"]),
            )
            record(db, row["id"], "refund_payment", row["amount"])
            new_status = "COMPENSATED"
        else:
            return f"ignored: {event_type}"
        db.execute(
            "UPDATE orders SET status = ?, updated_at = ? WHERE id = ?",
            (new_status, now(), row["id"]),
        )
        return new_status

    # --- registering with Signoff -----------------------------------------------------
    def register_webhook(self, admin: httpx.Client, public_url: str) -> str:
        response = admin.post(
            "/webhook-endpoints",
            json={
                "url": public_url + WEBHOOK_PATH,
                "event_types": ["task.resolved", "task.expired"],
                "entity_types": [ENTITY_TYPE],
                "description": "order service: approvals of orders above the limit",
            },
        )
        response.raise_for_status()
        self.webhook_secret = response.json()["secret"]  # shown once: keep it safe
        return str(response.json()["id"])


def record(db: sqlite3.Connection, order_id: str, entry: str, amount: str) -> None:
    db.execute(
        "INSERT INTO ledger (order_id, entry, amount, at) VALUES (?, ?, ?, ?)",
        (order_id, entry, amount, now()),
    )


def http_server(service: OrderService, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length", "0")))
            if self.path == WEBHOOK_PATH:
                status, outcome = service.receive(dict(self.headers.items()), raw)
                self.answer(status, {"outcome": outcome})
            elif self.path == "/orders":
                order = json.loads(raw)
                try:
                    placed = service.place_order(
                        order["sku"], int(order["quantity"]), Decimal(str(order["amount"]))
                    )
                except ValueError as error:
                    self.answer(409, {"error": str(error)})
                    return
                self.answer(201, placed)
            else:
                self.answer(404, {"error": "not found"})

        def do_PUT(self) -> None:  # PUT /stock/{sku} {"add": n}
            raw = self.rfile.read(int(self.headers.get("content-length", "0")))
            if not self.path.startswith("/stock/"):
                self.answer(404, {"error": "not found"})
                return
            service.orders.restock(self.path.removeprefix("/stock/"), int(json.loads(raw)["add"]))
            self.answer(200, {"stock": service.orders.snapshot()["stock"]})

        def do_GET(self) -> None:
            order = service.orders.get(self.path.removeprefix("/orders/"))
            self.answer(200 if order else 404, order or {"error": "not found"})

        def answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_args: Any) -> None:
            pass

    return ThreadingHTTPServer(("127.0.0.1", port), Handler)


def api_key(admin: httpx.Client, role: str, principal_id: str) -> str:
    response = admin.post("/api-keys", json={"role": role, "principal_id": principal_id})
    response.raise_for_status()
    return str(response.json()["key"])


def wait_until(condition: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up after {seconds} s waiting for {what}")
        time.sleep(0.1)


# --- the demo -----------------------------------------------------------------------------
def demo(
    service: OrderService, admin: httpx.Client, own_url: str, wait_seconds: float, endpoint_id: str
) -> None:
    base = str(admin.base_url)
    manager_key = api_key(admin, "reviewer", f"manager-{uuid.uuid4().hex[:6]}")
    manager = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {manager_key}"})
    # A policy that gives up after 2 s, for the order nobody will decide.
    quick: dict[str, Any] = {
        "name": "order-demo-expire-2s",
        "levels": [{"after_seconds": 2, "action": "expire"}],
    }
    if admin.post("/escalation-policies", json=quick).status_code == 409:
        admin.put(f"/escalation-policies/{quick['name']}", json=quick).raise_for_status()

    service.orders.restock("espresso-machine", 10)
    stories = {
        "approved": service.place_order("espresso-machine", 2, Decimal("1800.00")),
        "rejected": service.place_order("espresso-machine", 3, Decimal("2700.00")),
        "expired": service.place_order(
            "espresso-machine", 1, Decimal("950.00"), policy=quick["name"]
        ),
        "small": service.place_order("espresso-machine", 1, Decimal("120.00")),
    }
    for story, order in stories.items():
        print(f"placed  {story:<9} {order['id']}  {order['amount']:>8} EUR  {order['status']}")
    print(f"stock of espresso-machine while waiting: {service.orders.snapshot()['stock']}")

    for story, decision in (("approved", "APPROVED"), ("rejected", "REJECTED")):
        task_id = stories[story]["task_id"]
        claimed = manager.post(f"/tasks/{task_id}/claim")
        claimed.raise_for_status()
        manager.post(
            f"/tasks/{task_id}/resolve",
            headers={"X-Lease-Token": claimed.json()["lease_token"]},
            json={"decision": decision, "notes": f"demo: manager {decision.lower()}"},
        ).raise_for_status()
        print(f"manager {decision} task {task_id} ({stories[story]['id']})")

    def settled() -> bool:
        return all(
            (service.orders.get(o["id"]) or {})["status"] != "AWAITING_APPROVAL"
            for o in stories.values()
        )

    wait_until(settled, wait_seconds, "every order to be paid or compensated")

    print("final states:")
    for story, order in stories.items():
        final = service.orders.get(order["id"]) or {}
        task = (
            admin.get(f"/tasks/{order['task_id']}").json()
            if order["task_id"]
            else {"status": "-", "decision": None}
        )
        ledger = [
            e["entry"] for e in service.orders.snapshot()["ledger"] if e["order_id"] == order["id"]
        ]
        print(
            f"  {story:<9} {order['id']}  {final['status']:<12} "
            f"task {task['status']}/{task.get('decision') or '-'}  ledger: {', '.join(ledger)}"
        )
    print(f"stock of espresso-machine at the end: {service.orders.snapshot()['stock']}")

    # Deliveries are at least once: re-post the approval's delivery, byte for byte.
    with service.orders.transaction() as db:
        event = db.execute(
            "SELECT webhook_id, headers, body FROM processed_events WHERE order_id = ?",
            (stories["approved"]["id"],),
        ).fetchone()
    before = service.orders.snapshot()
    signed = {
        name: value
        for name, value in json.loads(event["headers"]).items()
        if name.lower().startswith(("webhook-", "x-signature", "content-type"))
    }
    again = httpx.post(own_url + WEBHOOK_PATH, content=event["body"], headers=signed)
    unchanged = service.orders.snapshot() == before
    print(
        f"duplicate delivery {event['webhook_id']}: HTTP {again.status_code} "
        f"{again.json()['outcome']!r}; orders, stock and ledger unchanged: {unchanged}"
    )
    # And ask Signoff itself to send it again (same webhook-id, a fresh signature).
    delivery = next(
        d
        for d in admin.get(f"/tasks/{stories['approved']['task_id']}/deliveries").json()["items"]
        # Other endpoints may subscribe to the same events: redeliver ours only.
        if d["event_id"] == event["webhook_id"] and d["endpoint_id"] == endpoint_id
    )
    admin.post(f"/deliveries/{delivery['id']}/redeliver").raise_for_status()

    def deliveries_seen() -> int:
        with service.orders.transaction() as db:
            return int(
                db.execute(
                    "SELECT deliveries FROM processed_events WHERE webhook_id = ?",
                    (event["webhook_id"],),
                ).fetchone()[0]
            )

    wait_until(lambda: deliveries_seen() >= 3, wait_seconds, "Signoff's redelivery")
    unchanged = service.orders.snapshot() == before
    print(
        f"redelivered by Signoff: {event['webhook_id']} seen {deliveries_seen()} times, "
        f"processed once; orders, stock and ledger unchanged: {unchanged}"
    )
    forged = httpx.post(
        own_url + WEBHOOK_PATH,
        content=event["body"].replace(b"APPROVED", b"REJECTED"),
        headers=signed,
    )
    print(f"tampered delivery: HTTP {forged.status_code} {forged.json()['outcome']!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--signoff-url", default=os.environ.get("SIGNOFF_URL", "http://127.0.0.1:8000")
    )
    parser.add_argument(
        "--admin-key",
        default=os.environ.get("SIGNOFF_ADMIN_KEY"),
        help="registers the webhook endpoint (and creates keys); or SIGNOFF_ADMIN_KEY",
    )
    parser.add_argument("--port", type=int, default=0, help="the order service's port (0: any)")
    parser.add_argument("--db", default="orders.db", help="the order service's SQLite file")
    parser.add_argument("--limit", type=Decimal, default=Decimal("500.00"))
    parser.add_argument("--policy", help="the escalation policy for approvals (default: Signoff's)")
    parser.add_argument("--demo", action="store_true", help="run the three-order story and exit")
    parser.add_argument("--wait-seconds", type=float, default=60, help="demo: longest wait")
    args = parser.parse_args()
    if not args.admin_key:
        parser.error("--admin-key (or SIGNOFF_ADMIN_KEY) is required")

    auth = {"Authorization": f"Bearer {args.admin_key}"}
    admin = httpx.Client(base_url=args.signoff_url, headers=auth, timeout=30)
    producer_key = os.environ.get("SIGNOFF_PRODUCER_KEY") or api_key(
        admin, "producer", "order-service"
    )
    signoff = httpx.Client(
        base_url=args.signoff_url, headers={"Authorization": f"Bearer {producer_key}"}, timeout=30
    )
    service = OrderService(Orders(args.db), signoff, args.limit, args.policy)
    server = http_server(service, args.port)
    own_url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint_id = service.register_webhook(admin, own_url)
    service.escalate_unsent()
    print(f"order service on {own_url}, webhook endpoint {endpoint_id} registered with Signoff")
    try:
        if args.demo:
            demo(service, admin, own_url, args.wait_seconds, endpoint_id)
        else:
            stop = threading.Event()
            for signal_number in (signal.SIGINT, signal.SIGTERM):
                signal.signal(signal_number, lambda *_: stop.set())
            stop.wait()
    finally:
        admin.delete(f"/webhook-endpoints/{endpoint_id}")  # no deliveries to a dead port
        server.shutdown()


if __name__ == "__main__":
    main()
