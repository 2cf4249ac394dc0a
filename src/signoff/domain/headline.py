"""What is being approved, in one line: a task's headline and its key fields.

A producer declares them at escalation (``headline``): a short ``title`` template whose
placeholders are JSON Pointers (RFC 6901) in braces — ``"Release {/amount} to
{/payee/name}"`` — and 2 to 6 labelled key ``fields``, each a pointer with a type
(``money``, ``date``, ``person``, ``link``, ``text``). Pointers resolve in the task's
subject when it has one, else in ``diagnostic_bundle.input_snapshot``. A placeholder
naming a key field's pointer is shown as that field is (an amount with its currency).

:func:`bind` resolves a declaration against a revision's document once, at intake and at
each new revision, into the stored headline (:func:`public_headline` is its API form);
:func:`render` is the one formatter, for any locale (Babel): money with its currency
symbol and the locale's separators, dates in words, markup left as text for the page to
escape. A task without a declaration gets :func:`default_headline` from its entity and
reason.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from functools import cache
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from jsonpointer import JsonPointer, JsonPointerException

from signoff.domain.json_input import join_path
from signoff.errors import ErrorCode, FieldError, Unprocessable, validation_error

if TYPE_CHECKING:
    from jsonschema import Draft7Validator

FIELD_TYPES = ("money", "date", "person", "link", "text")
MAX_TITLE_TEMPLATE = 200
#: The longest text one value, or a whole title, is shown with (longer ones end in "…").
MAX_VALUE_TEXT = 200
MAX_TITLE_TEXT = 300
#: The locale of stored titles (the API's view); pages render in the reader's locale.
DEFAULT_LOCALE = "en"
_PLACEHOLDER = re.compile(r"\{(/[^{}]*)\}")

HEADLINE_FIELDS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "headline": {
            "type": "object",
            "description": (
                "What the reviewer approves, in one line: a title template whose "
                "placeholders are JSON Pointers in braces (`Release {/amount} to "
                "{/payee/name}`), and 2 to 6 labelled key fields. Pointers resolve in the "
                "subject, or in `diagnostic_bundle.input_snapshot` when there is none."
            ),
            "required": ["title"],
            "additionalProperties": False,
            "properties": {
                "title": {"type": "string", "minLength": 1, "maxLength": MAX_TITLE_TEMPLATE},
                "fields": {
                    "type": "array",
                    "minItems": 2,
                    "maxItems": 6,
                    "items": {
                        "type": "object",
                        "required": ["label", "pointer", "type"],
                        "additionalProperties": False,
                        "properties": {
                            "label": {"type": "string", "minLength": 1, "maxLength": 60},
                            "pointer": {"type": "string", "pattern": "^/", "maxLength": 500},
                            "type": {"enum": list(FIELD_TYPES)},
                            "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
                            "currency_pointer": {
                                "type": "string",
                                "pattern": "^/",
                                "maxLength": 500,
                            },
                        },
                    },
                },
            },
        }
    },
}


@cache
def _validator() -> Draft7Validator:
    from jsonschema import Draft7Validator  # at the first check: a server starts without it

    return Draft7Validator(HEADLINE_FIELDS_SCHEMA)


@dataclass(frozen=True)
class KeyField:
    label: str
    pointer: str
    type: str
    currency: str | None = None
    currency_pointer: str | None = None

    def declaration(self) -> dict[str, Any]:
        out: dict[str, Any] = {"label": self.label, "pointer": self.pointer, "type": self.type}
        if self.currency_pointer is not None:
            out["currency_pointer"] = self.currency_pointer
        elif self.currency is not None:
            out["currency"] = self.currency
        return out


@dataclass(frozen=True)
class HeadlineSpec:
    """A producer's declaration, checked for shape (not yet against any document)."""

    title: str
    fields: tuple[KeyField, ...] = ()

    def declaration(self) -> dict[str, Any]:
        return {"title": self.title, "fields": [f.declaration() for f in self.fields]}


def parse_headline_fields(body: dict[str, Any]) -> HeadlineSpec | None:
    """Read ``headline`` from an escalation body (``None`` when absent).

    Raises:
        Unprocessable: ``ERR_VALIDATION`` naming the offending part.
    """
    if body.get("headline") is None:
        return None
    errors = []
    for error in _validator().iter_errors(body):
        path = ""
        for part in error.absolute_path:
            path = join_path(path, part)
        errors.append(FieldError(path or "headline", error.message))
    if errors:
        raise validation_error(sorted(errors, key=lambda e: e.field))
    raw = body["headline"]
    fields = tuple(KeyField(**item) for item in raw.get("fields", []))
    problems = _shape_problems(raw["title"], fields)
    if problems:
        raise validation_error(problems)
    return HeadlineSpec(title=raw["title"], fields=fields)


