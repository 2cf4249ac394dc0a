"""``examples/digits_triage.py`` against a freshly started ``signoff serve`` on SQLite,
run twice as a user would: the second run must create nothing new."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx

from tests.acceptance.test_cli import serve

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits_triage.py"
ADMIN_KEY = "digits-acceptance-admin-key-0000"


def run_example(served_url: str, cwd: Path) -> str:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")} | {
        "SIGNOFF_URL": served_url,
        "SIGNOFF_ADMIN_KEY": ADMIN_KEY,
    }
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--reviewers", "4"],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def counts(output: str) -> dict[str, int]:
    """The figures the example prints, by name."""
    patterns = {
        "below_threshold": r"(\d+) below threshold",
        "new": r"escalated: (\d+) new",
        "deduplicated": r"(\d+) deduplicated",
        "existed": r"(\d+) already existed",
        "refused": r"(\d+) refused",
        "resolved": r"resolved: (\d+) by",
        "approved": r"APPROVED (\d+)",
        "rejected": r"REJECTED (\d+)",
        "reviewed": r"\((\d+) reviewed\)",
    }
    found = {}
    for name, pattern in patterns.items():
        match = re.search(pattern, output)
        assert match, f"{name!r} not printed:\n{output}"
        found[name] = int(match.group(1))
    return found


def test_digits_triage_escalates_reviews_and_deduplicates_a_rerun(tmp_path: Path) -> None:
    with serve(tmp_path, env={"SIGNOFF_BOOTSTRAP_ADMIN_KEY": ADMIN_KEY}) as served:
        first = run_example(served.base_url, tmp_path)
        second = run_example(served.base_url, tmp_path)
        reviewer_key = httpx.post(
            f"{served.base_url}/api-keys",
            headers={"Authorization": f"Bearer {ADMIN_KEY}"},
            json={"role": "reviewer", "principal_id": "auditor"},
        ).json()["key"]
        tasks = httpx.get(
            f"{served.base_url}/tasks",
            params={"limit": 200},
            headers={"Authorization": f"Bearer {reviewer_key}"},
        ).json()["items"]

    one, two = counts(first), counts(second)
    unsure = one["below_threshold"]
    assert unsure > 0
    assert (one["new"], one["deduplicated"], one["existed"], one["refused"]) == (unsure, 0, 0, 0)
    assert one["resolved"] == one["approved"] + one["rejected"] == one["reviewed"] == unsure
    # The four reviewers' shares add up (how they split the work is up to the scheduler).
    shares = [int(n) for n in re.findall(r"digits-reviewer-\d: (\d+)", first)]
    assert len(shares) == 4
    assert sum(shares) == unsure

    assert two["below_threshold"] == unsure
    assert (two["new"], two["deduplicated"], two["refused"], two["resolved"]) == (0, unsure, 0, 0)
    assert two["reviewed"] == unsure
    assert "reused" in second

    # What the server holds: one resolved task per unsure sample, decided as printed.
    assert len(tasks) == unsure
    assert {t["status"] for t in tasks} == {"RESOLVED"}
    decisions = [t["decision"] for t in tasks]
    assert (decisions.count("APPROVED"), decisions.count("REJECTED")) == (
        one["approved"],
        one["rejected"],
    )
    for task in tasks:
        label = task["resolution_payload"]["label"]
        automated = task["diagnostic_bundle"]["evaluator_verdict"]["label"]
        assert task["decision"] == ("APPROVED" if label == automated else "REJECTED")
    # The audit trail was printed: created, claimed, resolved.
    assert re.search(r"v1 .* task\.created .*\n\s+v2 .* task\.claimed .*\n\s+v3 .*", first)
