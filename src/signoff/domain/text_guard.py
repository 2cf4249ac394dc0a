"""One guard for every text that reaches a column.

PostgreSQL refuses what SQLite swallows: U+0000 in ``text``, lone UTF-16 surrogates
(not UTF-8 at all), and index entries over about 2,700 bytes. Rather than each field
guarding itself (where every new field could bring back a 500), every request passes
here at the boundary:

* path segments and query values (:func:`parameter_problems`): no U+0000, no lone
  surrogate, at most :data:`MAX_PARAMETER_LENGTH` characters;
* JSON bodies (:func:`body_problems`), after strict parsing: every string and object
  key outside a *document* — no U+0000, no lone surrogate, at most
  :data:`MAX_TEXT_LENGTH` characters (or the field's own bound in :data:`FIELD_BOUNDS`).

*Documents* (:data:`DOCUMENT_FIELDS`) are stored as escaped JSON text
(``signoff.store.tables.JsonText``), which holds U+0000 losslessly and is never indexed:
inside them only lone surrogates are refused (by the strict parser). Field rules of
their own (``entity_id`` at most 255 characters, formats, patterns) still apply after.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from signoff.domain.decisions import NOTES_MAX_LENGTH
from signoff.domain.json_input import text_problem
from signoff.errors import FieldError

#: Top-level request fields whose value is stored whole as a JSON document.
DOCUMENT_FIELDS = frozenset(
    {"diagnostic_bundle", "subject", "resolution_payload", "result", "summary", "metadata"}
)

#: Longest text outside a document: 500 characters are at most 2,000 UTF-8 bytes, under
#: PostgreSQL's b-tree entry limit (about 2,700 bytes) for any indexed column.
MAX_TEXT_LENGTH = 500
#: Longest path segment or query value.
MAX_PARAMETER_LENGTH = 255
#: Fields with a bound of their own (free text that is never indexed).
FIELD_BOUNDS: dict[str, int] = {"notes": NOTES_MAX_LENGTH, "url": 2048, "description": 1000}


def _walk(value: Any, path: str, limit: int) -> Iterator[FieldError]:
    where = path or "(root)"
    if isinstance(value, str):
        problem = text_problem(value, limit=limit)
        if problem:
            yield FieldError(where, problem)
    elif isinstance(value, dict):
        for key, item in value.items():
            problem = text_problem(key, limit=MAX_TEXT_LENGTH)
            if problem:
                yield FieldError(where, f"object key {problem}")
                continue
            child = f"{path}.{key}" if path else key
            yield from _walk(item, child, limit)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, f"{path}[{index}]", limit)


def body_problems(body: Any) -> list[FieldError]:
    """Every text in a parsed JSON body that cannot reach a column."""
    if not isinstance(body, dict):
        return list(_walk(body, "", MAX_TEXT_LENGTH))
    problems: list[FieldError] = []
    for key, value in body.items():
        problem = text_problem(key, limit=MAX_TEXT_LENGTH)
        if problem:
            problems.append(FieldError("(root)", f"object key {problem}"))
        elif key not in DOCUMENT_FIELDS:
            problems.extend(_walk(value, key, FIELD_BOUNDS.get(key, MAX_TEXT_LENGTH)))
    return problems


def parameter_problems(path_segments: list[str], query: list[tuple[str, str]]) -> list[FieldError]:
    """Every path segment or query value that cannot reach a column."""
    problems = []
    for segment in path_segments:
        problem = text_problem(segment, limit=MAX_PARAMETER_LENGTH)
        if problem:
            problems.append(FieldError("(path)", problem))
    for name, value in query:
        problem = text_problem(name, limit=MAX_PARAMETER_LENGTH) or text_problem(
            value, limit=MAX_PARAMETER_LENGTH
        )
        if problem:
            problems.append(FieldError(name if "\x00" not in name else "(query)", problem))
    return problems
