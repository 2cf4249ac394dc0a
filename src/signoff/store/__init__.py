"""Storage: the schema, the queries, and the runtime that runs them.

Two kinds of module live here, kept apart:

- **Queries** (this package's modules and :mod:`signoff.store.writes`): the tables
  (``tables``), one module per subject (``tasks``, ``approvals``, ``waiting``,
  ``webhooks``, ``users``, ``keys``, ``trail``, ``inbox``, ``idempotency``,
  ``supervision``, ``secrets``), the hot path's one-step statements (``oneshot``) and
  SQLite scripts (``lite``), the engines' write paths (``writes``), and ``batch``, which
  only builds the ``MATERIALIZED`` CTE a batch claim selects from: SQL, so it stays with
  the queries that use it. A query takes a connection and answers; it holds no state.
- **Runtime** (:mod:`signoff.store.runtime`): what runs the queries in a process — the
  engine, pool and unit of work (``database``), the SQLite thread (``litethread``),
  group commit of escalations (``grouped``), LISTEN/NOTIFY (``listen``, ``announce``,
  ``changes``), the API key cache (``keycache``), what counts as an outage
  (``availability``) and migrations (``migrate``).

The queries and write paths use the runtime only through the protocols of
``protocols`` (a unit of work, a statement runner, the database the write paths need);
``writes.assemble`` chooses an engine's write path, and the runtime's database calls it,
so no query module imports the runtime, not even for its type hints.

The services use both; the API, console and workers reach the queries only through the
services, and are handed the runtime's ``Database`` (they may import the runtime to
build it or to tell an outage from a bug). ``pyproject.toml``'s import-linter contracts
hold these rules.
"""
