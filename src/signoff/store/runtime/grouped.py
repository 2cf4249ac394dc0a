"""Group commit of escalations on PostgreSQL.

An escalation that arrives while this process is writing others waits for the next
trip, and that trip takes every escalation waiting (at most the group size): one call
of a PL/pgSQL function that runs :data:`signoff.store.oneshot.ESCALATE` — the same
statement text, its ``$n`` placeholders read from each escalation's JSON item, or for
the JSON texts (:data:`TEXT_PARAMS`) from one text beside the items — once per
escalation, in order, in one transaction. What a group saves is the cost each statement
pays once: a pool checkout, a round trip, the driver's encoding of 52 parameters, and a
commit. Measured with 16 concurrent producers on two cores: a group of 8 cost the caller
37 µs instead of 118 µs per escalation and PostgreSQL 172 µs instead of 245 µs.

The rules a lone statement keeps are kept per escalation:

- **Each one commits or refuses alone.** Each escalation runs in its own subtransaction
  (a ``BEGIN … EXCEPTION`` block): a unique rule that refuses its task (the same id, or
  an active task for the entity) undoes its key too and reports it as refused
  (:class:`TaskRefused`); the others of the group commit.
- **In order.** A later escalation of a group sees the earlier ones, as if they had run
  one after another: the same key twice is a replay of the first (or
  ``ERR_IDEMPOTENCY_KEY_REUSED``), the same entity twice refuses the second.
- **No waiting while holding others' rows.** An escalation that waits more than
  :data:`LOCK_WAIT` for a row another transaction holds (its key or its entity, being
  written by another process, or held by any session) is undone and written alone once
  its group has committed. A group therefore never waits on others while it holds the
  rows of its earlier escalations: it cannot deadlock with another group or with a lone
  statement (which takes one key, then one task), and a lock that is never released
  holds up one escalation, as it would alone, not its group and the lane behind it.
- **Anything else that fails the group** — the connection lost, the function missing —
  sends each of its escalations again alone, as its own statement. That is safe to
  repeat: an escalation whose group did commit is answered from its key, as a replay.

Each process writes at most :data:`LANES` groups at a time; the next group of a lane
gathers while its last one is written. An entity's escalations always take the same
lane. A group holds at most :data:`MAX_GROUP` escalations: a transaction keeps up to 64
subtransaction ids where other sessions' snapshots can see them, and beyond that every
snapshot check has to look further.

The function is created by a migration, under a name that carries its revision
(:data:`FUNCTION`): a version of Signoff calls only the function its own escalation
statement matches, and a migration that changes the statement creates a new function
under a new name (``tests/integration/test_group_function.py`` holds the migrated
function equal to :func:`definition`, and fails until there is one). It is called by its
schema-qualified name, and only if the role Signoff connects as owns it and may execute
it: where PUBLIC may create in the schema, another role could create a function of that
name first (the name is in the source). When it is missing or not this role's to call,
the process says so once (the ``group_commit.unavailable`` log line, the
``signoff_group_commit_enabled`` gauge at 0) and writes each escalation alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Literal

import asyncpg
import orjson
import structlog

from signoff.metrics import GROUP_COMMIT_ENABLED
from signoff.store.oneshot import ESCALATE, JSON_COLUMNS, TASK_CONFLICT, Statement
from signoff.store.refused import TaskRefused
from signoff.store.runtime.availability import database_unavailable

log = structlog.get_logger("signoff.store.runtime.grouped")

#: The most escalations one group writes (and the largest group size a setting may ask).
MAX_GROUP = 32

#: Groups written at once per process. An entity's escalations always take the same
#: lane, so two groups of one process never wait on each other for an entity.
LANES = 2

RunStatement = Callable[..., Awaitable[list[asyncpg.Record]]]


_OUT = (
    "item_no int, created bigint, request_fingerprint varchar, task_id uuid,"
    " response_status int, response_body text, expires_at timestamptz, refused boolean,"
    " refusing_id uuid, refusing_producer text, refusing_same_id boolean, busy boolean"
)

#: The longest an escalation in a group waits for a row lock held by another transaction
#: (a key or an entity that another process is writing, or a session holds): then it is
#: undone and written alone after its group. A group therefore never waits on others
#: while holding its earlier escalations' rows — no deadlock with another group or a
#: lone statement, and a stuck lock holds up one escalation, not a group and its lane.
LOCK_WAIT = "10ms"


#: The parameters that carry JSON text (the response, the event, the task's documents).
#: They travel beside the items, ``len(TEXT_PARAMS)`` per escalation, in one text joined
#: by :data:`SEPARATOR` that the function splits once into its ``texts`` array: inside the
#: items' JSON each would be a string whose every quote is escaped, which PostgreSQL then
#: unescaped character by character (7 % of the function's time). (Not a text array
#: parameter: asyncpg checks each element of one against abstract base classes, in
#: Python: 58 such checks for a group of four; without them the driver's CPU per call
#: fell from 86–88 µs to 64–74 µs.)
TEXT_PARAMS: tuple[str, ...] = tuple(
    name
    for name in ESCALATE.params
    if name in ("response", "payload", "details") or name.removeprefix("t_") in JSON_COLUMNS
)


#: The other parameters, in the order of each escalation's item: a JSON array, read by
#: position (a JSON object would repeat every name in every item, and each lookup would
#: search it).
ITEM_PARAMS: tuple[str, ...] = tuple(name for name in ESCALATE.params if name not in TEXT_PARAMS)
_item = itemgetter(*ITEM_PARAMS)


def _read_from_item(stmt: Statement, names: Mapping[str, str] | None = None) -> str:
    """``stmt``'s text with each ``$n`` read from the loop's ``item`` (``names`` renames a
    parameter to one of :data:`ITEM_PARAMS`), or from ``texts`` for :data:`TEXT_PARAMS`."""
    sql = stmt.sql
    for number, name in reversed(list(enumerate(stmt.params, 1))):
        key = (names or {}).get(name, name)
        if key in TEXT_PARAMS:
            value = f"texts[item_no * {len(TEXT_PARAMS)} + {TEXT_PARAMS.index(key) + 1}]"
        else:
            value = f"(item->>{ITEM_PARAMS.index(key)})"
        sql = re.sub(rf"\${number}(?!\d)", value, sql)
    return sql


#: Between two texts: the ASCII record separator, which compact JSON text never holds
#: (JSON escapes every control character inside its strings). A NULL is an empty text,
#: which no JSON text is.
SEPARATOR = "\x1e"


def group_arguments(group: list[Mapping[str, Any]]) -> tuple[str, str]:
    """The function's two arguments for ``group``: the items as JSON (arrays of
    :data:`ITEM_PARAMS`) and their texts, escalation by escalation, joined.

    Raises:
        ValueError: a text is empty or holds the separator (not JSON text as Signoff
            writes it): the group is then written escalation by escalation.
    """
    items: list[tuple[Any, ...]] = []
    texts: list[str] = []
    for values in group:
        items.append(_item(values))
        for name in TEXT_PARAMS:
            text = values[name]
            if text is None:
                text = ""
            elif not text or SEPARATOR in text:
                raise ValueError(f"{name} cannot travel in a group")
            texts.append(text)
    return orjson.dumps(items, option=orjson.OPT_NAIVE_UTC).decode(), SEPARATOR.join(texts)


def _function_body(stmt: Statement) -> str:
    """ESCALATE read from ``item``, its row numbered: ``RETURN QUERY`` needs the
    data-modifying ``WITH`` at its top level."""
    sql = _read_from_item(stmt)
    head, select_list = " SELECT (SELECT count(*) FROM t) AS created,", " k.expires_at FROM"
    if sql.count(head) != 1 or sql.count(select_list) != 1:
        raise RuntimeError("the escalation statement changed shape: update store.grouped")
    sql = sql.replace(head, " SELECT item_no, (SELECT count(*) FROM t) AS created,")
    return sql.replace(
        select_list, " k.expires_at, false, NULL::uuid, NULL::text, NULL::boolean, false FROM"
    )


def _refused() -> str:
    """After a refusal: which task refused it (TASK_CONFLICT, from the escalation's own
    task)."""
    conflict = _read_from_item(
        TASK_CONFLICT, {"entity_type": "t_entity_type", "entity_id": "t_entity_id"}
    )
    return (
        "SELECT item_no, 0::bigint, NULL::varchar, NULL::uuid, NULL::int, NULL::text,"  # noqa: S608
        " NULL::timestamptz, true, c.id, c.producer_id, c.same_id, false FROM (SELECT 1) AS one"
        f" LEFT JOIN ({conflict}) AS c ON true"
    )


#: An escalation that waited too long for a lock: undone, to be written alone.
_BUSY = (
    "SELECT item_no, 0::bigint, NULL::varchar, NULL::uuid, NULL::int, NULL::text,"
    " NULL::timestamptz, false, NULL::uuid, NULL::text, NULL::boolean, true"
)

#: The function this version calls, named after the migration that created it: a
#: migration that changes the function creates it under its own revision's name, so
#: processes of the version before keep calling the one their statement matches.
FUNCTION = "signoff_escalate_group_0020"
#: The function's argument types.
SIGNATURE = "(jsonb, text)"


def definition(name: str = FUNCTION) -> str:
    """The function's definition as this version's escalation statement makes it: what
    its migration must have created (``name`` is a constant here or in a test, never
    input)."""
    return (
        f"CREATE FUNCTION {name}(items jsonb, joined text) RETURNS TABLE ({_OUT})"  # noqa: S608
        f" LANGUAGE plpgsql VOLATILE SET lock_timeout = '{LOCK_WAIT}'"
        " AS $fn$\n#variable_conflict use_column\n"
        "DECLARE item jsonb; item_no int := 0;\n"
        "  texts text[] := string_to_array(joined, chr(30), '');\nBEGIN\n"
        "  FOR item IN SELECT value FROM jsonb_array_elements(items) LOOP\n"
        f"    BEGIN\n      RETURN QUERY {_function_body(ESCALATE)};\n"
        "    EXCEPTION WHEN unique_violation THEN\n"
        f"      RETURN QUERY {_refused()};\n"
        "    WHEN lock_not_available OR deadlock_detected THEN\n"
        f"      RETURN QUERY {_BUSY};\n    END;\n"
        "    item_no := item_no + 1;\n  END LOOP;\nEND\n$fn$"
    )


#: Where the function is, who owns it, and whether this role owns it and may execute it.
#: A function of that name owned by anyone else (planted where PUBLIC may create) is
#: never called.
FIND_FUNCTION = (
    "SELECT n.nspname, pg_get_userbyid(p.proowner) AS owner,"  # noqa: S608
    " p.proowner = (SELECT oid FROM pg_roles WHERE rolname = current_user) AS ours,"
    " has_function_privilege(p.oid, 'EXECUTE') AS executable"
    " FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace"
    f" WHERE p.oid = to_regprocedure('{FUNCTION}{SIGNATURE}')"
)


def call_sql(schema: str) -> str:
    """The call of the function in ``schema`` (quoted as an identifier)."""
    quoted = '"' + schema.replace('"', '""') + '"'
    return f"SELECT * FROM {quoted}.{FUNCTION}($1::jsonb, $2::text)"  # noqa: S608


@dataclass
class _Waiting:
    values: Mapping[str, Any]
    answer: asyncio.Future[Mapping[str, Any]]


@dataclass
class _Lane:
    """Escalations waiting for their lane's next group, and the lane's writer."""

    queue: list[_Waiting] = field(default_factory=list)
    writer: asyncio.Task[None] | None = None


class EscalationGroups:
    """This process's escalations on PostgreSQL, written in groups. ``run`` runs one
    statement as a whole transaction
    (:meth:`signoff.store.runtime.database.Database.one_statement`); ``size`` is the most
    escalations a group takes (1: each alone)."""

    def __init__(self, run: RunStatement, *, size: int = MAX_GROUP, lanes: int = LANES) -> None:
        self._run = run
        self.size = max(1, min(size, MAX_GROUP))
        self._lanes = [_Lane() for _ in range(max(1, lanes))]
        #: The call of the function; ``None``: not looked for yet; ``False``: groups off.
        self._function: str | Literal[False] | None = None
        self._looking = asyncio.Lock()
        #: The kinds of group failure logged since a group was last written: each is
        #: logged once, not once per group or per escalation.
        self._failing: set[str] = set()
        self.checking: asyncio.Task[bool] | None = None
        """The look for the function that :meth:`start` began (a start-up's)."""

    def start(self) -> None:
        """Look for the function now, in the background (at start-up): a process that
        will write each escalation alone says so before its first escalation."""
        if self.checking is None:
            self.checking = asyncio.create_task(self.check(), name="signoff-group-commit-check")

    async def check(self) -> bool:
        """Whether escalations are written in groups, the function looked for unless it
        was already (and the ``group_commit`` log line and gauge set). A database that
        cannot be reached leaves the looking to the first group."""
        if self.size == 1:
            GROUP_COMMIT_ENABLED.set(0)
            log.info("group_commit.unavailable", reason="group_size_1", function=FUNCTION)
            return False
        try:
            return await self._call() is not None
        except Exception as exc:
            if not database_unavailable(exc):
                log.warning(
                    "group_commit.check_failed", error=type(exc).__name__, detail=str(exc)[:200]
                )
            return False

    async def close(self) -> None:
        """Stop the start-up look if it still runs."""
        if self.checking is not None and not self.checking.done():
            self.checking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.checking

    async def escalate(self, values: Mapping[str, Any]) -> Mapping[str, Any]:
        """Run ESCALATE with ``values`` (by name) in the next group; its row (the columns
        of :data:`~signoff.store.oneshot.ESCALATE`'s). Raises :class:`TaskRefused`."""
        if self.size == 1 or self._function is False:
            return await self._alone(values)
        answer: asyncio.Future[Mapping[str, Any]] = asyncio.get_running_loop().create_future()
        entity = (values["t_entity_type"], values["t_entity_id"])
        lane = self._lanes[hash(entity) % len(self._lanes)]
        lane.queue.append(_Waiting(values, answer))
        if lane.writer is None:
            lane.writer = asyncio.create_task(self._write(lane), name="signoff-escalation-groups")
        return await answer

    async def _alone(self, values: Mapping[str, Any]) -> Mapping[str, Any]:
        try:
            rows = await self._run(ESCALATE.sql, *ESCALATE.args(values))
        except asyncpg.UniqueViolationError:
            raise TaskRefused from None
        row: Mapping[str, Any] = rows[0]
        return row

    async def _write(self, lane: _Lane) -> None:
        try:
            while lane.queue:
                group = [w for w in lane.queue[: self.size] if not w.answer.done()]
                del lane.queue[: self.size]
                try:
                    await self._write_group(group)
                except BaseException:  # cancelled: nobody of this group waits forever
                    for waiting in group:
                        waiting.answer.cancel()
                    raise
        finally:
            lane.writer = None
            for waiting in lane.queue:  # only left when the writer itself was cancelled
                waiting.answer.cancel()
            lane.queue.clear()

    async def _write_group(self, group: list[_Waiting]) -> None:
        rows: list[asyncpg.Record] | None = None
        if len(group) > 1:
            try:
                call = await self._call()
                if call is not None:
                    items, joined = group_arguments([w.values for w in group])
                    rows = sorted(await self._run(call, items, joined), key=lambda r: r["item_no"])
            except Exception as exc:
                self._failed(exc, len(group))
        if rows is None or len(rows) != len(group):
            await asyncio.gather(*(self._answer_alone(w) for w in group))
            return
        self._failing.clear()
        busy = []
        for waiting, row in zip(group, rows, strict=True):
            if waiting.answer.done():
                continue
            if row["busy"]:  # it waited too long for a lock: written alone, now
                busy.append(waiting)
            elif row["refused"]:
                refusing = None
                if row["refusing_id"] is not None:
                    refusing = {
                        "id": row["refusing_id"],
                        "producer_id": row["refusing_producer"],
                        "same_id": row["refusing_same_id"],
                    }
                waiting.answer.set_exception(TaskRefused(refusing, looked=True))
            else:
                waiting.answer.set_result(row)
        if busy:
            await asyncio.gather(*(self._answer_alone(w) for w in busy))

    def _failed(self, exc: Exception, escalations: int) -> None:
        """A group that could not be written as one (its escalations go alone)."""
        if isinstance(exc, asyncpg.UndefinedFunctionError):
            self._off("missing", str(exc))  # dropped, or a database not migrated
            return
        if isinstance(exc, asyncpg.InsufficientPrivilegeError):
            self._off("not_executable", str(exc))  # EXECUTE revoked
            return
        kind = type(exc).__name__
        if kind not in self._failing:
            self._failing.add(kind)
            log.warning(
                "group_commit.failed", escalations=escalations, error=kind, detail=str(exc)[:200]
            )

    async def _answer_alone(self, waiting: _Waiting) -> None:
        try:
            row = await self._alone(waiting.values)
        except BaseException as exc:
            if not waiting.answer.done():
                waiting.answer.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        else:
            if not waiting.answer.done():
                waiting.answer.set_result(row)

    async def _call(self) -> str | None:
        """The statement that calls the function, once it is known to be this role's own;
        ``None`` when groups are off."""
        if self._function is None:
            async with self._looking:
                if self._function is None:
                    await self._find_function()
        return self._function or None

    async def _find_function(self) -> None:
        rows = await self._run(FIND_FUNCTION)
        if not rows:
            self._off("missing", f"no {FUNCTION}{SIGNATURE}: not migrated, or dropped")
        elif not rows[0]["ours"]:
            self._off("not_owner", f"{FUNCTION} belongs to role {rows[0]['owner']}")
        elif not rows[0]["executable"]:
            self._off("not_executable", f"this role may not execute {FUNCTION}")
        else:
            self._function = call_sql(rows[0]["nspname"])
            GROUP_COMMIT_ENABLED.set(1)
            log.info("group_commit.enabled", function=FUNCTION, schema=rows[0]["nspname"])

    def _off(self, reason: str, detail: str) -> None:
        """Groups off for the rest of this process's life, said once, loudly."""
        if self._function is not False:
            log.warning(
                "group_commit.unavailable", reason=reason, function=FUNCTION, detail=detail[:200]
            )
        GROUP_COMMIT_ENABLED.set(0)
        self._function = False
