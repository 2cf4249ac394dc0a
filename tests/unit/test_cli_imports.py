"""The command line starts light: ``signoff --help`` (and a command's own ``--help``)
imports the command-line library alone, never the server's libraries; those are imported
by the commands that run the server or open the database."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: Libraries only a command that serves or opens the database needs.
SERVER_LIBRARIES = (
    "fastapi",
    "starlette",
    "sqlalchemy",
    "alembic",
    "asyncpg",
    "aiosqlite",
    "uvicorn",
    "pydantic",
    "httpx",
    "jinja2",
    "structlog",
    "cryptography",
    "signoff.api",
    "signoff.services",
    "signoff.store",
    "signoff.console",
    "signoff.settings",
)

PROBE = """
import json, sys
from signoff.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    status = exc.code
print("MODULES " + json.dumps({"status": status, "modules": sorted(sys.modules)}))
"""


def _run(*argv: str) -> tuple[object, list[str], str]:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=True
    )
    line = next(x for x in result.stdout.splitlines() if x.startswith("MODULES "))
    found = json.loads(line.removeprefix("MODULES "))
    return found["status"], found["modules"], result.stdout


def _server_modules(modules: list[str]) -> list[str]:
    return [
        name
        for name in modules
        if any(name == lib or name.startswith(lib + ".") for lib in SERVER_LIBRARIES)
    ]


@pytest.mark.parametrize(
    "argv", [("--help",), ("serve", "--help"), ("create-key", "--help"), ("listen", "--help")]
)
def test_help_imports_none_of_the_server(argv: tuple[str, ...]) -> None:
    status, modules, output = _run(*argv)
    assert status == 0
    assert "Usage: signoff" in output
    assert _server_modules(modules) == []


def test_a_command_that_runs_still_imports_what_it_needs() -> None:
    """The probe sees imports: a command that opens settings does import them."""
    status, modules, output = _run("generate-encryption-key")
    assert status == 0
    assert "signoff.crypto" in modules
    assert len(output.splitlines()[0]) == 44  # a Fernet key, base64 of 32 bytes


def test_the_application_starts_without_what_only_sending_needs() -> None:
    """The webhook client, the mail client and the SDK are imported when the first webhook
    or e-mail goes out (or a receiver asks for ``verify_event``), not to start serving."""
    probe = (
        "import json, sys; import signoff.bootstrap, signoff.api.app, signoff.cli.protocol;"
        " print(json.dumps(sorted(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    modules = json.loads(result.stdout.splitlines()[-1])
    assert "fastapi" in modules
    assert [m for m in modules if m.split(".")[0] in ("aiohttp", "aiosmtplib")] == []
    assert [m for m in modules if m.startswith("signoff.client")] == []


def test_verify_event_is_still_offered_by_the_webhooks_module() -> None:
    from signoff.client import verify_event as from_the_sdk
    from signoff.webhooks import verify_event

    assert verify_event is from_the_sdk
