"""docs/sdk.md's reference tables name exactly the clients' public methods: the Python
``Signoff`` and the TypeScript ``Signoff`` (read from the built package)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from signoff.client import Signoff
from tests.typescript import build, node

DOC = Path(__file__).resolve().parents[2] / "docs" / "sdk.md"


def _documented(table: str) -> set[str]:
    """The method names in the first column of the table between ``<!-- table: -->`` and
    ``<!-- /table -->``."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split(f"<!-- {table}:", 1)[1].split(f"<!-- /{table} -->", 1)[0]
    names: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            names |= set(re.findall(r"`(\w+)(?:\(|`)", line.split("|")[1]))
    return names


@pytest.fixture(scope="module")
def built() -> None:
    build()


def test_the_python_table_names_every_method_of_the_client() -> None:
    methods = {n for n, v in vars(Signoff).items() if not n.startswith("_") and callable(v)}
    assert _documented("python-client") == methods


def test_the_typescript_table_names_every_method_of_the_client(built: None) -> None:
    listing = node(
        "--input-type=module",
        "-e",
        "import { Signoff } from '@signoff/sdk';"
        "console.log(JSON.stringify(Object.getOwnPropertyNames(Signoff.prototype)))",
    )
    methods = {name for name in json.loads(listing) if name != "constructor"}
    assert _documented("typescript-client") == methods
