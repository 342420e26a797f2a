"""A throwaway PostgreSQL cluster for tests: initdb into a temp dir, ``postgres`` on 127.0.0.1 on
a free port, run as a non-root user (the server refuses root: ``nobody`` when the tests run as
root), password authentication (scram-sha-256) so tests can pass credentials by URL, environment
or password file. ``restart`` stops and starts it on the same port (a connection-loss test);
``stop`` at teardown. Installed by tests/support/install_postgres.py.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg

USER = "ccotel"
RUN_AS = "nobody"


def bin_dir() -> str | None:
    """Debian's PostgreSQL server programs (the highest version installed), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return os.path.dirname(found[-1])
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb and shutil.which("pg_ctl") else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    def __init__(self) -> None:
        bins = bin_dir()
        if bins is None:
            raise RuntimeError("PostgreSQL is not installed: run python -m tests.support.install_postgres")
        self.bin = bins
        self.tmp = tempfile.mkdtemp(prefix="ccotel-pg-")
        os.chmod(self.tmp, 0o755)
        self.data = os.path.join(self.tmp, "data")
        self.sockets = os.path.join(self.tmp, "sock")
        self.log = os.path.join(self.tmp, "postgres.log")
        self.port = _free_port()
        self.password = secrets.token_urlsafe(18)
        self._as: list[str] = []
        if os.geteuid() == 0:
            self._as = ["runuser", "-u", RUN_AS, "--"]
        os.makedirs(self.sockets)
        pwfile = os.path.join(self.tmp, "pw")
        Path(pwfile).write_text(self.password + "\n")
        Path(self.log).touch()
        if self._as:
            uid = pwd.getpwnam(RUN_AS).pw_uid
            for p in (self.sockets, pwfile, self.log):
                os.chown(p, uid, -1)
            os.makedirs(self.data, mode=0o700)
            os.chown(self.data, uid, -1)
        subprocess.run(self._as + [f"{self.bin}/initdb", "-D", self.data, "-U", USER, "--auth=scram-sha-256",
                                   f"--pwfile={pwfile}", "-E", "UTF8", "--no-sync"],
                       check=True, capture_output=True, timeout=120)
        os.unlink(pwfile)
        self.start()

    @property
    def url(self) -> str:
        """The admin URL, password included."""
        return self.url_for("postgres")

    def url_for(self, db: str, password: bool = True) -> str:
        secret = f":{self.password}" if password else ""
        return f"postgresql://{USER}{secret}@127.0.0.1:{self.port}/{db}"

    def start(self) -> None:
        opts = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.sockets} -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=50")
        subprocess.run(self._as + [f"{self.bin}/pg_ctl", "-D", self.data, "-l", self.log, "-o", opts, "-w", "-t",
                                   "60", "start"], check=True, capture_output=True, timeout=90)

    def stop(self, mode: str = "fast") -> None:
        subprocess.run(self._as + [f"{self.bin}/pg_ctl", "-D", self.data, "-m", mode, "-w", "-t", "60", "stop"],
                       check=False, capture_output=True, timeout=90)

    def restart(self, down_s: float = 0.0) -> None:
        """Stop (every connection is cut), stay down ``down_s``, start again on the same port."""
        self.stop()
        time.sleep(down_s)
        self.start()

    def create_db(self, name: str) -> str:
        """A fresh database; its URL (with the password)."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url_for(name)

    def close(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.tmp, ignore_errors=True)


def running_server() -> Iterator[PostgresServer]:
    """A throwaway cluster for a test module (``pytest.fixture(scope="module")(running_server)``);
    not installed: skipped with the install command, or failed under CI."""
    from tests.support.fixtures import missing_component

    if bin_dir() is None:
        missing_component("PostgreSQL not installed: run python -m tests.support.install_postgres")
    server = PostgresServer()
    try:
        yield server
    finally:
        server.close()
