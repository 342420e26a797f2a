"""A fleet host's lock and its lease on claims (PostgreSQL): what ``run`` and ``backfill`` hold
for their life (``lock_host``), as statedir.DirLock on one machine.

The lock: ``pg_try_advisory_lock`` on a connection of the lock's own, so two ccotel with one host
id cannot both send and count its spans. The lease: the host's ``hosts.lease_until``, renewed on
that connection; other hosts take over the spans this host claimed and did not deliver once it
ran out (postgres.py, ``claim``). Renewed by this process's own thread, not the pipeline's, so a
long read or commit never lets it lapse while the process lives.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import psycopg

from ccotel.store.postgres import connect, masked, migrate, scrub
from ccotel.store.state import DEFAULT_CLAIM_LEASE_S, StateLocked, StateUnavailable

__all__ = ["HostLock", "lock_host"]

log = logging.getLogger("ccotel.state")


class HostLock:
    """This host id's session lock in PostgreSQL (``pg_try_advisory_lock``), held on a
    connection of its own for the life of the process: two ccotel with one host id would send
    and count the same spans, as two on one state dir would (statedir.DirLock). The same
    connection renews the host's lease on its claims (every quarter of ``lease_s``, from a thread
    of its own, so a long read or commit never lets it lapse); a lost connection is opened
    again, the lock taken again."""

    def __init__(self, url: str, host: str, conn: psycopg.Connection[Any], lease_s: float) -> None:
        self.path = masked(url)
        self.url = url
        self.host = host
        self.lease_s = lease_s
        self._conn: psycopg.Connection[Any] | None = conn
        self._stop = threading.Event()
        self._taken: str | None = None  # why this process must stop: its host id taken by another
        self._renewer = threading.Thread(target=self._renew_until_released, name="ccotel-lease", daemon=True)
        self._renewer.start()

    def _renew_until_released(self) -> None:
        failing = False
        while not self._stop.wait(self.lease_s / 4):
            try:
                if self._conn is None or self._conn.closed or self._conn.broken:
                    self._close()
                    self._conn = connect(self.url)
                    if not _try_lock(self._conn, self.host):
                        self._taken = (f"the host id {self.host!r} was taken by another ccotel while the state "
                                       f"{self.path} was away: two would send and count the same spans")
                        log.error("%s", self._taken)
                _renew(self._conn, self.host, self.lease_s)
                if failing:
                    log.warning("lease of host %r on its claims renewed again", self.host)
                failing = False
            except psycopg.Error as exc:
                self._close()
                if not failing:
                    log.error("lease of host %r on its claims not renewed (%s): after %.0f s other hosts take over "
                              "the spans it claimed and has not delivered", self.host,
                              scrub(str(exc).strip(), self.url), self.lease_s)
                failing = True

    def check(self) -> str | None:
        """Why this process must stop (its host id taken by another ccotel while the connection
        was lost), else None: the advisory lock lives with its connection, nothing on disk to take."""
        return self._taken

    def _close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg.Error:
                pass
            self._conn = None

    def release(self) -> None:
        """Stop renewing and let the lock go. The lease is left to run out: a restart within it
        keeps this host's claims, and after it other hosts take over what it did not deliver."""
        self._stop.set()
        if self._renewer.is_alive() and self._renewer is not threading.current_thread():
            self._renewer.join(5.0)
        self._close()


def _try_lock(conn: psycopg.Connection[Any], host: str) -> bool:
    row = conn.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (f"ccotel host {host}",)).fetchone()
    return bool(row and row[0])


def _renew(conn: psycopg.Connection[Any], host: str, lease_s: float) -> None:
    """The host's lease runs until ``lease_s`` from now (the server's clock: hosts' clocks may differ)."""
    conn.execute("UPDATE ccotel.hosts SET lease_until = now() + make_interval(secs => %s) WHERE host = %s",
                 (lease_s, host))


def lock_host(url: str, host: str, lease_s: float = DEFAULT_CLAIM_LEASE_S) -> HostLock:
    """This host id for this process (StateLocked if another ccotel has it), with its lease
    on claims renewed until ``release``."""
    where = masked(url)
    try:
        conn = connect(url)
        locked = _try_lock(conn, host)
        if locked:
            migrate(conn, where)  # the lease's column (the state opened next migrates too)
            conn.execute("INSERT INTO ccotel.hosts (host) VALUES (%s) ON CONFLICT (host) DO NOTHING", (host,))
            _renew(conn, host, lease_s)
    except psycopg.Error as exc:
        raise StateUnavailable(f"the state {where} cannot be used ({scrub(str(exc).strip(), url)})") from None
    if not locked:
        conn.close()
        raise StateLocked(f"another ccotel is using the host id {host!r} in the state {where}; two cannot share one "
                          f"(each would send and count the same spans): stop it first, or give this one its own "
                          f"--host-id", None)
    return HostLock(url, host, conn, lease_s)
