"""A throw-away PostgreSQL cluster that a test owns: created with ``initdb`` in a temporary
directory, served on its own loopback port, and stopped, restarted or killed at will —
never the shared server the other tests use.

Needs the server binaries (``/usr/lib/postgresql/*/bin`` on Debian, or ``pg_ctl`` on the
``PATH``). PostgreSQL refuses to run as root, so as root the cluster runs as the
``postgres`` user.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg


def server_binaries() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``, newest version first."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]), reverse=True
    )
    for candidate in found:
        if (Path(candidate) / "pg_ctl").exists():
            return Path(candidate)
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Cluster:
    """One cluster: :meth:`start`, :meth:`stop` (``fast`` disconnects every client,
    ``immediate`` is a crash), :meth:`url` of a database in it."""

    def __init__(self, binaries: Path) -> None:
        self.binaries = binaries
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="signoff-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._user = "postgres" if os.geteuid() == 0 else None
        if self._user is not None:
            entry = pwd.getpwnam(self._user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-N", "-E",
                  "UTF8", "--locale=C")  # fmt: skip

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.binaries / tool), *args]
        if self._user is not None:
            command = ["runuser", "-u", self._user, "--", *command]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def start(self) -> None:
        # fsync=off only skips flushing to the disk: the machine does not crash in these
        # tests, a killed server's writes are in the OS's cache. Commits still wait for
        # their WAL to be written (synchronous_commit stays on), so an acknowledged
        # commit survives an immediate stop.
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c full_page_writes=off -c max_connections=200"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
                  "-o", options, "start")  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A new empty database in this cluster; returns its URL."""

        async def create() -> None:
            connection = await asyncpg.connect(self.url())
            try:
                await connection.execute(f'CREATE DATABASE "{name}"')
            finally:
                await connection.close()

        asyncio.run(create())
        return self.url(name)

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            if self.running():
                self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def own_cluster() -> Iterator[Cluster]:
    binaries = server_binaries()
    if binaries is None:
        raise RuntimeError("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    cluster = Cluster(binaries)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()
