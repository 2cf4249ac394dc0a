"""One round trip per state change on PostgreSQL.

Each statement here is a single data-modifying statement (a CTE): the conditional change
— its ``WHERE`` built from the transition table in :mod:`signoff.domain.states` — plus
its audit event and, when the transition is published, its outbox event. A single
statement is atomic on its own, so one round trip is the whole transaction
(:meth:`signoff.store.runtime.database.Database.one_statement`). The statements are built once,
at import, from the transition table and the columns of :mod:`signoff.store.tables`,
and run as asyncpg prepared statements: nothing is constructed per request.

:mod:`signoff.store.writes.postgres` runs them; SQLite keeps the multi-statement path
(:mod:`signoff.store.writes.core`: one writer, no round trips to save). The outbox
payload is the task's public view; here it is built by the database from the updated
row (:func:`view_sql`), and ``tests/integration/test_claims.py`` holds it equal to
:func:`signoff.domain.tasks.task_view`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any

from sqlalchemy import Column
from sqlalchemy.dialects import postgresql

from signoff.domain.decisions import DECISION_RULES, decisions_where
from signoff.domain.inbox import search_text
from signoff.domain.json_output import compact_json
from signoff.domain.states import (
    ACTIVE_STATUSES,
    Action,
    Decision,
    LeaseRule,
    TaskStatus,
    Transition,
    transition,
)
from signoff.domain.tasks import SUMMARY_LABEL, Task
from signoff.store.protocols import Statements
from signoff.store.tables import JsonText, fanned_out_at_sql, review_tasks

_PG = postgresql.dialect()  # type: ignore[no-untyped-call]
_PLACEHOLDER = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")
_TASK_FIELDS = tuple(field.name for field in fields(Task))
TASK_COLUMNS: tuple[Column[Any], ...] = tuple(review_tasks.c)
JSON_COLUMNS = frozenset(c.name for c in TASK_COLUMNS if isinstance(c.type, JsonText))


@dataclass(frozen=True)
class Statement:
    """A statement with ``$n`` placeholders and the names they stand for, in order."""

    name: str
    sql: str
    params: tuple[str, ...]

    def args(self, values: Mapping[str, Any]) -> list[Any]:
        return [values[name] for name in self.params]


def statement(name: str, template: str) -> Statement:
    """Turn ``:name`` placeholders into ``$n`` (a name used twice is one parameter)."""
    order: list[str] = []

    def number(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in order:
            order.append(key)
        return f"${order.index(key) + 1}"

    return Statement(name, _PLACEHOLDER.sub(number, template), tuple(order))


def sql_type(column: Column[Any]) -> str:
    return str(column.type.compile(dialect=_PG))


def encode_json(value: Any) -> str | None:
    """What :class:`~signoff.store.tables.JsonText` stores."""
    return None if value is None else compact_json(value)


def task_from_record(record: Mapping[str, Any]) -> Task:
    """A task from a ``review_tasks`` row returned by asyncpg (JSON text decoded with the
    standard library: it keeps integers of any size exact)."""
    values = {}
    for name in _TASK_FIELDS:
        value = record[name]
        if name in JSON_COLUMNS and value is not None:
            value = json.loads(value)
        values[name] = value
    values["status"] = TaskStatus(values["status"])
    return Task(**values)


#: The columns a task carries (the rest, such as ``idempotency_key``, start empty), read
#: in one call; and the row every new task starts from, in column order.
_ON_TASK = tuple(c.name for c in TASK_COLUMNS if c.name in _TASK_FIELDS)
_read_task = attrgetter(*_ON_TASK)
_EMPTY_ROW: dict[str, Any] = dict.fromkeys(c.name for c in TASK_COLUMNS)


def task_values(task: Task, idempotency_key: str) -> dict[str, Any]:
    """The one place that turns a new task into its ``review_tasks`` row (every column;
    JSON still as values). Both engines' escalation paths insert exactly this."""
    row = _EMPTY_ROW.copy()
    row.update(zip(_ON_TASK, _read_task(task), strict=True))
    row["status"] = task.status.value
    row["idempotency_key"] = idempotency_key
    row["search_text"] = search_text(
        task.entity_type, task.entity_id, task.reason_code, task.summary, task.headline
    )
    return row


