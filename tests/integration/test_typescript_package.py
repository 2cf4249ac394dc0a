"""The TypeScript SDK as a package: its offline tests (the shared vectors, the error
classes, receipts), its generated files current, ``npm pack`` and ``tsc --strict`` over a
consumer of its declarations."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
from fastapi.testclient import TestClient

from signoff.api.app import create_app
from signoff.settings import Settings
from tests.typescript import BUILT_TESTS, PACKAGE, ROOT, build, built_alone, node, npm


@pytest.fixture(scope="module")
def built() -> None:
    build()


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_offline_tests_pass(built: None) -> None:
    names = ("vectors.test.js", "errors.test.js", "receipts.test.js")
    output = node("--test", "--test-reporter=spec", *(str(BUILT_TESTS / name) for name in names))
    assert "# fail 0" in output or "ℹ fail 0" in output, output
    assert "rfc8785-3.2.2-example" in output
    assert "webhook signatures: task-resolved" in output
    assert "whole seconds decide" in output


def test_the_error_classes_are_generated_from_the_current_table() -> None:
    """Changed ErrorCode or the Python SDK's tree? Run scripts/render_ts_errors.py."""
    render = _script("render_ts_errors")
    assert render.TARGET.read_text(encoding="utf-8") == render.render()


def test_the_openapi_types_are_generated_from_the_served_document(
    built: None, tmp_path: Path
) -> None:
    """Changed the API? Run scripts/render_ts_openapi.py."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'unused.db'}")
    served = TestClient(create_app(settings)).get("/openapi.json")
    assert served.status_code == 200
    render = _script("render_ts_openapi")
    assert render.TARGET.read_text(encoding="utf-8") == render.render(served.json())


def test_the_package_packs_with_its_declarations(built: None) -> None:
    with built_alone():  # its prepack compiles into dist again
        packed = npm("pack", "--dry-run", "--json")
    assert packed.returncode == 0, packed.stderr
    files = {entry["path"] for entry in json.loads(packed.stdout)[0]["files"]}
    assert {
        "package.json",
        "dist/index.js",
        "dist/index.d.ts",
        "dist/errors.generated.d.ts",
    } <= files
    assert not any(path.startswith(("src/", "test/", "build/")) for path in files)


@pytest.mark.parametrize(
    "config",
    [
        "tsconfig.consumer.json",
        # exactOptionalPropertyTypes (set by `tsc --init`): the adapters' structural types
        # still accept the Agents SDK's interruptions, run state and tool call details.
        "tsconfig.consumer-exact.json",
    ],
)
def test_the_declarations_compile_under_tsc_strict(built: None, config: str) -> None:
    done = subprocess.run(
        [str(PACKAGE / "node_modules" / ".bin" / "tsc"), "-p", config],
        cwd=PACKAGE,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
