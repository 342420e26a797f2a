"""The state over PostgreSQL: one state for a fleet of hosts (``--state postgresql://...``).

The state interface (``State``, state.py) that the SQLite state (sqlite.py) has too, for hosts
that share sessions: a session moves from host A to host B with its synced transcript files, or
two hosts read one shared file system. What is whose:

- per host (its id, ``--host-id``): the file checkpoints (``files``), the acknowledged ids of
  turns still open (``acked_ids``), the counter totals (``counters``: each host serves its own
  Prometheus counters, and the fleet's value of a counter is their sum) and the caught-up mark
  (each host's first catch-up is history it does not count);
- shared, keyed by transcript content: ``claims`` (span id -> the host that sends and counts
  that span), the digests of calls and prompts (``calls``, ``prompts``), the marks of one-off
  events (``marks``) and the usage ledger (schema ``ccotel_ledger``, see postgres_ledger.py).

Who sends and counts a span: span ids are derived from session ids, uuids, message ids and
tool_use ids (spans/ids.py), so a synced copy of a file builds the same ids on every host. Before a
host sends a span it inserts the id into ``claims``; the primary key lets one insert win, and
only the host whose row it is sends it and counts it in its metrics. Nothing else coordinates
the hosts: no lock of ours, only unique keys and transactions.

Leases: a claim is ``done`` once its host committed the span's acknowledgement (the same
transaction as its checkpoint). Until then it is held by its host's lease (``hosts.lease_until``,
the server's clock), which the process holding the host lock renews (``HostLock``, every quarter
of the lease). A claim not done whose host's lease ran out is taken over by the next host that
claims the span (one ``INSERT .. ON CONFLICT DO UPDATE``: the row lock lets one taker win). A host
that lost a claim to one not done yet holds the span (``Claimed.elsewhere``, delivery.py) and
claims it again until it is done or its own. Claims written before leases existed are done.

Bounded as the SQLite state: every shared row carries the anchor of the (host, file) it was read
from (``digest64("<host id>:<file anchor>")``) and goes when that host's file goes.

Faults: each commit is one transaction that also writes its writer's commit number (``writers``:
one row per open state, so per process: a host's catch-up workers write its state at once), so a
commit whose answer was lost with the connection is looked up after reconnecting, never written
twice (counters are increments) nor dropped because another writer of the host moved on; claims
are idempotent for their host. A lost connection is opened
again on the next use; ``claim`` waits for the server (the pipeline does not send what no host
may have claimed). Credentials come from libpq's usual places only: the URL, the PG* variables,
``~/.pgpass`` or ``$PGPASSFILE``; logs name the URL without its password, and error texts are
scrubbed of it.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict

from ccotel.assemble.digests import digest64
from ccotel.read.tail import FileIdentity, Marker
from ccotel.store.postgres_schema import MIGRATIONS, SCHEMA_VERSION
from ccotel.store.state import (
    Claimed,
    Commit,
    StateError,
    StateUnavailable,
    anchor_of,
    signed64,
    unpack_ids,
    unsigned64,
)

__all__ = ["PgState", "masked", "scrub", "connect", "migrate", "Link"]

log = logging.getLogger("ccotel.state")

T = TypeVar("T")

CAUGHT_UP = "caught_up"  # detectors.CAUGHT_UP: a host's own first catch-up, kept per host
READ_RETRY_S = 30.0  # reads at start wait this long for the server before giving up
_MIGRATION_LOCK = 0x63636F74656C  # "ccotel": pg_advisory_xact_lock key, so two hosts never migrate at once

# A dead process's writer row goes this long after its last commit (lost answers settle far sooner).
WRITER_KEPT = "7 days"



def masked(url: str) -> str:
    """The URL as logs show it: user, host, port and database, never the password."""
    try:
        d = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "postgresql://(an invalid URL)"
    user = f"{d['user']}@" if d.get("user") else ""
    port = f":{d['port']}" if d.get("port") else ""
    return f"postgresql://{user}{d.get('host') or ''}{port}/{d.get('dbname') or ''}"


def _secrets(url: str) -> list[str]:
    """Every form the URL's password can take in a message, longest first: as libpq parsed it,
    and, found by hand (libpq refuses a URL with a space or a bad escape such as %ZZ or %00 and
    quotes the token as written), as written in the user info or a ``password=`` parameter and
    percent-decoded."""
    found: set[str] = set()
    try:
        pw = conninfo_to_dict(url).get("password")
        if pw:
            found.add(str(pw))
    except psycopg.ProgrammingError:
        pass
    rest = url.partition("://")[2]
    authority, _sep, query = rest.partition("?")
    userinfo, at, _host = authority.rpartition("@")  # the last @: an unescaped one may be in the password
    if at and ":" in userinfo:
        found.add(userinfo.partition(":")[2])
    for param in query.split("&"):
        key, eq, value = param.partition("=")
        if eq and urllib.parse.unquote(key) == "password":
            found.add(value)
    for raw in list(found):
        found.add(urllib.parse.unquote(raw))
        found.add(urllib.parse.unquote(raw.replace("+", " ")))
    return sorted((f for f in found if f), key=len, reverse=True)


def scrub(text: str, url: str) -> str:
    """An error text without the URL's password, in any form it takes (``_secrets``)."""
    for secret in _secrets(url):
        text = text.replace(secret, "***")
    return text