_PARAM_NAMES = tuple(f"t_{c.name}" for c in TASK_COLUMNS)
_JSON_PARAMS = tuple(f"t_{c.name}" for c in TASK_COLUMNS if c.name in JSON_COLUMNS)


def task_params(task: Task, idempotency_key: str) -> dict[str, Any]:
    """:func:`task_values` as the escalation statements' ``t_<column>`` parameters, JSON
    columns encoded as stored."""
    params = dict(zip(_PARAM_NAMES, task_values(task, idempotency_key).values(), strict=True))
    for name in _JSON_PARAMS:
        params[name] = encode_json(params[name])
    return params


# --- SQL fragments, all from the transition table -------------------------------------


def _statuses(statuses: frozenset[TaskStatus], column: str = "status") -> str:
    """``status IN (...)`` written exactly as the partial indexes' predicates."""
    ordered = [s.value for s in TaskStatus if s in statuses]
    return f"{column} IN (" + ", ".join(f"'{v}'" for v in ordered) + ")"


def guard_sql(step: Transition, lease: LeaseRule | None = None) -> str:
    """The ``WHERE`` that makes ``step`` legal (``lease`` overrides the step's rule, for
    claim-next, which only takes tasks nobody holds). Parameters: ``:now``,
    ``:actor``, ``:token_hash``."""
    rule = lease or step.lease
    clauses = [_statuses(step.sources)]
    pending = f"status = '{TaskStatus.PENDING_REVIEW.value}'"
    lapsed = "lease_expires_at <= :now::timestamptz"
    if rule is LeaseRule.CLAIMABLE:
        clauses.append(f"({pending} OR {lapsed})")
    elif rule is LeaseRule.CLAIMABLE_OR_OWN:
        clauses.append(f"({pending} OR {lapsed} OR claimed_by = :actor::text)")
    elif rule in (LeaseRule.HELD, LeaseRule.HELD_LIVE):
        clauses.append("lease_token_hash = :token_hash::varchar AND claimed_by = :actor::text")
        if rule is LeaseRule.HELD_LIVE:
            clauses.append("lease_expires_at > :now::timestamptz")
    if step.by_votes is not None:
        clauses.append(f"approval_rule IS {'NOT ' if step.by_votes else ''}NULL")
    return " AND ".join(clauses)


VISIBLE = (
    "(:groups::text[] IS NULL OR assigned_group IS NULL OR assigned_group = ANY(:groups::text[]))"
)


def _ts(expression: str) -> str:
    """RFC 3339 UTC with microseconds, as :func:`signoff.domain.clock.rfc3339`."""
    return f"to_char({expression} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"


def _held(r: str) -> str:
    return (
        f"({r}.status = '{TaskStatus.CLAIMED.value}' AND ({r}.lease_expires_at IS NULL"
        f" OR {r}.lease_expires_at > :now::timestamptz))"
    )


def status_view_sql(r: str) -> str:
    """The effective status: a claim whose lease lapsed shows as pending."""
    return (
        f"CASE WHEN {r}.status = '{TaskStatus.CLAIMED.value}'"
        f" AND {r}.lease_expires_at <= :now::timestamptz"
        f" THEN '{TaskStatus.PENDING_REVIEW.value}' ELSE {r}.status END"
    )


