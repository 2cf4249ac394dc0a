"""The TypeScript SDK (``sdk/typescript``) as the Python tests drive it: its node_modules
installed from the committed lock file, its sources and tests compiled with ``tsc``, and
``node`` run over the compiled tests."""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "sdk" / "typescript"
BUILT_TESTS = PACKAGE / "build" / "test"
#: The TypeScript examples: an application of their own that installs the package.
EXAMPLES = ROOT / "examples" / "typescript"


def npm(*args: str, cwd: Path = PACKAGE, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["npm", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


def _sources_digest() -> str:
    """SHA-256 over the package's sources, tests and build settings (names and bytes)."""
    hashed = hashlib.sha256()
    files = [*PACKAGE.glob("*.json"), *(PACKAGE / "src").rglob("*"), *(PACKAGE / "test").rglob("*")]
    for path in sorted(p for p in files if p.is_file()):
        hashed.update(str(path.relative_to(PACKAGE)).encode() + b"\0" + path.read_bytes())
    return hashed.hexdigest()


@contextmanager
def built_alone() -> Iterator[None]:
    """Hold the package's build lock: nothing else compiles into ``dist`` meanwhile (a
    ``npm pack`` builds it again)."""
    with (PACKAGE / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build() -> None:
    """Install what the lock file names (once), compile the package and its tests. The
    test processes share one build: the first compiles under a lock, and the others find
    it current (the digest of the sources it was built from matches)."""
    with built_alone():
        stamp = PACKAGE / "build" / ".sources"
        wanted = _sources_digest()
        if stamp.exists() and stamp.read_text() == wanted and (PACKAGE / "dist").exists():
            return
        _build()
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(wanted)


def _build() -> None:
    if not (PACKAGE / "node_modules" / "typescript").exists():
        installed = npm("ci", "--no-audit", "--no-fund", "--silent")
        assert installed.returncode == 0, installed.stdout + installed.stderr
    for script in ("build", "build:test"):
        done = npm("run", "--silent", script)
        assert done.returncode == 0, done.stdout + done.stderr
    if not (EXAMPLES / "node_modules" / "ai").exists():
        installed = npm("ci", "--no-audit", "--no-fund", "--silent", cwd=EXAMPLES)
        assert installed.returncode == 0, installed.stdout + installed.stderr


def node(
    *args: str, env: dict[str, str] | None = None, cwd: Path = PACKAGE, timeout: float = 600
) -> str:
    """``node args`` (in the package); its output, after asserting it succeeded."""
    done = subprocess.run(
        ["node", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    return done.stdout
