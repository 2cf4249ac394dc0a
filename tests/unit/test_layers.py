"""Each import-linter contract of pyproject.toml catches the import it forbids (that the
package keeps them is checked by ``lint-imports``, a step of scripts/test of its own)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "signoff"

#: One import each contract forbids, in the order of the contracts: (module that imports,
#: what it imports). The last closes a cycle through an import made only for type hints:
#: the runtime's database builds the write path, which ends in the audit trail.
VIOLATIONS = (
    ("services/keys.py", "signoff.api"),
    ("workers/outage.py", "signoff.store.tasks"),
    ("client/_webhooks.py", "signoff.domain"),
    ("domain/clock.py", "sqlalchemy"),
    ("store/trail.py", "signoff.store.runtime"),
)
#: Imports written under ``if TYPE_CHECKING:``.
TYPE_HINTS_ONLY = {"signoff.store.runtime"}

CONTRACTS = [
    contract["name"]
    for contract in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"
    ]
]


def lint_imports(src: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on the package found under ``src``, with the project's contracts."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [
            str(Path(sys.executable).with_name("lint-imports")),
            "--config",
            str(ROOT / "pyproject.toml"),
            "--no-cache",
            "--no-logo",
        ],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def words(text: str) -> str:
    return " ".join(text.split())


def test_each_contract_catches_what_it_forbids(tmp_path: Path) -> None:
    assert len(VIOLATIONS) == len(CONTRACTS)
    copy = tmp_path / "signoff"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "static"))
    for module, imported in VIOLATIONS:
        with (copy / module).open("a") as source:
            if imported in TYPE_HINTS_ONLY:
                source.write("\nfrom typing import TYPE_CHECKING\n")
                source.write(f"if TYPE_CHECKING:\n    import {imported}\n")
            else:
                source.write(f"\nimport {imported}  # noqa\n")
    result = lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    report = words(result.stdout)
    assert f"Contracts: 0 kept, {len(CONTRACTS)} broken." in report, result.stdout
    for (module, imported), contract in zip(VIOLATIONS, CONTRACTS, strict=True):
        assert f"{contract} BROKEN" in report
        # Each is named where it is reported (a cycle by the modules' last names).
        importer = module.removesuffix(".py").replace("/", ".")
        assert importer.rsplit(".", 1)[-1] in report
        assert imported.rsplit(".", 1)[-1] in report