def view_sql(r: str) -> str:
    """:func:`signoff.domain.tasks.task_view` (``metadata=True``, as events carry it) of
    row ``r``, as a ``json`` value."""
    active = _statuses(ACTIVE_STATUSES, f"{r}.status")
    summary = (
        f"CASE WHEN {r}.summary IS NULL THEN NULL ELSE (SELECT json_object_agg(k, v) FROM"
        f" (SELECT key AS k, value AS v FROM json_each({r}.summary::json) WHERE key <> 'label'"
        f" UNION ALL SELECT 'label', to_json('{SUMMARY_LABEL}'::text)) AS s) END"
    )
    asking = _decision_in(decisions_where("asks_for_changes"), f"{r}.decision")
    awaiting = (
        f"CASE WHEN {active} THEN 'reviewers'"
        f" WHEN {r}.status = '{TaskStatus.RESOLVED.value}' AND {asking} THEN 'producer' END"
    )
    pairs = [
        ("id", f"{r}.id::text"),
        ("status", status_view_sql(r)),
        ("headline", f"{r}.headline::json"),
        ("entity_type", f"{r}.entity_type"),
        ("entity_id", f"{r}.entity_id"),
        ("reason_code", f"{r}.reason_code"),
        ("precheck_hash", f"{r}.precheck_hash"),
        ("diagnostic_bundle", f"{r}.diagnostic_bundle::json"),
        ("producer_id", f"{r}.producer_id"),
        ("version", f"{r}.version"),
        ("claimed_by", f"CASE WHEN {_held(r)} THEN {r}.claimed_by END"),
        ("lease_expires_at", f"CASE WHEN {_held(r)} THEN {_ts(r + '.lease_expires_at')} END"),
        ("decision", f"{r}.decision"),
        ("notes", f"{r}.notes"),
        ("resolution_payload", f"{r}.resolution_payload::json"),
        ("operator_id", f"{r}.operator_id"),
        ("created_at", _ts(f"{r}.created_at")),
        ("updated_at", _ts(f"{r}.updated_at")),
        ("resolved_at", _ts(f"{r}.resolved_at")),
        ("current_revision", f"{r}.current_revision"),
        ("digest", f"{r}.digest"),
        ("material_paths", f"{r}.material_paths::json"),
        ("approved_revision", f"{r}.approved_revision"),
        ("approved_digest", f"{r}.approved_digest"),
        ("approval_expires_at", _ts(f"{r}.approval_expires_at")),
        ("execution_status", f"{r}.execution_status"),
        (
            "execution_lease_expires_at",
            f"CASE WHEN {r}.execution_token_hash IS NOT NULL"
            f" THEN {_ts(r + '.execution_lease_expires_at')} END",
        ),
        ("deadline_at", f"CASE WHEN {active} THEN {_ts(r + '.deadline_at')} END"),
        ("escalation_level", f"{r}.escalation_level"),
        ("policy", f"({r}.escalation_policy::json ->> 'name')"),
        ("assigned_group", f"{r}.assigned_group"),
        ("summary", summary),
        ("editable", f"{r}.editable::json"),
        ("grant_id", f"{r}.grant_id::text"),
        ("awaiting", awaiting),
        ("change_request", f"{r}.change_request::json"),
        # Events carry the producer's correlation metadata (task_view(metadata=True)).
        ("metadata", f"{r}.producer_metadata::json"),
    ]
    return "json_build_object(" + ", ".join(f"'{k}', {v}" for k, v in pairs) + ")"


#: A new outbox event's ``fanned_out_at``: already fanned out when no endpoint is enabled.
_FANNED_OUT_AT = fanned_out_at_sql(":now::timestamptz")


