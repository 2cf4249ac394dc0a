"""What runs the queries in a process: the engine, pool and unit of work, the SQLite
thread, group commit, LISTEN/NOTIFY, the API key cache, outage detection and migrations.
See :mod:`signoff.store`."""
