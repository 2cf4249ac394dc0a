"""No module of the package grows over 500 lines: one that would is split by
responsibility."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "signoff"
MAX_LINES = 500


def oversized(package: Path) -> list[str]:
    """Each module under ``package`` longer than :data:`MAX_LINES`, with its length."""
    found = []
    for module in sorted(package.rglob("*.py")):
        lines = len(module.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            found.append(f"{module.relative_to(package)}: {lines} lines")
    return found


def test_no_module_is_over_500_lines() -> None:
    found = oversized(PACKAGE)
    assert not found, "over 500 lines, split by responsibility:\n" + "\n".join(found)


def test_a_module_over_500_lines_is_named(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_LINES)
    assert oversized(tmp_path) == [f"sub/long.py: {MAX_LINES + 1} lines"]
