"""The error table of ``docs/api.md``, rendered from :class:`signoff.errors.ErrorCode`.

``scripts/render_error_table.py`` rewrites the table between the two markers; a unit test
fails while the document's table differs from the rendered one.
"""

from __future__ import annotations

from signoff.errors import ErrorCode

START = "<!-- error-codes: rendered from ErrorCode by scripts/render_error_table.py -->"
END = "<!-- /error-codes -->"


def render_error_table() -> str:
    """One row per code, by status, then in the enum's order."""
    ordered = sorted(ErrorCode, key=lambda code: code.status or 1000)
    rows = [f"| {code.status or 'any'} | `{code.value}` | {code.meaning} |" for code in ordered]
    return "\n".join(["| status | error_code | meaning |", "|---|---|---|", *rows])


def with_error_table(document: str) -> str:
    """``document`` with the text between the markers replaced by the rendered table."""
    before, found, rest = document.partition(START)
    if not found or END not in rest:
        raise ValueError(f"the document has no {START} … {END} section")
    after = rest.partition(END)[2]
    return f"{before}{START}\n{render_error_table()}\n{END}{after}"
