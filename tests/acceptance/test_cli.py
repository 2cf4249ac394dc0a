"""The real command line, run as a user would: ``signoff serve`` in a subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support import escalation, example_escalation


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Served:
    def __init__(
        self, process: subprocess.Popen[str], base_url: str, output: list[str], stderr: Path
    ) -> None:
        self.process, self.base_url, self.output, self.stderr = process, base_url, output, stderr

    def key(self, label: str) -> str:
        for line in self.output:
            match = re.search(label + r".*?: (signoff_\S+)", line)
            if match:
                return match.group(1)
        raise AssertionError(f"{label!r} not printed: {self.output}")


@contextmanager
def serve(cwd: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")} | (
        env or {}
    )
    stderr = cwd / f"serve-{port}.stderr"
    with stderr.open("w") as stderr_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "signoff", "serve", "--port", str(port), *args],
            cwd=cwd,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=stderr_file,
            text=True,
        )
    base_url = f"http://127.0.0.1:{port}"
    output: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, f"serve exited early with {process.returncode}"
            assert time.monotonic() < deadline, "serve did not start"
            try:
                if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        yield Served(process, base_url, output, stderr)
    finally:
        process.send_signal(signal.SIGTERM)
        stdout, _ = process.communicate(timeout=30)
        output.extend(stdout.splitlines())


def test_python_dash_m_signoff_shows_the_commands() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "signoff", "--help"], capture_output=True, text=True, check=True
    )
    for command in ("serve", "migrate", "create-key"):
        assert command in result.stdout


def test_serve_starts_empty_on_sqlite_and_prints_an_admin_key(tmp_path: Path) -> None:
    with serve(tmp_path) as served:
        admin_line = served.process.stdout.readline()  # type: ignore[union-attr]
        served.output.append(admin_line)
        admin_key = served.key("Admin API key")
        headers = {"Authorization": f"Bearer {admin_key}"}
        producer = httpx.post(
            f"{served.base_url}/api-keys",
            headers=headers,
            json={"role": "producer", "principal_id": "bot"},
        )
        producer_headers = {"Authorization": f"Bearer {producer.json()['key']}"}
        assert httpx.get(f"{served.base_url}/tasks", headers=producer_headers).json()["items"] == []
        created = httpx.post(
            f"{served.base_url}/tasks/escalate", headers=producer_headers, json=example_escalation()
        )
        assert created.status_code == 201
    assert (tmp_path / "signoff.db").exists()
    # uvicorn drains, then re-raises SIGTERM so the exit status tells how it ended.
    assert served.process.returncode in (0, -signal.SIGTERM)


def read_until(served: Served, text: str) -> None:
    """Read start-up lines until one contains ``text``."""
    while True:
        line = served.process.stdout.readline()  # type: ignore[union-attr]
        assert line, f"{text!r} never printed: {served.output}"
        served.output.append(line)
        if text in line:
            return


def test_serve_demo_shows_every_capability_and_is_idempotent(tmp_path: Path) -> None:
    env = {"SIGNOFF_BOOTSTRAP_ADMIN_KEY": "acceptance-admin-key-0000"}
    admin = {"Authorization": "Bearer acceptance-admin-key-0000"}
    seen: list[tuple[object, ...]] = []
    for run in (1, 2):
        with serve(tmp_path, "--demo", env=env) as served:
            read_until(served, "/docs")
            reviewer = {"Authorization": f"Bearer {served.key('Demo reviewer key')}"}
            base = served.base_url
            tasks = httpx.get(f"{base}/tasks", headers=reviewer).json()["items"]
            by_entity = {task["entity_type"]: task for task in tasks}
            assert len(tasks) == 4, tasks
            article = next(t for t in tasks if t["entity_type"] == "article")
            assert article["current_revision"] == 2
            diff = httpx.get(
                f"{base}/tasks/{article['id']}/diff", params={"from": 1, "to": 2}, headers=reviewer
            )
            assert diff.status_code == 200, diff.text
            refund = by_entity["refund"]
            assert refund["deadline_at"] is not None
            assert sorted(t["status"] for t in tasks).count("RESOLVED") == 1
            link = next(line.split()[-1] for line in served.output if "/r/" in line)
            page = httpx.get(link)
            assert page.status_code == 200
            assert "text/html" in page.headers["content-type"]
            decided = next(t for t in tasks if t["status"] == "RESOLVED")
            deadline = time.monotonic() + 60
            while True:  # the task.resolved webhook reached the demo receiver, signed
                deliveries = httpx.get(
                    f"{base}/tasks/{decided['id']}/deliveries", headers=reviewer
                ).json()["items"]
                received = httpx.get(f"{base}/demo/receiver").json()["received"]
                delivered = any(
                    attempt["status_code"] == 204
                    for delivery in deliveries
                    for attempt in delivery["attempts"]
                )
                if delivered and (run == 2 or any(e["type"] == "task.resolved" for e in received)):
                    break
                assert time.monotonic() < deadline, (deliveries, received)
                time.sleep(0.2)
            assert all(event["signature_verified"] for event in received)
            keys = httpx.get(f"{base}/api-keys", headers=admin).json()["items"]
            endpoints = httpx.get(f"{base}/webhook-endpoints", headers=admin).json()["items"]
            seen.append(
                (
                    sorted(t["id"] for t in tasks),
                    len(keys),
                    len(endpoints),
                    served.key("Demo reviewer key"),
                    link.split("/r/", 1)[1],
                )
            )
    assert seen[0] == seen[1]  # the second run added nothing


def _console_sign_in(base: str, username: str, password: str) -> httpx.Response:
    """Sign in through the console's login form, as a browser does (CSRF cookie first)."""
    with httpx.Client(base_url=base) as browser:
        form = browser.get("/console/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf, form.text
        signed = browser.post(
            "/console/login",
            data={"csrf": csrf.group(1), "username": username, "password": password},
        )
        if signed.status_code != 303:
            return signed
        return browser.get("/console")


def test_serve_demo_prints_a_console_sign_in_that_works_and_links_on_its_port(
    tmp_path: Path,
) -> None:
    env = {"SIGNOFF_BOOTSTRAP_ADMIN_KEY": "acceptance-admin-key-0000"}
    admin = {"Authorization": "Bearer acceptance-admin-key-0000"}
    passwords: list[dict[str, str]] = []
    for _ in (1, 2):
        with serve(tmp_path, "--demo", env=env) as served:
            read_until(served, "/docs")
            base = served.base_url
            printed = dict(re.findall(r"username (\S+)\s+password (\S+)", "\n".join(served.output)))
            assert set(printed) == {"usr_op_771", "demo-admin"}, served.output
            assert any(line.strip() == f"open {base}/console" for line in served.output)
            for username, password in printed.items():
                inbox = _console_sign_in(base, username, password)
                assert inbox.status_code == 200, inbox.text
                assert f"Signed in as <strong>{username}</strong>" in inbox.text
            people = _console_sign_in(base, "demo-admin", printed["demo-admin"])
            assert 'href="/console/people"' in people.text
            # A set-password link names the port this server listens on (not 8000).
            created = httpx.post(
                f"{base}/users",
                headers=admin,
                json={"principal_id": f"p{len(passwords)}", "role": "reviewer"},
            )
            assert created.status_code == 201, created.text
            assert created.json()["set_password_link"].startswith(f"{base}/console/set-password/")
            passwords.append(printed)
    # Each start makes new passwords; the earlier ones stop working.
    assert passwords[0]["usr_op_771"] != passwords[1]["usr_op_771"]
    with serve(tmp_path, env=env) as served:
        stale = _console_sign_in(served.base_url, "usr_op_771", passwords[0]["usr_op_771"])
        assert stale.status_code == 401


def test_two_processes_on_one_sqlite_file_grant_one_claim(tmp_path: Path) -> None:
    env = {"SIGNOFF_BOOTSTRAP_ADMIN_KEY": "acceptance-admin-key-0000"}
    admin = {"Authorization": "Bearer acceptance-admin-key-0000"}
    with serve(tmp_path, env=env) as first, serve(tmp_path, env=env) as second:

        def key(role: str, principal: str) -> dict[str, str]:
            created = httpx.post(
                f"{first.base_url}/api-keys",
                headers=admin,
                json={"role": role, "principal_id": principal},
            )
            return {"Authorization": f"Bearer {created.json()['key']}"}

        producer = key("producer", "bot")
        # Forty reviewers: the holder re-claiming its own task gets a fresh token (200).
        reviewers = [key("reviewer", f"reviewer-{i}") for i in range(40)]
        task_id = httpx.post(
            f"{second.base_url}/tasks/escalate", headers=producer, json=escalation()
        ).json()["id"]

        async def race() -> list[int]:
            async with httpx.AsyncClient(timeout=60) as client:
                responses = await asyncio.gather(
                    *(
                        client.post(
                            f"{(first, second)[i % 2].base_url}/tasks/{task_id}/claim",
                            headers=reviewers[i],
                        )
                        for i in range(40)
                    )
                )
            return [r.status_code for r in responses]

        assert Counter(asyncio.run(race())) == {200: 1, 409: 39}


def test_a_plain_postgresql_url_works_as_written(postgres_database: str, tmp_path: Path) -> None:
    assert postgres_database.startswith("postgresql://postgres@")
    # Trust authentication ignores the password; it must never be printed.
    with_password = postgres_database.replace("postgres@", "postgres:hunter2-secret@", 1)
    env = {
        "SIGNOFF_DATABASE_URL": with_password,
        "SIGNOFF_BOOTSTRAP_ADMIN_KEY": "acceptance-admin-key-0000",
    }
    with serve(tmp_path, env=env) as served:
        ready = httpx.get(
            f"{served.base_url}/readyz",
            headers={"Authorization": "Bearer acceptance-admin-key-0000"},
        )
        assert ready.json() == {"status": "ready", "database": "postgresql"}
    assert not (tmp_path / "signoff.db").exists()
    printed = "\n".join(served.output)
    assert "Starting Signoff" in printed
    assert "hunter2-secret" not in printed


def test_several_server_processes_share_one_sqlite_file(tmp_path: Path) -> None:
    env = {"SIGNOFF_BOOTSTRAP_ADMIN_KEY": "acceptance-admin-key-0000"}
    admin = {"Authorization": "Bearer acceptance-admin-key-0000"}
    with serve(tmp_path, "--workers", "2", env=env) as served:
        created = httpx.post(
            f"{served.base_url}/api-keys",
            headers=admin,
            json={"role": "producer", "principal_id": "bot"},
        )
        producer = {"Authorization": f"Bearer {created.json()['key']}"}

        async def escalate_many() -> list[int]:
            async with httpx.AsyncClient(headers=producer, timeout=60) as client:
                responses = await asyncio.gather(
                    *(
                        client.post(f"{served.base_url}/tasks/escalate", json=escalation())
                        for _ in range(20)
                    )
                )
            return [r.status_code for r in responses]

        assert asyncio.run(escalate_many()) == [201] * 20
        listed = httpx.get(
            f"{served.base_url}/tasks", headers=producer, params={"limit": 50}
        ).json()
        assert len(listed["items"]) == 20


def _created_count(base_url: str, headers: dict[str, str]) -> float:
    # A new connection each time: any of the processes may answer.
    text = httpx.get(f"{base_url}/metrics", headers=headers).text
    for line in text.splitlines():
        if line.startswith('signoff_transitions_total{event="task.created"}'):
            return float(line.split()[-1])
    return 0.0


def test_metrics_of_several_server_processes_are_summed(tmp_path: Path) -> None:
    """Whichever of ``serve --workers 2``'s processes answers ``/metrics``, its counters
    are those of both processes together."""
    env = {"SIGNOFF_BOOTSTRAP_ADMIN_KEY": "acceptance-admin-key-0000"}
    admin = {"Authorization": "Bearer acceptance-admin-key-0000"}
    with serve(tmp_path, "--workers", "2", env=env) as served:
        created = httpx.post(
            f"{served.base_url}/api-keys",
            headers=admin,
            json={"role": "producer", "principal_id": "bot"},
        )
        producer = {"Authorization": f"Bearer {created.json()['key']}"}
        for _ in range(30):  # each on a new connection, so both processes take some
            answer = httpx.post(
                f"{served.base_url}/tasks/escalate", headers=producer, json=escalation()
            )
            assert answer.status_code == 201, answer.text
        assert [_created_count(served.base_url, admin) for _ in range(12)] == [30.0] * 12


# --- The command line as a user meets it: one line per mistake, logs on stderr ---------


def signoff(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")} | (
        env or {}
    )
    return subprocess.run(
        [sys.executable, "-m", "signoff", *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_one_line_error(
    result: subprocess.CompletedProcess[str], status: int, *words: str
) -> None:
    assert result.returncode == status, (result.returncode, result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("signoff: error: "), lines[0]
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


def test_version(tmp_path: Path) -> None:
    result = signoff("--version", cwd=tmp_path)
    assert result.returncode == 0
    assert re.fullmatch(r"signoff \d+\.\d+\.\d+\S*\n", result.stdout)


def test_switches_look_like_switches(tmp_path: Path) -> None:
    help_text = signoff("serve", "--help", cwd=tmp_path).stdout
    demo_line = next(line for line in help_text.splitlines() if "--demo" in line)
    assert "<bool>" not in help_text
    assert "BOOLEAN" not in demo_line


def test_a_role_no_key_can_hold_is_one_line(tmp_path: Path) -> None:
    result = signoff("create-key", "--role", "system", "--principal-id", "x", cwd=tmp_path)
    assert_one_line_error(result, 2, "--role", "system")
    result = signoff("create-key", "--role", "wizard", "--principal-id", "x", cwd=tmp_path)
    assert_one_line_error(result, 2, "'wizard' is not a role")


def test_an_unknown_flag_is_one_line(tmp_path: Path) -> None:
    assert_one_line_error(signoff("serve", "--bogus", cwd=tmp_path), 2, "--bogus")
    assert_one_line_error(signoff("nosuchcommand", cwd=tmp_path), 2, "nosuchcommand")


def test_database_urls_signoff_cannot_use_are_one_line(tmp_path: Path) -> None:
    mysql = signoff("migrate", "--database-url", "mysql://root:pw-secret@db/x", cwd=tmp_path)
    assert_one_line_error(mysql, 1, "--database-url", "unsupported database 'mysql'")
    assert "pw-secret" not in mysql.stderr
    assert_one_line_error(
        signoff("migrate", cwd=tmp_path, env={"SIGNOFF_DATABASE_URL": "signoff.db"}),
        1,
        "SIGNOFF_DATABASE_URL",
        "not a database URL",
    )
    assert_one_line_error(
        signoff("migrate", "--database-url", "sqlite:////no/such/dir/s.db", cwd=tmp_path),
        1,
        "/no/such/dir/s.db",
    )


def test_a_missing_postgresql_database_is_one_line(postgres_database: str, tmp_path: Path) -> None:
    missing = postgres_database.rpartition("/")[0] + "/signoff_no_such_database"
    result = signoff("migrate", "--database-url", missing, cwd=tmp_path)
    assert_one_line_error(result, 1, '"signoff_no_such_database" does not exist', "createdb")
    unreachable = "postgresql://postgres@127.0.0.1:1/signoff"
    assert_one_line_error(
        signoff("migrate", "--database-url", unreachable, cwd=tmp_path), 1, "127.0.0.1:1"
    )


def test_a_bad_setting_is_one_line(tmp_path: Path) -> None:
    result = signoff("migrate", cwd=tmp_path, env={"SIGNOFF_LEASE_SECONDS": "soon"})
    assert_one_line_error(result, 1, "SIGNOFF_LEASE_SECONDS")


def test_create_key_prints_only_the_key_and_sets_groups_and_email(tmp_path: Path) -> None:
    result = signoff(
        "create-key",
        "--role",
        "reviewer",
        "--principal-id",
        "usr_ana",
        "--groups",
        "reviewers,supervisors",
        "--groups",
        "night-shift",
        "--email",
        "ana@example.com",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(r"signoff_\S+\n", result.stdout), result.stdout  # KEY=$(...) works
    assert "api_key.created" in result.stderr  # the log line, on stderr
    bad = signoff(
        "create-key", "--role", "reviewer", "--principal-id", "x", "--email", "no", cwd=tmp_path
    )
    assert_one_line_error(bad, 1, "--email")

    env = {"SIGNOFF_BOOTSTRAP_ADMIN_KEY": "acceptance-admin-key-0000", "SIGNOFF_ACCESS_LOG": "true"}
    with serve(tmp_path, env=env) as served:
        listed = httpx.get(
            f"{served.base_url}/api-keys",
            headers={"Authorization": "Bearer acceptance-admin-key-0000"},
        ).json()["items"]
        reviewer = {"Authorization": f"Bearer {result.stdout.strip()}"}
        assert httpx.get(f"{served.base_url}/tasks", headers=reviewer).status_code == 200
    ana = next(item for item in listed if item["principal_id"] == "usr_ana")
    assert ana["groups"] == ["reviewers", "supervisors", "night-shift"]
    assert ana["email"] == "ana@example.com"
    # stdout carries only what serve prints for the user; the server's own lines are
    # structured log lines on stderr.
    assert all(not line.startswith("{") for line in served.output), served.output
    logged = [json.loads(line) for line in served.stderr.read_text().splitlines()]
    assert logged
    assert all("event" in line for line in logged)
    assert any(line["event"] == "http.request" and line["status"] == 200 for line in logged)