def _record(step: Transition, r: str, details: str) -> str:
    """The audit CTE (``a``) and, for published transitions, the outbox CTE (``o``) of
    ``step`` applied to row ``r``. No single statement makes a change that ends resume
    links (:func:`signoff.store.trail.append_transition` does that): refused here, when
    the statements are built. Parameters: ``:actor``, ``:actor_role``, ``:now``,
    ``:now_text``, ``:event_id``."""
    if step.ends_links:
        raise ValueError(f"{step.action} ends resume links: write it through append_transition")
    audit = (
        "a AS (INSERT INTO task_events (task_id, event_type, action, status, version,"
        " actor_id, actor_role, details, created_at)"
        f" SELECT {r}.id, '{step.event_type}', '{step.action.value}', {status_view_sql(r)},"
        f" {r}.version, :actor::text, :actor_role::text, {details}, :now::timestamptz"
        f" FROM {r})"
    )
    if not step.publish:
        return audit
    envelope = (
        f"json_build_object('id', :event_id::uuid::text, 'type', '{step.event_type}',"
        f" 'created_at', :now_text::text, 'data', {view_sql(r)})::text"
    )
    return audit + (
        ", o AS (INSERT INTO outbox_events (id, event_type, task_id, payload, task_version,"
        f" created_at, fanned_out_at) SELECT :event_id::uuid, '{step.event_type}', {r}.id,"
        f" {envelope}, {r}.version, :now::timestamptz, {_FANNED_OUT_AT} FROM {r})"
    )


_BUMP = "version = version + 1, updated_at = :now::timestamptz"


def _escalate() -> Statement:
    step = transition(Action.ESCALATE)
    names = ", ".join(c.name for c in TASK_COLUMNS)
    values = ", ".join(f":t_{c.name}::{sql_type(c)}" for c in TASK_COLUMNS)
    return statement(
        "escalate",
        # The key: a new one is inserted (ik); an expired one is taken over (ek). A live
        # one is left alone, not locked: a replay writes nothing, so it commits nothing
        # to the WAL (ON CONFLICT DO UPDATE … WHERE would lock the row even when the
        # WHERE refuses it). A key committed after this statement's snapshot makes
        # neither return a row and is read again by the service.
        "WITH ik AS (INSERT INTO idempotency_keys (producer_id, idempotency_key,"
        " request_fingerprint, task_id, response_status, response_body, created_at,"
        " expires_at) VALUES (:actor::text, :key::text, :fingerprint::varchar,"
        " :t_id::uuid, 201, :response::text, :now::timestamptz, :expires_at::timestamptz)"
        " ON CONFLICT (producer_id, idempotency_key) DO NOTHING RETURNING 1 AS fresh),"
        " ek AS (UPDATE idempotency_keys SET request_fingerprint = :fingerprint::varchar,"
        " task_id = :t_id::uuid, response_status = 201, response_body = :response::text,"
        " created_at = :now::timestamptz, expires_at = :expires_at::timestamptz"
        " WHERE producer_id = :actor::text AND idempotency_key = :key::text"
        " AND expires_at <= :now::timestamptz RETURNING 1 AS fresh),"
        f" t AS (INSERT INTO review_tasks ({names}) SELECT {values}"
        " WHERE EXISTS (SELECT 1 FROM ik) OR EXISTS (SELECT 1 FROM ek) RETURNING id, version),"
        " a AS (INSERT INTO task_events (task_id, event_type, action, status, version,"
        " actor_id, actor_role, details, created_at)"
        f" SELECT t.id, '{step.event_type}', '{step.action.value}', :t_status::varchar,"
        " t.version, :actor::text, :actor_role::text, :details::text, :now::timestamptz"
        " FROM t),"
        " o AS (INSERT INTO outbox_events (id, event_type, task_id, payload, task_version,"
        f" created_at, fanned_out_at) SELECT :event_id::uuid, '{step.event_type}', t.id,"
        f" :payload::text, t.version, :now::timestamptz, {_FANNED_OUT_AT} FROM t)"
        " SELECT (SELECT count(*) FROM t) AS created, k.request_fingerprint,"
        " k.task_id, k.response_status, k.response_body, k.expires_at"
        " FROM (SELECT 1) AS one LEFT JOIN idempotency_keys AS k"
        " ON k.producer_id = :actor::text AND k.idempotency_key = :key::text",
    )


#: A principal's live leases, counted under its advisory lock (migration 0008).
_LIMIT = "lim AS (SELECT signoff_live_leases(:actor::text, :now::timestamptz, {exclude}) AS n)"
_CLAIM_SET = (
    "status = '{target}', claimed_by = :actor::text, lease_token_hash = :token_hash::varchar,"
    " lease_expires_at = :lease_expires_at::timestamptz, " + _BUMP
)


