"""How many ``signoff serve`` processes start by default: the CPU count, half of it when
PostgreSQL (or the pooler in front of it) runs on this machine, one on SQLite."""

from __future__ import annotations

import pytest

from signoff.settings import Settings


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("postgresql://postgres@127.0.0.1:5432/signoff", True),
        ("postgresql://postgres@localhost/signoff", True),
        ("postgresql://postgres@[::1]:5432/signoff", True),
        ("postgresql:///signoff", True),  # the default Unix socket
        ("postgresql://postgres@/signoff?host=/var/run/postgresql", True),
        ("postgresql://u@LOCALHOST/db", True),
        ("postgresql://u@localhost./db", True),
        ("postgresql://u@127.0.0.2/db", True),
        ("postgresql://u@[::ffff:127.0.0.1]/db", True),
        ("postgresql://u@[0:0:0:0:0:0:0:1]/db", True),
        ("postgresql://u@0.0.0.0/db", True),
        ("postgres://u@localhost/db", True),
        ("postgresql://u@localhost/db?host=/run/postgresql", True),
        ("postgresql+asyncpg://signoff@db.internal:6432/signoff", False),
        ("postgresql://signoff@10.0.0.7/signoff", False),
        ("postgresql://u@127.db.example.com/db", False),
        ("postgresql://localhost/db?host=db.internal", False),  # the driver's host wins
        ("postgresql://u@/db?host=localhost&host=db.internal", False),  # every host counts
    ],
)
def test_a_database_on_this_machine_is_told_apart(url: str, local: bool) -> None:
    assert Settings(database_url=url).database_is_local is local


def test_this_machines_own_name_and_pghost_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("socket.gethostname", lambda: "Box-7")
    assert Settings(database_url="postgresql://u@box-7:5432/db").database_is_local
    monkeypatch.setenv("PGHOST", "db.internal")
    assert not Settings(database_url="postgresql:///db").database_is_local
    monkeypatch.setenv("PGHOST", "/var/run/postgresql")
    assert Settings(database_url="postgresql:///db").database_is_local


@pytest.mark.parametrize("cores", [1, 2, 3, 8])
def test_the_default_leaves_a_local_database_half_the_cores(
    monkeypatch: pytest.MonkeyPatch, cores: int
) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: cores)
    local = Settings(database_url="postgresql://postgres@127.0.0.1/signoff")
    remote = Settings(database_url="postgresql://signoff@db.internal/signoff")
    assert local.serve_processes == max(1, cores // 2)
    assert remote.serve_processes == cores
    assert Settings(database_url="sqlite:///signoff.db").serve_processes == 1


def test_an_explicit_count_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert (
        Settings(database_url="postgresql://postgres@127.0.0.1/x", workers=3).serve_processes == 3
    )
    assert Settings(database_url="sqlite:///signoff.db", workers=2).serve_processes == 2
