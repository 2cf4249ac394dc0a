"""The producer's own fields of an escalation: correlation ``metadata`` and W3C trace
context, plus the rule that an escalation names no field Signoff does not know.

``metadata`` belongs to the producer: it is returned to the producer (and admins) and
carried in every webhook event about the task, never shown to reviewers by default.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from signoff.domain.approval_rules import APPROVAL_FIELDS_SCHEMA
from signoff.domain.escalation import READ_ONLY_FIELDS, contract_schema
from signoff.domain.headline import HEADLINE_FIELDS_SCHEMA
from signoff.domain.revisions import SUBJECT_FIELDS_SCHEMA
from signoff.domain.waiting import WAITING_FIELDS_SCHEMA
from signoff.errors import FieldError, validation_error

#: The largest ``metadata`` accepted: its compact JSON, UTF-8 encoded.
MAX_METADATA_BYTES = 16 * 1024

PRODUCER_FIELDS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "metadata": {
            "type": "object",
            "description": (
                "The producer's own correlation (e.g. an agent's thread id), at most 16 KiB "
                "as compact JSON. Returned to the producer and in every webhook event about "
                "the task; never shown to reviewers."
            ),
        }
    },
}

# W3C Trace Context, level 1: version-traceid-parentid-flags, lowercase hex. Version ff
# is invalid, and an all-zero trace id or parent id is invalid. Version 00 has exactly
# four fields; a later version may append more, which we do not keep.
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")


def escalation_schema() -> dict[str, Any]:
    """The escalation contract plus Signoff's optional fields, as documented in OpenAPI."""
    schema = dict(contract_schema())
    schema["properties"] = {
        **schema["properties"],
        **SUBJECT_FIELDS_SCHEMA["properties"],
        **WAITING_FIELDS_SCHEMA["properties"],
        **PRODUCER_FIELDS_SCHEMA["properties"],
        **APPROVAL_FIELDS_SCHEMA["properties"],
        **HEADLINE_FIELDS_SCHEMA["properties"],
    }
    return schema


def _known_fields() -> frozenset[str]:
    return frozenset(escalation_schema()["properties"]) | frozenset(READ_ONLY_FIELDS)


def refuse_unknown_fields(body: dict[str, Any]) -> None:
    """An escalation names only fields Signoff knows (a misspelt optional field would
    otherwise be dropped without a word).

    Raises:
        Unprocessable: ``ERR_VALIDATION`` naming each unknown top-level field.
    """
    unknown = sorted(set(body) - _known_fields())
    if unknown:
        raise validation_error([FieldError(name, "is not a known field") for name in unknown])


@dataclass(frozen=True)
class ProducerFields:
    metadata: dict[str, Any] | None
    traceparent: str | None
    #: The task's headline, bound (:mod:`signoff.domain.headline`); set by the service.
    headline: dict[str, Any] | None = None


def parse_metadata(body: dict[str, Any]) -> dict[str, Any] | None:
    """Raises ``ERR_VALIDATION`` (field ``metadata``) unless it is an object of at most
    :data:`MAX_METADATA_BYTES`."""
    if "metadata" not in body or body["metadata"] is None:
        return None
    value = body["metadata"]
    if not isinstance(value, dict):
        raise validation_error([FieldError("metadata", "must be an object")])
    size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
    if size > MAX_METADATA_BYTES:
        raise validation_error(
            [FieldError("metadata", f"is {size} bytes as JSON; at most {MAX_METADATA_BYTES}")]
        )
    return value


def parse_traceparent(header: str | None) -> str | None:
    """The W3C ``traceparent`` to keep, or ``None``. An invalid header is ignored, as
    W3C Trace Context asks of a receiver (the task then has no trace context)."""
    if header is None:
        return None
    match = _TRACEPARENT.match(header.strip())
    if match is None:
        return None
    version, trace_id, parent_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest) or set(trace_id) == {"0"}:
        return None
    if set(parent_id) == {"0"}:
        return None
    return f"{version}-{trace_id}-{parent_id}-{flags}"


def parse_producer_fields(body: dict[str, Any], traceparent: str | None) -> ProducerFields:
    return ProducerFields(metadata=parse_metadata(body), traceparent=parse_traceparent(traceparent))
