"""Every error_code is one ErrorCode member: spelled once, with its status and meaning, and
the kind raised with it answers with that status."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import mypy.api
import pytest

from signoff import errors
from signoff.api.problems import status_for
from signoff.error_table import END, START, render_error_table, with_error_table
from signoff.errors import Conflict, ErrorCode, SignoffError

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "signoff"
SDK = PACKAGE / "client"
KINDS = {
    name: kind
    for name, kind in vars(errors).items()
    if isinstance(kind, type) and issubclass(kind, SignoffError) and kind is not SignoffError
}


def modules() -> list[Path]:
    return [path for path in sorted(PACKAGE.rglob("*.py")) if not path.is_relative_to(SDK)]


def test_each_member_is_named_after_its_code_and_says_what_it_means() -> None:
    for code in ErrorCode:
        assert code.value == f"ERR_{code.name}"
        assert code.meaning.strip(), code
        assert "\n" not in code.meaning, code
        assert code.meaning.endswith("."), code
        assert code.status is None or 400 <= code.status < 600, code


def test_codes_are_spelled_only_in_the_enum() -> None:
    """Elsewhere in the package a code is ``ErrorCode.X``; run
    ``scripts/codemod_error_codes.py`` to rewrite a literal."""
    literals = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.value}"
        for path in modules()
        if path != PACKAGE / "errors.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and re.fullmatch(r"ERR_[A-Z_]+", node.value)
    ]
    assert not literals, literals


def raise_sites() -> list[tuple[str, str, ErrorCode]]:
    """(where, kind, code) for every kind constructed with an explicit ``ErrorCode``."""
    sites = []
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            for keyword in node.keywords:
                value = keyword.value
                if (
                    keyword.arg == "error_code"
                    and isinstance(value, ast.Attribute)
                    and isinstance(value.value, ast.Name)
                    and value.value.id == "ErrorCode"
                ):
                    where = f"{path.relative_to(ROOT)}:{node.lineno}"
                    sites.append((where, node.func.id, ErrorCode[value.attr]))
    return sites


def test_every_kind_is_raised_only_with_codes_of_its_own_status() -> None:
    """``except Conflict`` catches every 409, and nothing else."""
    sites = raise_sites()
    assert len(sites) > 50  # the scan sees the raise sites
    wrong = [
        f"{where}: {kind} ({KINDS[kind].error_code.status}) with {code} ({code.status})"
        for where, kind, code in sites
        if kind in KINDS and KINDS[kind].error_code.status != code.status
    ]
    assert not wrong, wrong


def test_every_kinds_default_code_has_a_fixed_status() -> None:
    for kind in KINDS.values():
        assert kind.error_code.status is not None, kind


def test_a_refusal_answers_with_the_status_of_its_code() -> None:
    assert status_for(Conflict("full", error_code=ErrorCode.CLAIM_LIMIT)) == 409
    assert status_for(SignoffError("bug")) == 500


def test_the_type_checker_refuses_a_bare_string_as_an_error_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MYPYPATH", str(ROOT / "src"))
    program = (
        "from signoff.errors import Conflict, ErrorCode\n"
        'Conflict("a", error_code=ErrorCode.STATE_CONFLICT)\n'
        'Conflict("b", error_code="ERR_STATE_CONFLICT")\n'
    )
    options = ["--config-file", "/dev/null", "--strict", "--follow-imports", "silent"]
    out, _, status = mypy.api.run([*options, "--cache-dir", "/dev/null", "-c", program])
    assert status == 1
    assert out.count("error:") == 1
    assert '<string>:3: error: Argument "error_code" to "Conflict"' in out


def test_the_error_table_in_the_api_docs_is_the_rendered_one() -> None:
    document = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    table = document.partition(START)[2].partition(END)[0].strip()
    assert table == render_error_table(), (
        "docs/api.md's error table differs from ErrorCode; run "
        "scripts/render_error_table.py, or paste between the markers:\n\n" + render_error_table()
    )


def test_the_rendered_table_has_one_row_per_code_in_status_order() -> None:
    rows = [row.split(" | ") for row in render_error_table().splitlines()[2:]]
    assert sorted(row[1].strip("`") for row in rows) == sorted(code.value for code in ErrorCode)
    statuses = [1000 if row[0] == "| any" else int(row[0].removeprefix("| ")) for row in rows]
    assert statuses == sorted(statuses)
    assert ["| 409", "`ERR_CLAIM_LIMIT`", f"{ErrorCode.CLAIM_LIMIT.meaning} |"] in rows


def test_rendering_into_a_document_replaces_only_the_marked_section() -> None:
    document = f"# API\n\nbefore\n{START}\n| old |\n{END}\nafter\n"
    rendered = with_error_table(document)
    assert rendered == f"# API\n\nbefore\n{START}\n{render_error_table()}\n{END}\nafter\n"
    assert with_error_table(rendered) == rendered
    with pytest.raises(ValueError, match="error-codes"):
        with_error_table("# API without the markers\n")
