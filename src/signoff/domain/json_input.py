"""Strict JSON input: what every request body goes through before anything else.

Python's ``json`` module accepts things that cannot be canonicalised (RFC 8785) or
stored in PostgreSQL: ``NaN``/``Infinity``, ``1e400`` (parsed as infinity), integers
outside IEEE-754's exact range, lone surrogates (``"\\ud800"``), and duplicate object
keys (the last one silently wins). We refuse all of these with the offending field's
dotted path, so bad input is a clear 422 and never a 500 later on.

``\\u0000`` is valid JSON and is accepted here; where a value ends up in a database
column of its own (identifiers), the escalation rules refuse it explicitly.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

from signoff.errors import BadRequest, ErrorCode, FieldError, validation_error

#: RFC 8785 section 3.2.2.3 / I-JSON (RFC 7493): integers must be exactly representable
#: as IEEE-754 doubles.
MAX_SAFE_INTEGER = 2**53 - 1

#: Deepest nesting accepted (arrays and objects). Deeper documents are refused with a
#: clear 422 rather than risking recursion limits in canonicalisation.
MAX_DEPTH = 64


class _OutOfRangeNumber:
    """Placeholder for a numeric literal we will refuse, kept so the walk can report
    its path (``json`` gives us no position-to-path mapping)."""

    __slots__ = ("literal",)

    def __init__(self, literal: str) -> None:
        self.literal = literal


class _DuplicateKeys(dict[str, Any]):
    """An object in which some key appeared more than once."""

    duplicates: list[str]


def _parse_int(literal: str) -> int | _OutOfRangeNumber:
    digits = literal.lstrip("-")
    # Compare lengths first so a 100,000-digit literal never reaches int().
    if len(digits) > 16:
        return _OutOfRangeNumber(literal)
    value = int(literal)
    if abs(value) > MAX_SAFE_INTEGER:
        return _OutOfRangeNumber(literal)
    return value


def _parse_float(literal: str) -> float | _OutOfRangeNumber:
    value = float(literal)
    if not math.isfinite(value):
        return _OutOfRangeNumber(literal)
    return value


def _parse_constant(literal: str) -> _OutOfRangeNumber:
    return _OutOfRangeNumber(literal)  # NaN, Infinity, -Infinity


def _object_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    duplicates: list[str] = []
    for key, value in pairs:
        if key in result:
            duplicates.append(key)
        result[key] = value
    if duplicates:
        marked = _DuplicateKeys(result)
        marked.duplicates = duplicates
        return marked
    return result


def join_path(parent: str, key: str | int) -> str:
    """Dotted path notation used in every error: ``a.b[0].c``."""
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else key


_SURROGATE = re.compile("[\ud800-\udfff]")


def has_lone_surrogate(text: str) -> bool:
    """Whether ``text`` holds a UTF-16 surrogate on its own (unencodable as UTF-8). An
    ASCII text cannot (``isascii`` reads a flag the string keeps; the search reads it all)."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def _problems(value: Any, path: str, depth: int = 0) -> Iterator[FieldError]:
    where = path or "(root)"
    if depth > MAX_DEPTH:
        yield FieldError(where, f"nested deeper than {MAX_DEPTH} levels")
    elif isinstance(value, _OutOfRangeNumber):
        yield FieldError(
            where,
            f"number {value.literal[:40]} is outside what RFC 8785 allows "
            f"(finite, integers within ±{MAX_SAFE_INTEGER})",
        )
    elif isinstance(value, str):
        if has_lone_surrogate(value):
            yield FieldError(where, "string contains a lone UTF-16 surrogate")
    elif isinstance(value, dict):
        if isinstance(value, _DuplicateKeys):
            for key in value.duplicates:
                yield FieldError(join_path(path, key), "duplicate object key")
        for key, item in value.items():
            if has_lone_surrogate(key):
                yield FieldError(where, "object key contains a lone UTF-16 surrogate")
            yield from _problems(item, join_path(path, key), depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _problems(item, join_path(path, index), depth + 1)


def parse_json_strict(raw: bytes) -> Any:
    """Parse a request body.

    Returns plain ``dict``/``list``/``str``/``int``/``float``/``bool``/``None`` values.

    Raises:
        BadRequest: ``ERR_MALFORMED_JSON`` when the bytes are not UTF-8 JSON.
        Unprocessable: ``ERR_VALIDATION`` listing every value RFC 8785 cannot represent.
    """
    marks = _Marks()
    try:
        text = raw.decode("utf-8")
        value = json.loads(
            text,
            parse_int=marks.int,
            parse_float=marks.float,
            parse_constant=marks.constant,
            object_pairs_hook=marks.object,
        )
    except RecursionError:
        # Valid JSON, only deeper than we accept: a validation error, like depth 65.
        raise validation_error(
            [FieldError("(root)", f"nested deeper than {MAX_DEPTH} levels")]
        ) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRequest(
            f"request body is not valid JSON: {exc}", error_code=ErrorCode.MALFORMED_JSON
        ) from None
    if not marks.found and not _may_have_problems(text):
        return value  # nothing the walk below could report (the common case)
    problems = list(_problems(value, ""))
    if problems:
        raise validation_error(problems)
    return value


class _Marks:
    """The parser's hooks for one body, noting whether any of them produced a value
    the walk reports (a refused number, an object with a duplicate key)."""

    __slots__ = ("found",)

    def __init__(self) -> None:
        self.found = False

    def int(self, literal: str) -> int | _OutOfRangeNumber:
        value = _parse_int(literal)
        if type(value) is _OutOfRangeNumber:
            self.found = True
        return value

    def float(self, literal: str) -> float | _OutOfRangeNumber:
        value = _parse_float(literal)
        if type(value) is _OutOfRangeNumber:
            self.found = True
        return value

    def constant(self, literal: str) -> _OutOfRangeNumber:
        self.found = True
        return _parse_constant(literal)

    def object(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        value = _object_pairs(pairs)
        if type(value) is _DuplicateKeys:
            self.found = True
        return value


#: A ``\uD800``–``\uDFFF`` escape: the only way a surrogate gets into parsed text (the
#: UTF-8 decoder refuses encoded ones).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")


def _may_have_problems(text: str) -> bool:
    """Whether the walk must look at the parsed body: it may hold a lone surrogate (some
    surrogate escape appears in the text) or nest deeper than :data:`MAX_DEPTH` (there
    are more brackets than that). Either may be a false alarm (a surrogate pair, a
    bracket inside a string): then the walk finds nothing."""
    if "\\u" in text and _SURROGATE_ESCAPE.search(text) is not None:
        return True
    return text.count("[") + text.count("{") > MAX_DEPTH


def text_problem(text: str, *, limit: int) -> str | None:
    """Why ``text`` cannot reach a column, or ``None``."""
    if "\x00" in text:
        return "must not contain U+0000"
    if has_lone_surrogate(text):
        return "must not contain a lone UTF-16 surrogate"
    if len(text) > limit:
        return f"must be at most {limit:,} characters"
    return None
