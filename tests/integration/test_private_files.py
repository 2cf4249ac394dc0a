"""The SQLite database (with its -wal and -shm files) and the encryption key file are
created readable by their owner only, and Signoff refuses to start with one that other
users of the machine can read, saying what to run."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from signoff.crypto import generate_key
from signoff.settings import Settings
from tests.support import ADMIN_KEY, escalation, live_server


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _signoff(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")} | env
    return subprocess.run(
        [sys.executable, "-m", "signoff", *args],
        env=environment,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_new_sqlite_database_its_wal_and_its_key_are_private(tmp_path: Path) -> None:
    database = tmp_path / "signoff.db"
    settings = Settings(database_url=f"sqlite:///{database}", bootstrap_admin_key=ADMIN_KEY)
    umask = os.umask(0o022)  # the usual umask: files would be created readable by everyone
    try:
        with live_server(settings) as server, server.new_client("producer", "bot") as producer:
            assert producer.escalate(escalation()).status_code == 201
            files = [database, Path(f"{database}-wal"), Path(f"{database}-shm")]
            assert all(path.exists() for path in files)
            modes = {path.name: _mode(path) for path in files}
            assert modes == {path.name: 0o600 for path in files}
    finally:
        os.umask(umask)
    assert _mode(tmp_path / "signoff.key") == 0o600


def test_start_refuses_a_database_file_others_can_read(tmp_path: Path) -> None:
    database = tmp_path / "signoff.db"
    env = {"SIGNOFF_DATABASE_URL": f"sqlite:///{database}"}
    assert _signoff("migrate", env=env, cwd=tmp_path).returncode == 0
    for exposed in (database, Path(f"{database}-wal")):
        if not exposed.exists():
            exposed.touch(mode=0o600)
        exposed.chmod(0o644)
        refused = _signoff("migrate", env=env, cwd=tmp_path)
        assert refused.returncode != 0
        said = refused.stdout + refused.stderr
        assert f"chmod 600 {exposed}" in said, said
        assert "Traceback" not in said
        exposed.chmod(0o600)
    assert _signoff("migrate", env=env, cwd=tmp_path).returncode == 0


def test_start_refuses_a_key_file_others_can_read(database_url: str, tmp_path: Path) -> None:
    key_file = tmp_path / "elsewhere.key"
    key_file.write_text(generate_key() + "\n")
    key_file.chmod(0o644)
    env = {"SIGNOFF_DATABASE_URL": database_url, "SIGNOFF_KEY_FILE": str(key_file)}
    refused = _signoff("migrate", env=env, cwd=tmp_path)
    assert refused.returncode != 0
    said = refused.stdout + refused.stderr
    assert f"chmod 600 {key_file}" in said, said
    assert "Traceback" not in said
    key_file.chmod(0o600)
    started = _signoff("migrate", env=env, cwd=tmp_path)
    assert started.returncode == 0, started.stdout + started.stderr
