"""Rewrite the error table of ``docs/api.md`` from ``signoff.errors.ErrorCode``.

Run from the repository root: ``.venv/bin/python scripts/render_error_table.py``.
"""

from __future__ import annotations

from pathlib import Path

from signoff.error_table import with_error_table

DOCUMENT = Path(__file__).resolve().parent.parent / "docs" / "api.md"


def main() -> None:
    text = DOCUMENT.read_text(encoding="utf-8")
    DOCUMENT.write_text(with_error_table(text), encoding="utf-8")


if __name__ == "__main__":
    main()
