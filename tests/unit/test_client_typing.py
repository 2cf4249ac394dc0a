"""What a developer's type checker sees of the SDK: ``mypy --strict`` over the examples
passes with no ignores, and a misspelt decision fails to type-check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

SNIPPET = """\
from langchain_core.runnables import RunnableConfig

from signoff.client import Signoff, Task, TaskStatus
from signoff.integrations.langgraph import thread_config


def settled(task: Task) -> bool:
    done: tuple[TaskStatus, ...] = ("RESOLVED", "EXPIRED", "CANCELLED")
    return task.status in done and task.decision in ("APPROVED", None)


config: RunnableConfig = thread_config("thread-1")


def decide(client: Signoff, task: Task) -> Task:
    return client.resolve(task, decision="APROVED")
"""


def test_mypy_strict_passes_the_examples_and_refuses_a_misspelt_decision(tmp_path: Path) -> None:
    for example in EXAMPLES.glob("*.py"):
        assert "type: ignore" not in example.read_text(encoding="utf-8"), example
    snippet = tmp_path / "agent.py"
    snippet.write_text(SNIPPET, encoding="utf-8")
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--config-file=", "--no-error-summary",
         "--cache-dir", str(tmp_path / "cache"), str(EXAMPLES), str(snippet)],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    errors = [line for line in checked.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1, checked.stdout + checked.stderr
    assert errors[0].startswith("agent.py:16:"), errors
    assert "Literal['APROVED']" in errors[0]
    assert "[arg-type]" in errors[0]