def connect(url: str) -> psycopg.Connection[Any]:
    """A connection with autocommit (transactions are explicit), keepalives so a dead server is
    noticed, and a bounded connect time. Credentials: the URL, PG* variables, the password file."""
    return psycopg.connect(url, autocommit=True, connect_timeout=5, application_name="ccotel",
                           keepalives=1, keepalives_idle=10, keepalives_interval=5, keepalives_count=3)


def migrate(conn: psycopg.Connection[Any], where: str) -> None:
    """Bring the schema to SCHEMA_VERSION, in one transaction that hosts take in turn."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        conn.execute("CREATE SCHEMA IF NOT EXISTS ccotel")
        conn.execute("CREATE TABLE IF NOT EXISTS ccotel.meta (key text PRIMARY KEY, value text NOT NULL)")
        row = conn.execute("SELECT value FROM ccotel.meta WHERE key = 'schema'").fetchone()
        version = int(row[0]) if row else 0
        if version > SCHEMA_VERSION:
            raise StateError(f"state {where} has schema {version}, this ccotel knows {SCHEMA_VERSION}: upgrade it")
        for step in range(version, SCHEMA_VERSION):
            conn.execute(MIGRATIONS[step].encode())
            log.info("state %s: schema %d -> %d", where, step, step + 1)
        conn.execute("INSERT INTO ccotel.meta VALUES ('schema', %s) ON CONFLICT (key) DO UPDATE SET value = "
                     "excluded.value", (str(SCHEMA_VERSION),))


def _refused(exc: psycopg.OperationalError) -> bool:
    """The server answered no (a wrong or missing password, no such database or role)."""
    text = str(exc).lower()
    return (exc.sqlstate or "")[:2] in ("28", "3D") or "password" in text or "does not exist" in text


class Link:
    """One connection, opened again after it broke. ``run(fn)`` runs ``fn(conn)``; a failed
    connection is closed, so the next call opens a new one."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.where = masked(url)
        self._conn: psycopg.Connection[Any] | None = None

    def conn(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self.close()
            self._conn = connect(self.url)
        return self._conn

    def open_conn(self) -> psycopg.Connection[Any] | None:
        """The connection if it is open and not broken (none is opened for it)."""
        if self._conn is None or self._conn.closed or self._conn.broken:
            return None
        return self._conn

    def run(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        try:
            return fn(self.conn())
        except psycopg.OperationalError:
            self.close()
            raise

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg.Error:
                pass
            self._conn = None

    def error(self, exc: BaseException) -> str:
        return scrub(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__, self.url)


class PgState:
    """``State`` (state.py) over PostgreSQL for the host ``host`` (see the module docstring).
    Thread-safe: the export thread commits acknowledgements while the pipeline's thread claims
    and commits."""

    def __init__(self, url: str, host: str) -> None:
        self.url = url
        self.host = host
        self.path = masked(url)
        self.rebuilt_from: str | None = None  # a server's database is never moved aside
        self.on_error: Callable[[str], None] | None = None
        self.failures = 0
        self._lock = threading.Lock()
        self._link = Link(url)
        self._pending: Commit | None = None  # not written yet
        self._unsure: tuple[int, Commit] | None = None  # sent, the answer lost with the connection
        self._committed: dict[str, float] = {}
        self._outage_logged = False
        self._writer = uuid.uuid4().hex  # this open state's commit numbers (``writers``)
        self._seq = 0
        try:
            self._hid, self.fresh = self._read(self._register)
        except psycopg.Error as exc:
            raise StateUnavailable(f"the state {self.path} cannot be used ({self._link.error(exc)})") from None

    def _register(self, conn: psycopg.Connection[Any]) -> tuple[int, bool]:
        migrate(conn, self.path)
        with conn.transaction():
            conn.execute("INSERT INTO ccotel.hosts (host) VALUES (%s) ON CONFLICT (host) DO NOTHING", (self.host,))
            row = conn.execute("SELECT hid FROM ccotel.hosts WHERE host = %s", (self.host,)).fetchone()
            assert row is not None
            files = conn.execute("SELECT 1 FROM ccotel.files WHERE hid = %s LIMIT 1", (row[0],)).fetchone()
            conn.execute("DELETE FROM ccotel.writers WHERE hid = %s AND seen_at < now() - %s::interval",
                         (row[0], WRITER_KEPT))
        return int(row[0]), files is None

    # -- anchors ---------------------------------------------------------------------

    def _anchor(self, file_anchor: int) -> int:
        """A (host, file) anchor from a file's anchor (state.anchor_of; PERMANENT: the host's own)."""
        return digest64(f"{self.host}:{file_anchor}")

    # -- reading (at start; waits READ_RETRY_S for the server) ---------------------

    def _read(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        deadline = time.monotonic() + READ_RETRY_S
        while True:
            try:
                with self._lock:
                    return self._link.run(fn)
            except psycopg.OperationalError as exc:
                # refused (a wrong password, no such database): waiting does not help
                if time.monotonic() >= deadline or _refused(exc):
                    raise StateUnavailable(f"the state {self.path} cannot be reached ({self._link.error(exc)})") \
                        from None
                time.sleep(0.5)

    def files(self, paths: list[str] | None = None) -> dict[str, tuple[FileIdentity | None, int, int, Marker | None]]:
        query = ("SELECT path, dev, ino, head_len, fingerprint, read_offset, read_to, marker FROM ccotel.files WHERE "
                 "hid = %s")
        rows = self._read(lambda c: c.execute(query, (self._hid,)).fetchall() if paths is None else
                          c.execute(query + " AND path = ANY(%s)", (self._hid, paths)).fetchall())
        return {p: (FileIdentity(dev, ino, hl, fp) if fp is not None else None, off, rt, Marker.parse(m))
                for p, dev, ino, hl, fp, off, rt, m in rows}

    def acked(self) -> set[int]:
        out: set[int] = set()
        for (blob,) in self._read(lambda c: c.execute(
                "SELECT span_ids FROM ccotel.acked_ids WHERE hid = %s", (self._hid,)).fetchall()):
            out.update(unpack_ids(bytes(blob)))
        return out

    def calls(self) -> set[int]:
        """This host's digests (its files' calls); other hosts' copies of the same work are told
        apart by the shared ``claims``, so memory follows this host's files, not the fleet's."""
        return {r[0] for r in self._read(lambda c: c.execute(
            "SELECT digest FROM ccotel.calls WHERE hid = %s", (self._hid,)).fetchall())}

    def prompts(self) -> set[int]:
        return {r[0] for r in self._read(lambda c: c.execute(
            "SELECT digest FROM ccotel.prompts WHERE hid = %s", (self._hid,)).fetchall())}

    def sorted_digests(self, table: str) -> list[int]:
        """This host's digests of ``calls`` or ``prompts``, read as a set and sorted."""
        if table not in ("calls", "prompts"):
            raise ValueError(table)
        return sorted(self.calls() if table == "calls" else self.prompts())

    def counters(self) -> dict[str, float]:
        """This host's totals (its own Prometheus counters)."""
        return self._load_counters()[0]

    def others_counters(self) -> dict[str, float]:
        """What this host's other processes (catch-up workers) added to its counters since this one
        last loaded or wrote them; from here on counted as loaded by this one."""
        return self._load_counters()[1]

    def _load_counters(self) -> tuple[dict[str, float], dict[str, float]]:
        rows = self._read(lambda c: c.execute(
            "SELECT key, value FROM ccotel.counters WHERE hid = %s", (self._hid,)).fetchall())
        totals = {str(k): float(v) for k, v in rows}
        with self._lock:
            added = {k: v - self._committed.get(k, 0.0) for k, v in totals.items() if v != self._committed.get(k, 0.0)}
            self._committed.update(totals)
        return totals, added

    def marks(self) -> set[str]:
        """Every host's marks of events (shared), and this host's own caught-up mark."""
        rows = self._read(lambda c: c.execute(
            "SELECT key FROM ccotel.marks UNION SELECT key FROM ccotel.host_marks WHERE hid = %s",
            (self._hid,)).fetchall())
        return {r[0] for r in rows}

    def held_by(self, paths: list[str]) -> tuple[list[int], list[int]]:
        anchors = [self._anchor(anchor_of(p)) for p in paths]

        def query(c: psycopg.Connection[Any]) -> tuple[list[int], list[int]]:
            calls, prompts = (sorted({r[0] for r in c.execute(
                f"SELECT digest FROM ccotel.{table} WHERE anchor = ANY(%s)", (anchors,)).fetchall()})  # noqa: S608
                for table in ("calls", "prompts"))
            return calls, prompts

        return self._read(query)

    def held_only_by(self, paths: list[str]) -> tuple[set[int], set[int], set[str]]:
        anchors = [self._anchor(anchor_of(p)) for p in paths]

        def query(c: psycopg.Connection[Any]) -> tuple[set[int], set[int], set[str]]:
            out: tuple[set[int], set[int], set[str]] = (set(), set(), set())
            for table, column, into in (("calls", "digest", out[0]), ("prompts", "digest", out[1]),
                                        ("marks", "key", out[2])):
                rows = c.execute(
                    f"SELECT a.{column} FROM ccotel.{table} a WHERE a.anchor = ANY(%s) AND NOT EXISTS"  # noqa: S608
                    f" (SELECT 1 FROM ccotel.{table} b WHERE b.{column} = a.{column} AND b.anchor <> ALL(%s))",
                    (anchors, anchors)).fetchall()
                into.update(r[0] for r in rows)
            return out

        return self._read(query)

    def sizes(self) -> dict[str, int]:
        def query(c: psycopg.Connection[Any]) -> dict[str, int]:
            out = {t: int(c.execute(f"SELECT count(*) FROM ccotel.{t}").fetchone()[0])  # type: ignore[index]  # noqa: S608
                   for t in ("files", "acked_ids", "claims", "calls", "prompts", "counters", "marks", "mark_claims",
                                 "host_marks")}
            out["acked"] = out["legacy_files"] = 0
            out["bytes"] = int(c.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c JOIN pg_namespace n ON "
                "n.oid = c.relnamespace WHERE n.nspname = 'ccotel' AND c.relkind = 'r'").fetchone()[0])  # type: ignore[index]
            return out

        return self._read(query)

    def describe(self) -> str:
        return f"{self.path} (host {self.host})"

    # -- claiming --------------------------------------------------------------------

    def claim(self, span_ids: list[int], anchor: int) -> Claimed:
        """Of these spans, the ones this host sends and counts: those it inserted into ``claims``
        now or before (a restart builds them again), and those it took over from a host whose
        lease ran out before delivering them; and (``elsewhere``) those another host claimed and
        has not delivered yet. Waits for the server when it is away (nothing is sent that no
        host may have claimed)."""
        if not span_ids:
            return Claimed(frozenset())
        ids = sorted({signed64(s) for s in span_ids})  # one order for every host: no deadlock between two
        own = self._anchor(anchor)

        def claim(c: psycopg.Connection[Any]) -> tuple[set[int], set[int], int]:
            with c.transaction():
                rows = c.execute(
                    "INSERT INTO ccotel.claims AS k (span_id, hid, anchor, done) "
                    "SELECT unnest(%s::bigint[]), %s, %s, false ON CONFLICT (span_id) DO UPDATE "
                    "SET hid = excluded.hid, anchor = excluded.anchor WHERE NOT k.done AND k.hid <> excluded.hid "
                    "AND EXISTS (SELECT 1 FROM ccotel.hosts h WHERE h.hid = k.hid AND h.lease_until < now()) "
                    "RETURNING span_id, xmax <> 0", (ids, self._hid, own)).fetchall()
                won = {r[0] for r in rows}
                taken = sum(1 for r in rows if r[1])
                rest = [i for i in ids if i not in won]
                elsewhere: set[int] = set()
                if rest:
                    for span_id, hid in c.execute(
                            "SELECT span_id, hid FROM ccotel.claims WHERE span_id = ANY(%s) AND (hid = %s OR NOT done)",
                            (rest, self._hid)).fetchall():
                        (won if hid == self._hid else elsewhere).add(span_id)
            return won, elsewhere, taken

        won, elsewhere, taken = self._until_written(claim)
        if taken:
            log.info("took over %d spans claimed by a host whose lease ran out before it delivered them", taken)
        return Claimed(frozenset(unsigned64(v) for v in won), frozenset(unsigned64(v) for v in elsewhere))

    def claim_mark(self, mark: str, anchor: int) -> bool:
        """True if this host is the first to record the one-off event ``mark`` (it counts it)."""
        if mark == CAUGHT_UP:
            return True

        def insert(c: psycopg.Connection[Any]) -> bool:
            with c.transaction():
                c.execute("INSERT INTO ccotel.marks VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                          (mark, self._anchor(anchor), self._hid))
                # the unique key decides which host counts it (this host before a restart too)
                won = c.execute("INSERT INTO ccotel.mark_claims VALUES (%s, %s) ON CONFLICT DO NOTHING "
                                "RETURNING key", (mark, self._hid)).fetchone()
            return won is not None

        return self._until_written(insert)

    def _until_written(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        delay = 0.1
        while True:
            try:
                with self._lock:
                    result = self._link.run(fn)
                if self._outage_logged:
                    log.warning("state %s reachable again", self.path)
                    self._outage_logged = False
                return result
            except (psycopg.OperationalError, psycopg.errors.DeadlockDetected,
                    psycopg.errors.SerializationFailure) as exc:
                if not self._outage_logged and isinstance(exc, psycopg.OperationalError):
                    self._outage_logged = True
                    log.error("state %s unreachable (%s): waiting for it before sending more spans", self.path,
                              self._link.error(exc))
                    if self.on_error is not None:
                        self.on_error("io_error")
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    # -- committing ------------------------------------------------------------------

    @property
    def pending(self) -> int:
        with self._lock:
            return sum(c.size() for c in (self._pending, self._unsure[1] if self._unsure else None) if c is not None)

    def commit(self, c: Commit) -> bool:
        with self._lock:
            if c.empty() and self._pending is None and self._unsure is None:
                return True
            if self._pending is None:
                self._pending = Commit()
            self._pending.merge(c)
            return self._flush()

    def retry(self) -> bool:
        with self._lock:
            if self._pending is None and self._unsure is None:
                return True
            if self._pending is None:
                self._pending = Commit()
            return self._flush()

    def _flush(self) -> bool:
        """Write what is pending (after settling a commit whose answer was lost); the caller holds the lock."""
        assert self._pending is not None
        try:
            if self._unsure is not None:
                seq, earlier = self._unsure
                row = self._link.run(lambda c: c.execute(
                    "SELECT commit_seq FROM ccotel.writers WHERE hid = %s AND writer = %s",
                    (self._hid, self._writer)).fetchone())
                self._unsure = None
                if row is not None and int(row[0]) >= seq:  # it was written: never write it again
                    self._seq = seq
                    self._committed.update(earlier.counters)
                else:
                    earlier.merge(self._pending)
                    self._pending = earlier
        except psycopg.Error as exc:
            self._failed(self._pending, exc)
            return False
        c, seq = self._pending, self._seq + 1
        try:
            self._link.run(lambda conn: self._write_commit(conn, c, seq))
        except psycopg.Error as exc:
            self._pending = None
            self._unsure = (seq, c)
            self._failed(c, exc)
            return False
        self._seq = seq
        self._committed.update(c.counters)
        self._pending = None
        if self.failures:
            log.warning("checkpoints written again to %s (after %d failed attempts); nothing was lost", self.path,
                        self.failures)
        self.failures = 0
        return True

    def _write_commit(self, conn: psycopg.Connection[Any], c: Commit, seq: int) -> None:
        hid = self._hid
        with conn.transaction():
            cur = conn.cursor()
            if c.offsets:
                cur.executemany(
                    "INSERT INTO ccotel.files VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (hid, path) DO "
                    "UPDATE SET dev = excluded.dev, ino = excluded.ino, head_len = excluded.head_len, fingerprint = "
                    "excluded.fingerprint, read_offset = excluded.read_offset, read_to = excluded.read_to, "
                    "marker = excluded.marker",
                    [(hid, *row) for row in c.file_rows()])
            if c.forget_files:
                anchors = [self._anchor(anchor_of(p)) for p in c.forget_files]
                cur.execute("DELETE FROM ccotel.files WHERE hid = %s AND path = ANY(%s)", (hid, c.forget_files))
                for table in ("calls", "prompts", "marks", "claims"):
                    cur.execute(f"DELETE FROM ccotel.{table} WHERE anchor = ANY(%s)", (anchors,))  # noqa: S608
                # a mark no file holds any more was counted for the last time
                cur.execute("DELETE FROM ccotel.mark_claims m WHERE m.hid = %s AND NOT EXISTS "
                            "(SELECT 1 FROM ccotel.marks k WHERE k.key = m.key)", (hid,))
            if c.acked:
                cur.executemany("INSERT INTO ccotel.acked_ids VALUES (%s, %s, %s)",
                                [(hid, owner, blob) for owner, blob in c.acked_by_owner()])
                # final (delivered or dropped for good): no other host takes these over any more
                cur.execute("UPDATE ccotel.claims SET done = true WHERE span_id = ANY(%s) AND hid = %s AND NOT done",
                            (sorted({signed64(s) for s, _o in c.acked}), hid))
            if c.done_owners:
                cur.execute("DELETE FROM ccotel.acked_ids WHERE hid = %s AND owner = ANY(%s)", (hid, c.done_owners))
            for table, rows in (("calls", c.calls), ("prompts", c.prompts)):
                if rows:
                    digests = [d for d, _a in rows]
                    anchors = [self._anchor(a) for _d, a in rows]
                    cur.execute(f"INSERT INTO ccotel.{table} SELECT d, a, %s FROM unnest(%s::bigint[], "  # noqa: S608
                                f"%s::bigint[]) AS t(d, a) ON CONFLICT DO NOTHING", (hid, digests, anchors))
            # in one order for every writer of the host: no deadlock between two on its rows
            added = [(hid, k, v - self._committed.get(k, 0.0)) for k, v in sorted(c.counters.items())]
            added = [row for row in added if row[2]]
            if added:
                cur.executemany("INSERT INTO ccotel.counters VALUES (%s, %s, %s) ON CONFLICT (hid, key) DO UPDATE "
                                "SET value = ccotel.counters.value + excluded.value", added)
            for key, anchor in c.marks:
                if key == CAUGHT_UP:
                    cur.execute("INSERT INTO ccotel.host_marks VALUES (%s, %s) ON CONFLICT DO NOTHING", (hid, key))
                else:
                    cur.execute("INSERT INTO ccotel.marks VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                                (key, self._anchor(anchor), hid))
            cur.execute("INSERT INTO ccotel.writers VALUES (%s, %s, %s) ON CONFLICT (hid, writer) DO UPDATE "
                        "SET commit_seq = excluded.commit_seq, seen_at = now()", (hid, self._writer, seq))
            cur.execute("UPDATE ccotel.hosts SET seen_at = now() WHERE hid = %s", (hid,))

    def _failed(self, c: Commit, exc: BaseException) -> None:
        self.failures += 1
        if self.failures == 1:
            log.error("checkpoint not written to %s (%s); ccotel keeps reading and exporting, keeps what it must "
                      "write in memory and retries with every commit", self.path, self._link.error(exc))
        else:
            log.debug("checkpoint still not written (%s), attempt %d", self._link.error(exc), self.failures)
        if self.on_error is not None:
            self.on_error("io_error")

    def close(self) -> None:
        """Close, dropping this writer's row if connected (one left behind goes after WRITER_KEPT)."""
        with self._lock:
            conn = self._link.open_conn()
            if conn is not None:
                try:
                    conn.execute("DELETE FROM ccotel.writers WHERE hid = %s AND writer = %s", (self._hid, self._writer))
                except psycopg.Error:
                    pass
            self._link.close()
