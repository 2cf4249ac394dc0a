"""``signoff create-user`` as an operator runs it: a link or a password, one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def create_user(tmp_path: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    environment["SIGNOFF_PUBLIC_BASE_URL"] = "https://signoff.example.com"
    return subprocess.run(
        [sys.executable, "-m", "signoff", "create-user", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=environment,
        timeout=120,
        check=False,
    )


def test_create_user_prints_a_link_or_sets_the_password_and_errors_are_one_line(
    tmp_path: Path,
) -> None:
    database = f"sqlite:///{tmp_path / 'signoff.db'}"
    made = create_user(
        tmp_path,
        "--principal-id",
        "ann",
        "--role",
        "reviewer",
        "--email",
        "ann@example.com",
        "--groups",
        "payments,aml",
        "--database-url",
        database,
    )
    assert made.returncode == 0, made.stderr
    link = made.stdout.strip().splitlines()[-1]
    assert link.startswith("https://signoff.example.com/console/set-password/")

    again = create_user(
        tmp_path, "--principal-id", "ann", "--role", "reviewer", "--database-url", database
    )
    assert again.returncode != 0
    assert again.stderr.strip().splitlines()[-1] == "signoff: error: user ann exists already"
    assert "Traceback" not in again.stderr

    short = create_user(
        tmp_path,
        *("--principal-id", "bob", "--role", "admin", "--password-stdin"),
        *("--database-url", database),
        stdin="short\n",
    )
    assert short.returncode != 0
    assert "at least 10 characters" in short.stderr.strip().splitlines()[-1]

    common = create_user(
        tmp_path,
        *("--principal-id", "bob", "--role", "admin", "--password-stdin"),
        *("--database-url", database),
        stdin="aaaaaaaaaaaa\n",
    )
    assert common.returncode != 0
    assert "too easy to guess" in common.stderr.strip().splitlines()[-1]

    bad_role = create_user(
        tmp_path, "--principal-id", "bob", "--role", "boss", "--database-url", database
    )
    assert bad_role.returncode != 0
    assert "reviewer, supervisor or admin" in bad_role.stderr

    direct = create_user(
        tmp_path,
        *("--principal-id", "bob", "--role", "admin", "--password-stdin"),
        *("--database-url", database),
        stdin="a long enough password\n",
    )
    assert direct.returncode == 0, direct.stderr
    assert "the password is set" in direct.stdout
    assert "set-password" not in direct.stdout