def _claim() -> Statement:
    step = transition(Action.CLAIM)
    return statement(
        "claim",
        "WITH " + _LIMIT.format(exclude=":task_id::uuid") + ","
        " u AS (UPDATE review_tasks SET "
        + _CLAIM_SET.format(target=step.status_after().value)
        + f" WHERE id = :task_id::uuid AND {guard_sql(step)} AND {VISIBLE}"
        " AND (SELECT n FROM lim) < :limit::bigint RETURNING review_tasks.*), "
        + _record(step, "u", "'{}'")
        + " SELECT u.*, (SELECT n FROM lim) AS live_leases FROM (SELECT 1) AS one"
        " LEFT JOIN u ON true",
    )


def _claim_next(*, entity_type: bool, reason_code: bool, groups: bool) -> Statement:
    """Claim-next with exactly the filters given: each combination is its own statement,
    so its cached generic plan has no ``$n IS NULL OR …`` to guess at. (With such a
    predicate PostgreSQL estimated one matching row and walked every active task,
    sorting them, instead of reading the oldest first from ``ix_review_tasks_claimable``:
    a claim cost grew with the queue.)"""
    step = transition(Action.CLAIM)
    guard = guard_sql(step, LeaseRule.CLAIMABLE)
    filters = [guard]
    if groups:
        filters.append("(assigned_group IS NULL OR assigned_group = ANY(:groups::text[]))")
    if entity_type:
        filters.append("entity_type = :entity_type::text")
    if reason_code:
        filters.append("reason_code = :reason_code::text")
    return statement(
        "claim_next",
        "WITH " + _LIMIT.format(exclude="NULL::uuid") + ","
        f" c AS (SELECT id FROM review_tasks WHERE {' AND '.join(filters)}"
        " AND (SELECT n FROM lim) < :limit::bigint"
        " ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED),"
        " u AS (UPDATE review_tasks SET "
        + _CLAIM_SET.format(target=step.status_after().value)
        + f" WHERE id = (SELECT id FROM c) AND {guard} RETURNING review_tasks.*), "
        + _record(step, "u", "'{}'")
        + " SELECT u.*, (SELECT n FROM lim) AS live_leases FROM (SELECT 1) AS one"
        " LEFT JOIN u ON true",
    )


def _held_change(action: Action, changes: str, *, limited: bool = False) -> Statement:
    """A change of the held lease. ``limited``: a lapsed lease is taken up again only
    while the holder has fewer than ``:limit`` other live leases, counted under the same
    lock as a claim's (renewing a lapsed lease is a claim as far as the limit goes)."""
    step = transition(action)
    target = f"status = '{step.target.value}', " if step.target else ""
    lim = "WITH " + _LIMIT.format(exclude=":task_id::uuid") + ", " if limited else "WITH "
    within = (
        " AND (lease_expires_at > :now::timestamptz OR (SELECT n FROM lim) < :limit::bigint)"
        if limited
        else ""
    )
    return statement(
        action.value,
        f"{lim}u AS (UPDATE review_tasks SET {target}{changes}{_BUMP}"
        f" WHERE id = :task_id::uuid AND {guard_sql(step)}{within} RETURNING review_tasks.*), "
        + _record(step, "u", ":details::text")
        + " SELECT * FROM u",
    )


def _decision_in(decisions: tuple[Decision, ...], value: str = ":decision::varchar") -> str:
    """Whether the bound ``:decision`` (or ``value``) is one of ``decisions`` (a rule of the
    decision table, written into the statement as constants)."""
    if not decisions:
        return "false"
    return f"{value} IN ({', '.join(repr(d.value) for d in decisions)})"


