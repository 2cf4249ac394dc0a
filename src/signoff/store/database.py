"""The runtime's database under its former path, still imported by the command line;
it lives in :mod:`signoff.store.runtime.database`."""

from signoff.store.runtime.database import Database, create_engine

__all__ = ["Database", "create_engine"]
