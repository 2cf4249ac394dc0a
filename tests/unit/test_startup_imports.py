"""A restart starts light: on a database already at the newest revision, preparing it and
building the application import neither Alembic (the revision is told from the
migration files and the ``alembic_version`` row) nor what only a request needs (the
JSON Schema validators, Babel's formatting), and the head revision that check compares
with is Alembic's own. The cyclic collector, off while ``signoff serve`` starts, is on
again once the application has started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from alembic.script import ScriptDirectory

from signoff.store.runtime.migrate import alembic_config, head_revision

#: Libraries a restart on SQLite no longer imports before its first request.
LAZY_LIBRARIES = ("alembic", "mako", "jsonschema", "jsonschema_rs", "babel")

PROBE = """
import asyncio, gc, json, sys
gc.disable()  # as `signoff serve` starts
from signoff.api.app import create_app
from signoff.bootstrap import prepare_database
from signoff.cli.common import run_with_database
from signoff.settings import Settings
settings = Settings(database_url=sys.argv[1])
run_with_database(settings, prepare_database(settings))
app = create_app(settings)
print("MODULES " + json.dumps(sorted(sys.modules)))

async def started() -> bool:
    async with app.router.lifespan_context(app):
        return gc.isenabled()

print("COLLECTOR", gc.isenabled(), asyncio.run(started()))
"""


def test_the_head_revision_read_from_the_files_is_alembics() -> None:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    assert head_revision() == head


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}


def test_a_restart_on_sqlite_starts_light(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    url = f"sqlite:///{tmp_path}/restart.db"
    subprocess.run(
        [sys.executable, "-m", "signoff", "migrate", "--database-url", url],
        env=_env(),
        capture_output=True,
        check=True,
    )
    result = subprocess.run(
        [sys.executable, "-c", PROBE, url], env=_env(), capture_output=True, text=True, check=True
    )
    line = next(x for x in result.stdout.splitlines() if x.startswith("MODULES "))
    modules = json.loads(line.removeprefix("MODULES "))
    assert "fastapi" in modules
    assert "signoff.store.runtime.migrate" in modules
    assert [m for m in modules if m.split(".")[0] in LAZY_LIBRARIES] == []
    assert "COLLECTOR False True" in result.stdout.splitlines()
