"""Compact JSON text: what responses, idempotent replays, events and JSON columns carry.

orjson (compiled) writes it; the standard library writes what orjson refuses, such as
integers beyond 64 bits or keys that are not strings. The two agree on everything else
that the strict parser lets in (no NaN or infinity can arrive: JSON has no token for
them), so one value always becomes the same value when read back.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def compact_json(value: Any) -> str:
    """``value`` as compact JSON text (no spaces; non-ASCII characters as themselves)."""
    try:
        return orjson.dumps(value).decode()
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