def _resolve() -> Statement:
    step = transition(Action.RESOLVE)
    approved = _decision_in(decisions_where("grants_approval"))
    needs_subject = _decision_in(decisions_where("needs_subject"))
    producer_barred = _decision_in(
        tuple(d for d, r in DECISION_RULES.items() if not r.producer_may_decide)
    )
    ttl = "COALESCE(approval_ttl_seconds, :default_ttl::int)"
    details = (
        "(CASE WHEN u.current_revision IS NULL"
        " THEN json_build_object('decision', u.decision, 'door', :door::text)"
        " ELSE json_build_object('decision', u.decision, 'door', :door::text,"
        " 'revision', u.current_revision, 'digest', u.digest) END)::text"
    )
    return statement(
        "resolve",
        f"WITH u AS (UPDATE review_tasks SET status = '{step.status_after().value}',"
        " decision = :decision::varchar, notes = :notes::text,"
        " resolution_payload = :payload::text, change_request = :change_request::text,"
        " operator_id = :actor::text,"
        " resolved_at = :now::timestamptz,"
        f" approved_revision = CASE WHEN {approved} THEN current_revision"
        " ELSE approved_revision END,"
        f" approved_digest = CASE WHEN {approved} THEN digest ELSE approved_digest END,"
        f" approver_key_id = CASE WHEN {approved} THEN :key_id::uuid ELSE approver_key_id END,"
        f" approval_expires_at = CASE WHEN {approved} AND current_revision IS NOT NULL"
        f" AND {ttl} IS NOT NULL THEN :now::timestamptz + make_interval(secs => {ttl})"
        " ELSE approval_expires_at END, "
        + _BUMP
        + " WHERE id = :task_id::uuid AND "
        + guard_sql(step)
        + " AND ((current_revision IS NULL AND :revision::int IS NULL)"
        " OR (current_revision = :revision::int AND digest = :digest::varchar))"
        f" AND (NOT {needs_subject} OR current_revision IS NOT NULL)"
        f" AND (NOT {producer_barred} OR producer_id <> :actor::text)"
        " RETURNING review_tasks.*), " + _record(step, "u", details) + " SELECT * FROM u",
    )


def _task_conflict() -> Statement:
    """Which task refused an escalation (the unique rules of ``review_tasks``): the task
    with its id if there is one, else the entity's active task (the predicate of
    ``uq_review_tasks_active_entity``); its id, producer, and which rule it was."""
    return statement(
        "task_conflict",
        "(SELECT id, producer_id, true AS same_id FROM review_tasks WHERE id = :t_id::uuid)"
        " UNION ALL (SELECT id, producer_id, false FROM review_tasks"
        " WHERE entity_type = :entity_type::text AND entity_id = :entity_id::text AND "
        + _statuses(ACTIVE_STATUSES)
        + " LIMIT 1) ORDER BY same_id DESC LIMIT 1",
    )


ESCALATE = _escalate()
TASK_CONFLICT = _task_conflict()
CLAIM = _claim()
#: By the filters a claim-next has: (entity type, reason code, the caller's groups).
CLAIM_NEXT: dict[tuple[bool, bool, bool], Statement] = {
    (e, r, g): _claim_next(entity_type=e, reason_code=r, groups=g)
    for e in (False, True)
    for r in (False, True)
    for g in (False, True)
}


def claim_next_statement(
    *, entity_type: str | None, reason_code: str | None, groups: list[str] | None
) -> Statement:
    """The claim-next statement for these filters (``groups`` ``None``: any group)."""
    return CLAIM_NEXT[(entity_type is not None, reason_code is not None, groups is not None)]


RENEW = _held_change(
    Action.RENEW, "lease_expires_at = :lease_expires_at::timestamptz, ", limited=True
)
RELEASE = _held_change(
    Action.RELEASE, "claimed_by = NULL, lease_token_hash = NULL, lease_expires_at = NULL, "
)
RESOLVE = _resolve()


async def run(database: Statements, stmt: Statement, values: Mapping[str, Any]) -> Any:
    """Execute ``stmt`` with ``values`` (by name) as one transaction; its first row."""
    rows = await database.one_statement(stmt.sql, *stmt.args(values))
    return rows[0] if rows else None
