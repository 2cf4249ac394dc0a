"""Rewrite ``"ERR_…"`` string literals in the package to ``ErrorCode`` members.

Run from the repository root (``.venv/bin/python scripts/codemod_error_codes.py``);
optional arguments name the files to rewrite, else every module under ``src/signoff``
except the SDK (which cannot import the server). Safe to re-run: a file already using
``ErrorCode.X`` is left as it is. It rewrites a literal only where it stands for a code:

* a keyword argument ``error_code="ERR_X"``;
* an assignment ``error_code = "ERR_X"`` (the kinds' defaults);
* a dict entry ``"error_code": "ERR_X"`` (hand-built problem documents);
* a comparison of something naming ``error_code`` with ``"ERR_X"`` (``==``, ``!=``, ``in``).

It adds ``ErrorCode`` to the module's ``from signoff.errors import …`` (or adds that line),
then lets ruff sort the imports and format the files it changed. A literal that is no
member of ``ErrorCode`` is left alone and reported; the exit status is then 1.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "signoff"
SKIPPED = (PACKAGE / "client",)

sys.path.insert(0, str(ROOT / "src"))
from signoff.errors import ErrorCode  # noqa: E402

MEMBER_BY_CODE = {member.value: member.name for member in ErrorCode}


def _is_code(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.startswith("ERR_")
    )


def _names_error_code(node: ast.AST) -> bool:
    return "error_code" in ast.unparse(node)


def _assigns_error_code(node: ast.AST) -> bool:
    targets = (
        node.targets
        if isinstance(node, ast.Assign)
        else [node.target]
        if isinstance(node, ast.AnnAssign)
        else []
    )
    return any(isinstance(target, ast.Name) and target.id == "error_code" for target in targets)


def _code_literals(tree: ast.Module) -> list[ast.Constant]:
    """Every string constant in ``tree`` that stands for an error code."""
    found: list[ast.AST | None] = []
    for node in ast.walk(tree):
        keyword = isinstance(node, ast.keyword) and node.arg == "error_code"
        if keyword or _assigns_error_code(node):
            found.append(getattr(node, "value", None))
        elif isinstance(node, ast.Dict):
            found += [
                value
                for key, value in zip(node.keys, node.values, strict=True)
                if isinstance(key, ast.Constant) and key.value == "error_code"
            ]
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_names_error_code(side) for side in sides):
                for side in sides:
                    if isinstance(side, ast.Tuple | ast.List | ast.Set):
                        found += side.elts
                    else:
                        found.append(side)
    return [node for node in found if isinstance(node, ast.Constant) and _is_code(node)]


def _offsets(source: str) -> list[int]:
    """Character offset of each line's start (ast columns are UTF-8 byte offsets)."""
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def _position(source: str, starts: list[int], line: int, byte_column: int) -> int:
    text = source[starts[line - 1] : starts[line]]
    return starts[line - 1] + len(text.encode()[:byte_column].decode())


def _with_import(source: str) -> str:
    """``source`` importing ``ErrorCode`` from ``signoff.errors`` at module level."""
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "signoff.errors":
            names = [alias.name for alias in node.names]
            if "ErrorCode" in names:
                return source
            lines = source.splitlines(keepends=True)
            aliases = [ast.unparse(alias) for alias in node.names] + ["ErrorCode"]
            statement = f"from signoff.errors import {', '.join(aliases)}\n"
            end = node.end_lineno or node.lineno
            return "".join([*lines[: node.lineno - 1], statement, *lines[end:]])
    imports = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
    lines = source.splitlines(keepends=True)
    after = (imports[-1].end_lineno or imports[-1].lineno) if imports else 0
    return "".join([*lines[:after], "from signoff.errors import ErrorCode\n", *lines[after:]])


def rewrite(source: str, *, own_module: bool = False) -> tuple[str, list[str]]:
    """``source`` with its code literals replaced, and the literals that are no code."""
    tree = ast.parse(source)
    starts = _offsets(source)
    unknown: list[str] = []
    edits: list[tuple[int, int, str]] = []
    for node in _code_literals(tree):
        name = MEMBER_BY_CODE.get(node.value)
        if name is None:
            unknown.append(f"line {node.lineno}: {node.value}")
            continue
        start = _position(source, starts, node.lineno, node.col_offset)
        end = _position(source, starts, node.end_lineno or node.lineno, node.end_col_offset or 0)
        edits.append((start, end, f"ErrorCode.{name}"))
    for start, end, text in sorted(set(edits), reverse=True):
        source = source[:start] + text + source[end:]
    if edits and not own_module:
        source = _with_import(source)
    return source, unknown


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


def main(arguments: list[str]) -> int:
    paths = [Path(a).resolve() for a in arguments] or sorted(PACKAGE.rglob("*.py"))
    changed: list[Path] = []
    problems: list[str] = []
    for path in paths:
        if any(path.is_relative_to(skipped) for skipped in SKIPPED):
            continue
        before = path.read_text(encoding="utf-8")
        after, unknown = rewrite(before, own_module=path == PACKAGE / "errors.py")
        problems += [f"{_shown(path)} {where}" for where in unknown]
        if after != before:
            path.write_text(after, encoding="utf-8")
            changed.append(path)
    if changed:
        # Only this interpreter's ruff, on files this script just wrote.
        ruff = [sys.executable, "-m", "ruff"]
        files = [str(path) for path in changed]
        sort = [*ruff, "check", "--quiet", "--fix", "--select", "I", *files]
        subprocess.run(sort, check=False)  # noqa: S603
        subprocess.run([*ruff, "format", "--quiet", *files], check=True)  # noqa: S603
    for path in changed:
        print(f"rewrote {_shown(path)}")
    for problem in problems:
        print(f"not an ErrorCode member, left alone: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