def spec_from_stored(stored: dict[str, Any] | None) -> HeadlineSpec | None:
    """The declaration a stored headline was bound from (``None``: the default one)."""
    if not stored or stored.get("template") is None:
        return None
    fields = tuple(
        KeyField(
            label=f["label"],
            pointer=f["pointer"],
            type=f["type"],
            currency=None if f.get("currency_pointer") else f.get("currency"),
            currency_pointer=f.get("currency_pointer"),
        )
        for f in stored.get("fields", [])
    )
    return HeadlineSpec(title=stored["template"], fields=fields)


def _shape_problems(title: str, fields: tuple[KeyField, ...]) -> list[FieldError]:
    problems = []
    rest = _PLACEHOLDER.sub("", title)
    if "{" in rest or "}" in rest:
        problems.append(
            FieldError("headline.title", "a brace opens a placeholder: {/json/pointer}")
        )
    for pointer in _PLACEHOLDER.findall(title):
        if _bad_pointer(pointer):
            problems.append(FieldError("headline.title", f"{pointer} is not a JSON Pointer"))
    for index, item in enumerate(fields):
        where = f"headline.fields[{index}]"
        for pointer in (item.pointer, item.currency_pointer):
            if pointer is not None and _bad_pointer(pointer):
                problems.append(FieldError(where, f"{pointer} is not a JSON Pointer"))
        if item.type == "money" and (item.currency is None) == (item.currency_pointer is None):
            problems.append(FieldError(where, "money needs one of currency or currency_pointer"))
        if item.currency is not None and item.currency not in _currencies():
            problems.append(FieldError(f"{where}.currency", "is not an ISO 4217 currency"))
    return problems


def _bad_pointer(pointer: str) -> bool:
    try:
        JsonPointer(pointer)
    except JsonPointerException:
        return True
    return False


@cache
def _currencies() -> frozenset[str]:
    from babel.numbers import list_currencies

    return frozenset(list_currencies())


# --- binding a declaration to a revision's document --------------------------------


def headline_document(subject: Any, diagnostic_bundle: dict[str, Any]) -> Any:
    """What pointers resolve in: the subject when the task has one, else the input."""
    if subject is not None:
        return subject
    return diagnostic_bundle.get("input_snapshot", {})


def _unresolved(where: str, pointer: str, why: str) -> FieldError:
    return FieldError(where, f"{pointer} {why}")


def _resolve(document: Any, pointer: str) -> tuple[bool, Any]:
    try:
        return True, JsonPointer(pointer).resolve(document)
    except JsonPointerException:
        return False, None


def bind(spec: HeadlineSpec, document: Any, revision: int | None) -> dict[str, Any]:
    """Resolve every pointer of ``spec`` in ``document``: the stored headline.

    Raises:
        Unprocessable: ``ERR_HEADLINE_FIELD`` naming each pointer that does not resolve,
            or resolves to a value its type cannot show.
    """
    problems: list[FieldError] = []
    fields = []
    for index, item in enumerate(spec.fields):
        where = f"headline.fields[{index}]"
        found, value = _resolve(document, item.pointer)
        if not found:
            problems.append(_unresolved(where, item.pointer, "does not resolve"))
            continue
        currency = item.currency
        if item.currency_pointer is not None:
            found, currency = _resolve(document, item.currency_pointer)
            if not found:
                problems.append(_unresolved(where, item.currency_pointer, "does not resolve"))
                continue
            if currency not in _currencies():
                problems.append(
                    _unresolved(where, item.currency_pointer, "is not an ISO 4217 currency")
                )
                continue
        why = _type_problem(item.type, value)
        if why is not None:
            problems.append(_unresolved(where, item.pointer, why))
            continue
        bound = item.declaration() | {"value": _clip_value(value)}
        if currency is not None:
            bound["currency"] = currency
        fields.append(bound)
    values = {}
    for pointer in _PLACEHOLDER.findall(spec.title):
        found, value = _resolve(document, pointer)
        if not found:
            problems.append(_unresolved("headline.title", pointer, "does not resolve"))
        else:
            values[pointer] = _clip_value(value)
    if problems:
        raise Unprocessable(
            "the headline names values this task does not have: "
            + "; ".join(f"{p.field}: {p.message}" for p in problems),
            error_code=ErrorCode.HEADLINE_FIELD,
            errors=problems,
        )
    stored: dict[str, Any] = {
        "template": spec.title,
        "fields": fields,
        "values": values,
        "revision": revision,
    }
    return _with_text(stored)


def rebind(stored: dict[str, Any] | None, subject: Any, revision: int) -> dict[str, Any] | None:
    """A declared headline bound anew to a new revision's subject (``None``: the task
    has the default headline, which no revision changes).

    Raises:
        Unprocessable: ``ERR_HEADLINE_FIELD``, as :func:`bind`.
    """
    spec = spec_from_stored(stored)
    return None if spec is None else bind(spec, subject, revision)


