"""Compact JSON text: what responses, idempotent replays, events and JSON columns carry.

orjson (compiled) writes it; the standard library writes what orjson refuses, such as
integers beyond 64 bits or keys that are not strings. The two agree on everything else
that the strict parser lets in (no NaN or infinity can arrive: JSON has no token for
them), so one value always becomes the same value when read back.
:func:`compact_json_stream` writes the same text in fragments, for a document too big
to hold at once.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from typing import Any

import orjson


def compact_json(value: Any) -> str:
    """``value`` as compact JSON text (no spaces; non-ASCII characters as themselves)."""
    try:
        return orjson.dumps(value).decode()
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


async def compact_json_stream(fields: Mapping[str, Any]) -> AsyncIterator[str]:
    """``compact_json(fields)`` written in fragments, the same text: a value that is an
    :class:`~collections.abc.AsyncIterable` of pages (sequences) is written as one JSON
    array of the items of every page, one fragment per page, read only as it is written.
    Joined, the fragments are the text :func:`compact_json` writes for the same values."""
    opening = "{"
    for name, value in fields.items():
        member = f"{opening}{compact_json(name)}:"
        opening = ","
        if not isinstance(value, AsyncIterable):
            yield member + compact_json(value)
            continue
        yield member + "["
        separator = ""
        async for page in value:
            if page:
                yield separator + ",".join(compact_json(item) for item in page)
                separator = ","
        yield "]"
    yield "{}" if opening == "{" else "}"
