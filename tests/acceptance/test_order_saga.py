"""``examples/order_service.py --demo`` against a real ``signoff serve`` (the saga):
approved → paid, rejected or expired → compensated, a duplicate delivery → nothing."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx

from tests.acceptance.test_cli import serve

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "order_service.py"
ADMIN_KEY = "order-saga-acceptance-admin-key"
SERVE_ENV = {
    "SIGNOFF_BOOTSTRAP_ADMIN_KEY": ADMIN_KEY,
    "SIGNOFF_WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
    "SIGNOFF_SWEEP_INTERVAL_SECONDS": "0.5",
    "SIGNOFF_DISPATCHER_POLL_SECONDS": "0.1",
}


def run_demo(base_url: str, cwd: Path) -> str:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    result = subprocess.run(
        [
            sys.executable,
            str(EXAMPLE),
            "--demo",
            "--signoff-url",
            base_url,
            "--admin-key",
            ADMIN_KEY,
            "--db",
            str(cwd / "orders.db"),
            "--wait-seconds",
            "20",  # the demo's own bounded polling; it exits non-zero when it gives up
        ],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_the_order_saga_pays_compensates_and_ignores_a_duplicate(tmp_path: Path) -> None:
    with serve(tmp_path, env=SERVE_ENV) as served:
        output = run_demo(served.base_url, tmp_path)
        orders = dict(re.findall(r"^placed\s+(\w+)\s+(ord_\w+)", output, re.MULTILINE))
        assert set(orders) == {"approved", "rejected", "expired", "small"}, output

        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        tasks = {
            task["entity_id"]: task
            for task in httpx.get(
                f"{served.base_url}/tasks", params={"entity_type": "order"}, headers=admin
            ).json()["items"]
        }
        # Signoff's side of the story.
        assert tasks[orders["approved"]]["status"] == "RESOLVED"
        assert tasks[orders["approved"]]["decision"] == "APPROVED"
        assert tasks[orders["rejected"]]["decision"] == "REJECTED"
        assert tasks[orders["expired"]]["status"] == "EXPIRED"
        assert orders["small"] not in tasks  # below the limit: never escalated
        # The demo removed its endpoint on the way out.
        endpoints = httpx.get(f"{served.base_url}/webhook-endpoints", headers=admin).json()
        assert endpoints == {"items": []}

    # The order service's side, read from its own SQLite file.
    db = sqlite3.connect(tmp_path / "orders.db")
    status = dict(db.execute("SELECT id, status FROM orders"))
    assert status[orders["approved"]] == "PAID"
    assert status[orders["rejected"]] == "COMPENSATED"
    assert status[orders["expired"]] == "COMPENSATED"
    assert status[orders["small"]] == "PAID"

    def ledger(order_id: str) -> list[str]:
        rows = db.execute("SELECT entry FROM ledger WHERE order_id = ? ORDER BY seq", (order_id,))
        return [entry for (entry,) in rows]

    assert ledger(orders["approved"]) == ["hold_stock", "authorise_payment", "capture_payment"]
    for story in ("rejected", "expired"):
        assert ledger(orders[story]) == [
            "hold_stock",
            "authorise_payment",
            "release_stock",
            "refund_payment",
        ]
    # 10 in stock; approved (2) and small (1) keep theirs, rejected and expired give back.
    assert db.execute("SELECT available FROM stock").fetchall() == [(7,)]

    # One event per decided order, each processed once. The approval's event arrived three
    # times (Signoff, the demo's byte-for-byte re-post, Signoff's redelivery) and its saga
    # step ran once: the ledger above holds a single capture.
    events = db.execute(
        "SELECT order_id, type, outcome, deliveries FROM processed_events ORDER BY order_id"
    ).fetchall()
    assert sorted(events) == sorted(
        [
            (orders["approved"], "task.resolved", "PAID", 3),
            (orders["rejected"], "task.resolved", "COMPENSATED", 1),
            (orders["expired"], "task.expired", "COMPENSATED", 1),
        ]
    )
    assert "'duplicate: no-op'; orders, stock and ledger unchanged: True" in output
    assert "tampered delivery: HTTP 400" in output
    db.close()