def default_headline(entity_type: str, entity_id: str, reason_code: str) -> dict[str, Any]:
    """The headline of a task that declares none: its reason in words, then its entity."""
    reason = reason_code.replace("_", " ").replace("-", " ").strip().lower()
    reason = reason[:1].upper() + reason[1:]
    title = _clip(f"{reason}: {entity_type} {entity_id}", MAX_TITLE_TEXT)
    return {"title": title, "template": None, "fields": [], "values": {}, "revision": None}


def _with_text(stored: dict[str, Any]) -> dict[str, Any]:
    shown = render(stored, DEFAULT_LOCALE)
    fields = [
        f | {"text": text} for f, (_, text) in zip(stored["fields"], shown.fields, strict=True)
    ]
    return {"title": shown.title} | stored | {"fields": fields}


def _type_problem(kind: str, value: Any) -> str | None:
    if kind == "money" and _amount(value) is None:
        return "is not an amount"
    if kind == "date" and _when(value) is None:
        return "is not an ISO 8601 date"
    if kind == "link" and _link(value) is None:
        return "is not an http(s) URL"
    return None


def _clip_value(value: Any) -> Any:
    """Huge values are kept as the text shown, not whole."""
    if isinstance(value, str):
        return _clip(value, MAX_VALUE_TEXT)
    if isinstance(value, dict | list):
        text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
        return value if len(text) <= MAX_VALUE_TEXT else _clip(text, MAX_VALUE_TEXT)
    return value


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _amount(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        return None
    return amount if amount.is_finite() else None


def _when(value: Any) -> date | datetime | None:
    if not isinstance(value, str):
        return None
    try:
        if len(value) == 10:
            return date.fromisoformat(value)
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _link(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    parts = urlsplit(value)
    return value if parts.scheme in ("http", "https") and parts.netloc else None


# --- the one formatter -------------------------------------------------------------


@dataclass(frozen=True)
class ShownHeadline:
    title: str
    #: (label, text) of each key field, in order.
    fields: tuple[tuple[str, str], ...]
    #: The link of each ``link`` field by label (pages make it a link).
    links: dict[str, str]


def pick_locale(accept_language: str | None) -> str:
    """The reader's locale from an ``Accept-Language`` header (the first Babel knows)."""
    from babel import Locale, UnknownLocaleError  # Babel: at the first page, not at start

    for part in (accept_language or "").split(","):
        tag = part.split(";")[0].strip().replace("-", "_")
        if not tag or tag == "*":
            continue
        try:
            return str(Locale.parse(tag))
        except (UnknownLocaleError, ValueError):
            continue
    return DEFAULT_LOCALE


def render(stored: dict[str, Any], locale: str) -> ShownHeadline:
    """A stored headline as text in ``locale``. Text stays text: the page escapes it."""
    if stored.get("template") is None:
        return ShownHeadline(stored["title"], (), {})
    by_pointer = {f["pointer"]: f for f in stored["fields"]}
    values = stored.get("values", {})

    def placeholder(match: re.Match[str]) -> str:
        pointer = match.group(1)
        if pointer in by_pointer:
            return format_field(by_pointer[pointer], locale)
        return format_value("text", values.get(pointer), None, locale)

    title = _clip(_PLACEHOLDER.sub(placeholder, stored["template"]), MAX_TITLE_TEXT)
    fields = tuple((f["label"], format_field(f, locale)) for f in stored["fields"])
    links = {f["label"]: f["value"] for f in stored["fields"] if f["type"] == "link"}
    return ShownHeadline(title, fields, links)


def format_field(field: dict[str, Any], locale: str) -> str:
    return format_value(field["type"], field.get("value"), field.get("currency"), locale)


def format_value(kind: str, value: Any, currency: str | None, locale: str) -> str:
    """One value as a reader of ``locale`` reads it."""
    from babel.dates import format_date, format_time
    from babel.numbers import format_currency, format_decimal

    if kind == "money" and currency is not None:
        amount = _amount(value)
        if amount is not None:
            return format_currency(amount, currency, locale=locale)
    if kind == "date":
        when = _when(value)
        if isinstance(when, datetime):
            clock = format_time(when, format="short", locale=locale)
            zone = " UTC" if when.utcoffset() is not None and not when.utcoffset() else ""
            return f"{format_date(when, format='long', locale=locale)}, {clock}{zone}"
        if when is not None:
            return format_date(when, format="long", locale=locale)
    if kind == "person" and isinstance(value, dict) and isinstance(value.get("name"), str):
        return _clip(value["name"], MAX_VALUE_TEXT)
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        return format_decimal(value, locale=locale)
    if isinstance(value, str):
        return _clip(value, MAX_VALUE_TEXT)
    return _clip(json.dumps(value, ensure_ascii=False, separators=(", ", ": ")), MAX_VALUE_TEXT)
