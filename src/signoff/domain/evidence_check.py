"""Offline verification of an evidence bundle: public keys only, no database, no server.

:func:`verify_bundle` checks every chain, receipt and checkpoint of a bundle written by
``signoff export`` and names each record that fails; :func:`verify_receipt` checks one
receipt. A bundle that is not one (truncated, not JSON, a field of the wrong type) is
refused with :class:`BundleError`, whose message says what is wrong.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from signoff.domain.evidence import (
    CHECKPOINT_TYPE,
    BadSignature,
    TrailRecord,
    merkle_root,
    open_compact,
    receipt_claims,
)

BUNDLE_FORMAT = "signoff.evidence-bundle/v1"


class BundleError(ValueError):
    """Not a bundle this verifier can read; the message says why."""


@dataclass
class Report:
    """What a verification found: ``failures`` (each names its record), ``notes``."""

    records: int = 0
    tasks: int = 0
    checkpoints: int = 0
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def keys_by_id(jwks: Any) -> dict[str, Mapping[str, Any]]:
    """The keys of a JWK Set, by ``kid``. Raises :class:`BundleError`."""
    if not isinstance(jwks, Mapping) or not isinstance(jwks.get("keys"), list):
        raise BundleError('the key set is not a JWK Set (an object with a "keys" list)')
    keys: dict[str, Mapping[str, Any]] = {}
    for jwk in jwks["keys"]:
        if not isinstance(jwk, Mapping) or not isinstance(jwk.get("kid"), str):
            raise BundleError("a key of the key set has no kid")
        keys[jwk["kid"]] = jwk
    return keys


def _epoch(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def _retired(kid: str, keys: Mapping[str, Mapping[str, Any]], at: str) -> str | None:
    """Why ``kid`` may not have signed something made at ``at``, or ``None``."""
    exp = keys[kid].get("exp")
    if not isinstance(exp, int):
        return None
    moment = _epoch(at)
    if moment is None:
        return f"signed with key {kid}, retired, for a record without a readable time"
    if moment >= exp:
        return f"signed with key {kid}, retired before the record was made"
    return None


def verify_receipt(jws: str, jwks: Any, record: TrailRecord | None = None) -> dict[str, Any]:
    """The claims of one receipt whose signature a key of ``jwks`` verifies (and, given
    ``record``, that states exactly that record). Raises :class:`BadSignature`."""
    keys = keys_by_id(jwks)
    kid, claims = open_compact(jws, keys)
    why = _retired(kid, keys, str(claims.get("at", "")))
    if why:
        raise BadSignature(why)
    if record is not None:
        try:
            expected = receipt_claims(record)
        except ValueError:
            raise BadSignature("the record's details are not JSON (edited)") from None
        if claims != expected:
            raise BadSignature(_mismatch(claims, record))
    return claims


def _mismatch(claims: Mapping[str, Any], record: TrailRecord) -> str:
    task, number = claims.get("task_id"), claims.get("record_id")
    if task != record.task_id:
        return f"the receipt is another task's (task {task}, record {number}): swapped"
    if number != record.id:
        return f"the receipt is of another record of the task (record {number}): replayed"
    return "the receipt states something other than the record (edited after signing)"


def parse_bundle(text: str | bytes) -> dict[str, Any]:
    """Raises :class:`BundleError` for anything but a whole bundle."""
    try:
        bundle = json.loads(text)
    except json.JSONDecodeError as error:
        if not error.doc.strip():
            raise BundleError("the bundle is empty") from None
        cut = error.msg.startswith("Unterminated string") or error.pos >= len(error.doc.rstrip())
        if cut:
            raise BundleError(
                "the bundle is incomplete: its JSON ends before it closes (truncated: an "
                "export cut off part way, or a file copied in part)"
            ) from None
        raise BundleError(f"the bundle is not JSON (truncated or damaged?): {error}") from None
    except ValueError as error:
        raise BundleError(f"the bundle is not JSON (truncated or damaged?): {error}") from None
    if not isinstance(bundle, dict) or bundle.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"not an evidence bundle (format {BUNDLE_FORMAT} expected)")
    for name, kind in (("records", list), ("checkpoints", list), ("keys", dict)):
        if not isinstance(bundle.get(name), kind):
            raise BundleError(f'the bundle\'s "{name}" is missing or not a {kind.__name__}')
    for name in ("since", "until"):
        value = bundle.get(name)
        if value is not None and (not isinstance(value, str) or _moment(value) is None):
            raise BundleError(f'the bundle\'s "{name}" is not an RFC 3339 time')
    return bundle


def _moment(text: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def verify_bundle(bundle: Mapping[str, Any], jwks: Any | None = None) -> Report:
    """Check ``bundle`` (from :func:`parse_bundle`) against ``jwks`` (the keys the auditor
    trusts; the bundle's own keys when ``None``, which is then said in a note)."""
    report = Report()
    keys = keys_by_id(bundle["keys"] if jwks is None else jwks)
    if jwks is None:
        report.notes.append("keys taken from the bundle itself: pass --keys to trust your own")
    records: dict[int, TrailRecord] = {}
    chains: dict[str, list[tuple[TrailRecord, Any]]] = defaultdict(list)
    for index, raw in enumerate(bundle["records"]):
        try:
            record = TrailRecord.from_json(raw)
        except (KeyError, TypeError, ValueError) as error:
            raise BundleError(f"record #{index} of the bundle is malformed: {error}") from None
        records[record.id] = record
        chains[record.task_id].append((record, raw.get("receipt")))
    report.records, report.tasks = len(records), len(chains)
    for task_id, chain in chains.items():
        _check_chain(task_id, sorted(chain, key=lambda item: item[0].id), keys, report)
    _check_checkpoints(bundle, records, keys, report)
    return report


def _check_chain(
    task_id: str, chain: list[tuple[TrailRecord, Any]], keys: Mapping[str, Any], report: Report
) -> None:
    previous = ""
    for record, receipt in chain:
        name = f"task {task_id} record {record.id} ({record.event_type})"
        if record.computed_hash() != record.hash:
            report.failures.append(f"{name}: its contents do not match its hash (edited)")
        if record.prev_hash != previous:
            what = (
                "the task's first record is missing"
                if not previous
                else "a record before it is missing or out of order"
            )
            report.failures.append(f"{name}: the chain is broken ({what})")
        previous = record.hash
        if not isinstance(receipt, str):
            report.failures.append(f"{name}: no receipt")
            continue
        try:
            verify_receipt(receipt, {"keys": list(keys.values())}, record)
        except BadSignature as error:
            report.failures.append(f"{name}: receipt refused: {error}")


def _check_checkpoints(
    bundle: Mapping[str, Any],
    records: Mapping[int, TrailRecord],
    keys: Mapping[str, Any],
    report: Report,
) -> None:
    since, until = bundle.get("since"), bundle.get("until")
    previous_root: str | None = None
    certified: set[int] = set()
    for index, entry in enumerate(bundle["checkpoints"]):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("leaves"), list):
            raise BundleError(f"checkpoint #{index} of the bundle is malformed")
        try:
            kid, claims = open_compact(entry.get("checkpoint", ""), keys)
        except BadSignature as error:
            report.failures.append(f"checkpoint #{index}: refused: {error}")
            continue
        seq = claims.get("seq")
        name = f"checkpoint {seq}"
        why = _retired(kid, keys, str(claims.get("made_at", "")))
        if claims.get("typ") != CHECKPOINT_TYPE or why:
            report.failures.append(f"{name}: refused: {why or 'not a checkpoint'}")
            continue
        leaves = [str(leaf) for leaf in entry["leaves"]]
        if merkle_root(leaves) != claims.get("root") or len(leaves) != claims.get("size"):
            report.failures.append(f"{name}: its leaves do not make its signed root")
            continue
        if previous_root is not None and claims.get("prev_root") != previous_root:
            report.failures.append(f"{name}: does not follow the checkpoint before it")
        previous_root = str(claims.get("root"))
        report.checkpoints += 1
        for leaf in leaves:
            _check_leaf(name, leaf, records, since, until, report)
            number = leaf.split(" ", 1)[0]
            if number.isdigit():
                certified.add(int(number))
    newer = sum(1 for record_id in records if record_id not in certified)
    if newer:
        report.notes.append(
            f"{newer} record(s) not yet under a checkpoint: their chain and receipts are checked"
        )


def _check_leaf(
    name: str,
    leaf: str,
    records: Mapping[int, TrailRecord],
    since: Any,
    until: Any,
    report: Report,
) -> None:
    parts = leaf.split(" ")
    at = _moment(f"{parts[2]}T{parts[3]}+00:00") if len(parts) == 5 else None
    if at is None or not parts[0].isdigit():
        report.failures.append(f"{name}: a malformed leaf {leaf!r}")
        return
    record_id, task_id = int(parts[0]), parts[1]
    record = records.get(record_id)
    if record is None:
        start = None if since is None else _moment(since)
        end = None if until is None else _moment(until)
        if (start is None or at >= start) and (end is None or at < end):
            report.failures.append(
                f"task {task_id} record {record_id}: certified by {name} but missing (deleted)"
            )
    elif record.hash != parts[4] or record.task_id != task_id:
        report.failures.append(
            f"task {task_id} record {record_id}: differs from the one {name} certified"
        )
