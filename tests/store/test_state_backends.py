"""The state interface on both backends: SQLite (a dir, one host) and PostgreSQL (a URL, a fleet).

The same tests run on each (``backend`` is parametrized); the PostgreSQL ones run against a real
server (a throwaway cluster from tests/support/postgres.py). Then what only a shared state has:
claims decided by the unique key between hosts and threads, marks counted once, the schema
versioned and migrated, a connection lost and regained without losing or doubling a commit,
credentials from the URL, the environment or a password file and never in a log or an error.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from ccotel.read.tail import FileIdentity, Marker
from ccotel.store.backends import lock_state, open_state
from ccotel.store.postgres import PgState, masked, scrub
from ccotel.store.postgres_lease import lock_host
from ccotel.store.postgres_schema import MIGRATIONS, SCHEMA_VERSION
from ccotel.store.state import (
    PERMANENT,
    Commit,
    State,
    StateError,
    StateLocked,
    StateUnavailable,
    anchor_of,
    resolve_state,
)
from tests.support.postgres import PostgresServer, running_server

Opener = Callable[[str], State]  # host id -> a state (SQLite: the host's own dir)


pg = pytest.fixture(scope="module", name="pg")(running_server)


_dbs = [0]


@pytest.fixture(params=["sqlite", "postgres"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    if request.param == "sqlite":
        return lambda host: open_state(str(tmp_path / f"state-{host}"), host)
    server: PostgresServer = request.getfixturevalue("pg")
    _dbs[0] += 1
    url = server.create_db(f"backend{_dbs[0]}")
    return lambda host: open_state(url, host)


def test_resolve_state() -> None:
    env = {"XDG_STATE_HOME": "/h/state"}
    assert resolve_state(None, None, env) == "/h/state/ccotel"
    assert resolve_state("postgresql://db/x", "/d", env) == "postgresql://db/x"
    assert resolve_state(None, "/d", env) == "/d"  # --state-dir: the alias
    assert resolve_state(None, None, {**env, "CCOTEL_STATE": "postgresql://db/y"}) == "postgresql://db/y"
    assert resolve_state("none", None, env) is None


def test_commit_and_reload(opener: Opener) -> None:
    st = opener("h1")
    ident = FileIdentity(1, 2, 3, "ab")
    marker = Marker(12, 7, "00ff00ff00ff00ff")
    c = Commit(offsets={"/r/a.jsonl": (ident, 10, 12, marker), "/r/b.jsonl": (None, 5, 5, None)},
               acked=[(1, "s/o1"), ((1 << 64) - 5, "s/o1"), (7, "s/o2")], done_owners=[],
               calls=[(11, anchor_of("/r/a.jsonl")), (-12, anchor_of("/r/a.jsonl"))],
               prompts=[(21, anchor_of("/r/a.jsonl"))], counters={"delivered:x": 3.0, "read:y": 2.0},
               marks=[("ghost:s", anchor_of("/r/a.jsonl")), ("caught_up", PERMANENT)])
    assert st.commit(c)
    assert st.commit(Commit(done_owners=["s/o2"], counters={"delivered:x": 5.0}))
    st.close()
    st = opener("h1")
    assert st.files() == {"/r/a.jsonl": (ident, 10, 12, marker), "/r/b.jsonl": (None, 5, 5, None)}
    assert st.files(["/r/b.jsonl", "/r/gone.jsonl"]) == {"/r/b.jsonl": (None, 5, 5, None)}  # of these only
    assert st.files([]) == {}
    assert st.acked() == {1, (1 << 64) - 5}
    assert st.calls() == {11, -12} and st.prompts() == {21}
    assert st.counters() == {"delivered:x": 5.0, "read:y": 2.0}  # increments, not the sum of totals
    assert st.marks() == {"ghost:s", "caught_up"}
    # a restart's process commits what it grew by since the totals it loaded
    assert st.commit(Commit(counters={"delivered:x": 6.0}))
    assert st.counters()["delivered:x"] == 6.0
    st.close()


def test_forget_goes_with_the_last_file(opener: Opener) -> None:
    st = opener("h1")
    a, b = anchor_of("/r/a.jsonl"), anchor_of("/r/b.jsonl")
    st.commit(Commit(offsets={"/r/a.jsonl": (None, 1, 1, None), "/r/b.jsonl": (None, 1, 1, None)},
                     calls=[(1, a), (2, a), (2, b)], prompts=[(3, a)], marks=[("m", a)]))
    assert st.held_only_by(["/r/a.jsonl"]) == ({1}, {3}, {"m"})
    assert st.held_by(["/r/a.jsonl"]) == ([1, 2], [3])  # what a worker's part leaves to take over
    assert st.held_by(["/r/b.jsonl"]) == ([2], []) and st.held_by(["/r/a.jsonl", "/r/b.jsonl"]) == ([1, 2], [3])
    st.commit(Commit(forget_files=["/r/a.jsonl"]))
    assert st.calls() == {2} and st.prompts() == set() and st.marks() == set()
    assert set(st.files()) == {"/r/b.jsonl"}
    st.close()


def test_claims(opener: Opener) -> None:
    a, b = opener("A"), opener("B")
    first = a.claim([1, 2, 3, (1 << 64) - 1], anchor_of("/a/s.jsonl")).mine
    assert first == {1, 2, 3, (1 << 64) - 1}
    second = b.claim([2, 3, 4], anchor_of("/b/s.jsonl")).mine
    if isinstance(a, PgState):
        assert second == {4}  # the other host's spans are not B's to send
        a.close()
        a = opener("A")
        assert a.claim([1, 4, 5], anchor_of("/a/s.jsonl")).mine == {1, 5}  # A's own again after a restart
    else:
        assert second == {2, 3, 4}  # one host per SQLite state: all of them
    a.close()
    b.close()


# -- PostgreSQL only ---------------------------------------------------------------------------------


def test_concurrent_claims_one_winner_each(pg: PostgresServer) -> None:
    """Four hosts claim overlapping spans at once, in many transactions: every span has exactly
    one host, and each host was told exactly the spans whose row is its own."""
    url = pg.create_db("race")
    hosts = [PgState(url, f"h{i}") for i in range(4)]
    won: dict[str, set[int]] = {st.host: set() for st in hosts}

    def work(st: PgState) -> None:
        for k in range(60):
            ids = list(range(k * 10, k * 10 + 40))  # overlaps the next batches too
            won[st.host] |= st.claim(ids, anchor_of(f"/{st.host}/f")).mine

    threads = [threading.Thread(target=work, args=(st,)) for st in hosts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = set(range(0, 630))
    assert set().union(*won.values()) == everything
    assert sum(len(w) for w in won.values()) == len(everything)  # no span won twice
    with psycopg.connect(url) as c:
        rows = dict(c.execute("SELECT span_id, h.host FROM ccotel.claims JOIN ccotel.hosts h USING (hid)").fetchall())
    assert {host: {i for i, h in rows.items() if h == host} for host in won} == won
    for st in hosts:
        st.close()


def test_marks_counted_once_fleet_wide(pg: PostgresServer) -> None:
    url = pg.create_db("marks")
    a, b = PgState(url, "A"), PgState(url, "B")
    assert a.claim_mark("ghost:s1", anchor_of("/a/s1.jsonl"))
    assert not b.claim_mark("ghost:s1", anchor_of("/b/s1.jsonl"))
    assert not a.claim_mark("ghost:s1", anchor_of("/a/s1.jsonl"))  # after a restart: counted already
    # the caught-up mark is each host's own: B's first catch-up is history B does not count
    a.commit(Commit(marks=[("caught_up", PERMANENT)]))
    assert "caught_up" in a.marks() and "caught_up" not in b.marks() and "ghost:s1" in b.marks()
    a.close()
    b.close()


def test_schema_versioned_and_migrated(pg: PostgresServer) -> None:
    url = pg.create_db("schema")
    states = []
    errors: list[BaseException] = []

    def open_one(i: int) -> None:
        try:
            states.append(PgState(url, f"h{i}"))  # at once: one migrates, the others wait for it
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=open_one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(states) == 4
    with psycopg.connect(url, autocommit=True) as c:
        assert c.execute("SELECT value FROM ccotel.meta WHERE key = 'schema'").fetchone() == (str(SCHEMA_VERSION),)
        c.execute("UPDATE ccotel.meta SET value = %s WHERE key = 'schema'", (str(SCHEMA_VERSION + 1),))
    with pytest.raises(StateError, match="schema"):
        PgState(url, "newer")
    for st in states:
        st.close()


def test_lost_answer_is_not_written_twice(pg: PostgresServer) -> None:
    """A commit reaches the server but its answer is lost with the connection: the next commit
    looks up the host's commit number and does not add the counters again."""
    url = pg.create_db("lost_answer")
    st = PgState(url, "A")
    real = st._write_commit

    def lost(conn: psycopg.Connection, c: Commit, seq: int) -> None:  # type: ignore[type-arg]
        real(conn, c, seq)
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    st._write_commit = lost  # type: ignore[method-assign]
    assert not st.commit(Commit(counters={"delivered:x": 4.0}, calls=[(1, anchor_of("/f"))]))
    st._write_commit = real  # type: ignore[method-assign]
    assert st.commit(Commit(counters={"delivered:x": 6.0}))
    assert st.pending == 0
    st.close()
    assert PgState(url, "A").counters() == {"delivered:x": 6.0}


def _answer_lost(st: PgState, written: bool) -> Callable[[], None]:
    """Make ``st``'s next commits lose their answer with the connection, after the server wrote
    them (``written``) or before; returns what undoes it."""
    real = st._write_commit

    def lost(conn: psycopg.Connection, c: Commit, seq: int) -> None:  # type: ignore[type-arg]
        if written:
            real(conn, c, seq)
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    st._write_commit = lost  # type: ignore[method-assign]
    return lambda: setattr(st, "_write_commit", real)


@pytest.mark.parametrize("written", [False, True], ids=["not_written", "written"])
def test_lost_answer_of_one_writer_while_another_of_its_host_commits(pg: PostgresServer, written: bool) -> None:
    """Catch-up workers are writers of one host id: a commit whose answer one of them lost is
    settled by its own commit number, not by the host's that the others move on meanwhile. Not
    written: written now, offsets and counter increments kept; written: not added a second time."""
    url = pg.create_db(f"lost_answer_writers_{int(written)}")
    one, two = PgState(url, "A"), PgState(url, "A")
    undo = _answer_lost(one, written)
    assert not one.commit(Commit(offsets={"/r/one.jsonl": (None, 40, 40, None)}, counters={"delivered:x": 4.0}))
    undo()
    for n in (1.0, 2.0, 3.0):  # the other writer's commits move on past the lost one's number
        assert two.commit(Commit(offsets={"/r/two.jsonl": (None, int(n), int(n), None)},
                                 counters={"delivered:y": n}))
    assert one.retry() and one.pending == 0
    assert one.commit(Commit(counters={"delivered:x": 5.0}))
    for st in (one, two):
        st.close()
    again = PgState(url, "A")
    assert again.counters() == {"delivered:x": 5.0, "delivered:y": 3.0}
    assert {p: v[1] for p, v in again.files().items()} == {"/r/one.jsonl": 40, "/r/two.jsonl": 3}
    again.close()


def test_writer_rows_go_at_close_or_when_long_unseen(pg: PostgresServer) -> None:
    """One ``writers`` row per open state: dropped when it closes, and one its process never
    closed (killed) is dropped by a later start of the host once WRITER_KEPT passed."""
    url = pg.create_db("writer_rows")
    closed, killed = PgState(url, "A"), PgState(url, "A")
    for st in (closed, killed):
        assert st.commit(Commit(counters={"delivered:x": 1.0}))
    closed.close()
    with psycopg.connect(url, autocommit=True) as c:
        assert c.execute("SELECT writer FROM ccotel.writers").fetchall() == [(killed._writer,)]
        c.execute("UPDATE ccotel.writers SET seen_at = now() - interval '8 days'")
    PgState(url, "A").close()
    with psycopg.connect(url, autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM ccotel.writers").fetchone() == (0,)
    killed._link.close()


def test_server_restart_loses_and_doubles_nothing(pg: PostgresServer) -> None:
    url = pg.create_db("restart_state")
    st = PgState(url, "A")
    assert st.commit(Commit(counters={"delivered:x": 1.0}))
    pg.stop()
    try:
        assert not st.commit(Commit(counters={"delivered:x": 2.0}, acked=[(5, "s/o")]))
        assert st.pending > 0 and st.failures >= 1
        assert not st.retry()
        got: list[frozenset[int]] = []
        waiter = threading.Thread(target=lambda: got.append(st.claim([9], anchor_of("/f")).mine))
        waiter.start()  # waits for the server: nothing is sent that no host may have claimed
        waiter.join(1.0)
        assert waiter.is_alive() and not got
    finally:
        pg.start()
    waiter.join(15)
    assert got == [{9}]
    assert st.retry() and st.pending == 0
    assert st.commit(Commit(counters={"delivered:x": 3.0}))
    st.close()
    again = PgState(url, "A")
    assert again.counters() == {"delivered:x": 3.0} and again.acked() == {5}
    again.close()


def test_host_lock(pg: PostgresServer) -> None:
    url = pg.create_db("locks")
    held = lock_state(url, "A")
    with pytest.raises(StateLocked, match="host id 'A'"):
        lock_host(url, "A")
    other = lock_host(url, "B")
    held.release()
    lock_host(url, "A").release()
    other.release()


def test_credentials_from_env_and_password_file(pg: PostgresServer, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    pg.create_db("creds")
    bare = pg.url_for("creds", password=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "nothing"))
    with pytest.raises(StateUnavailable):
        PgState(bare, "A")  # no password anywhere: refused
    monkeypatch.setenv("PGPASSWORD", pg.password)
    PgState(bare, "A").close()
    monkeypatch.delenv("PGPASSWORD")
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"127.0.0.1:{pg.port}:creds:ccotel:{pg.password}\n")
    passfile.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(passfile))
    PgState(bare, "A").close()


def test_password_never_logged(pg: PostgresServer, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    url = pg.create_db("secret")
    secret = pg.password
    assert secret not in masked(url) and f"127.0.0.1:{pg.port}/secret" in masked(url)
    wrong = url.replace(secret, secret[::-1])
    caplog.set_level(logging.DEBUG)
    with pytest.raises(StateUnavailable) as refused:
        PgState(wrong, "A")
    down = url.replace(f":{pg.port}/", f":{_closed_port()}/")
    with pytest.raises(StateUnavailable) as unreachable:
        lock_host(down, "A")
    for text in (str(refused.value), str(unreachable.value), caplog.text):
        assert secret not in text and secret[::-1] not in text
    # the real command, verbose, once working and once refused (a wrong password)
    root = tmp_path / "claude"
    (root / "projects").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "OTEL_"))}
    for state, status in ((url, 0), (wrong, 1)):
        done = subprocess.run([sys.executable, "-m", "ccotel", "backfill", "-v", "--root", str(root), "--state", state,
                               "--traces-exporter", "none", "--host-id", "A"], env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == status, done.stderr
        assert secret not in done.stderr + done.stdout and secret[::-1] not in done.stderr + done.stdout
        assert masked(url) in done.stderr or status == 1


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# A `python -c` wrapper around ccotel.cli.main in which psycopg cannot be imported (the fleet extra
# not installed), as `ccotel` itself would run.
_WITHOUT_PSYCOPG = ("import sys; sys.modules['psycopg'] = None; from ccotel.cli import main; "
                    "sys.exit(main(sys.argv[1:]))")


@pytest.mark.parametrize("command", ["run", "backfill", "report"])
def test_postgres_state_without_the_fleet_extra_says_what_to_install(command: str, tmp_path: Path) -> None:
    root = tmp_path / "claude"
    (root / "projects").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "OTEL_", "CCOTEL_"))}
    env["XDG_STATE_HOME"] = str(tmp_path / "xdg")
    extra = {"run": ["--metrics-addr", "none", "--traces-exporter", "none"],
             "backfill": ["--traces-exporter", "none"], "report": ["--json"]}[command]
    for how in (["--state", "postgresql://u:pw@127.0.0.1:1/db"], []):  # the option, or $CCOTEL_STATE
        done = subprocess.run([sys.executable, "-c", _WITHOUT_PSYCOPG, command, "--root", str(root), *how, *extra],
                              env=env if how else {**env, "CCOTEL_STATE": "postgres://u:pw@127.0.0.1:1/db"},
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        assert "pip install 'ccotel[fleet]'" in done.stderr
        assert "Traceback" not in done.stderr and "pw@" not in done.stderr
        assert not (tmp_path / "xdg").exists()  # before any work: no state dir made


# A password libpq cannot parse is quoted by its message as written: raw, with bad escapes
# (%ZZ, %00), or percent-decoded.
_BAD_URLS = ["postgresql://u:Pw leak@127.0.0.1:1/db", "postgresql://u:Pw%ZZleak@127.0.0.1:1/db",
             "postgresql://u:Pw%00leak@127.0.0.1:1/db", "postgresql://u:Pw%20leak@127.0.0.1:1/db",
             "postgres://u:Pw leak@127.0.0.1:1/db?sslmode=disable", "postgresql://127.0.0.1:1/db?password=Pw%ZZleak"]


def test_scrub_removes_every_form_of_the_password() -> None:
    quoted = [['unexpected spaces found in "Pw leak", use percent-encoded spaces (%20) instead'],
              ['invalid percent-encoded token: "Pw%ZZleak"'],
              ['forbidden value %00 in percent-encoded value: "Pw%00leak"', "Pw\x00leak"],
              ["password authentication failed: Pw leak", "Pw%20leak"],
              ['unexpected spaces found in "Pw leak"'],
              ['invalid percent-encoded token: "Pw%ZZleak"']]
    for url, texts in zip(_BAD_URLS, quoted, strict=True):
        for text in [*texts, url]:
            assert "leak" not in scrub(text, url), (url, text)


@pytest.mark.parametrize("command", ["run", "backfill", "report"])
def test_a_password_libpq_quotes_never_reaches_the_output(command: str, tmp_path: Path) -> None:
    root = tmp_path / "claude"
    (root / "projects").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "OTEL_", "CCOTEL_"))}
    extra = {"run": ["--metrics-addr", "none", "--traces-exporter", "none"],
             "backfill": ["--traces-exporter", "none"], "report": ["--json"]}[command]
    for url in _BAD_URLS[:3]:
        done = subprocess.run([sys.executable, "-m", "ccotel", command, "-v", "--root", str(root), "--state", url,
                               *extra], env=env, capture_output=True, text=True, timeout=60)
        assert "leak" not in done.stdout + done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_checkpoints_written_before_offset_markers_are_kept_and_trusted(tmp_path: Path, pg: PostgresServer) -> None:
    """A state of the schema before offset markers (SQLite 2, PostgreSQL 1) is migrated in place:
    its checkpoints stay, without a marker (read on from their offset, as before), and new
    commits keep one."""
    import sqlite3

    from ccotel.store import sqlite

    state_dir = tmp_path / "st"
    state_dir.mkdir()
    db = sqlite3.connect(state_dir / "state.db")
    db.executescript(sqlite._SCHEMA.replace(", marker TEXT", "") + sqlite._ANCHORED + """
        INSERT INTO meta VALUES ('schema', '2');
        INSERT INTO files VALUES ('/r/a', 1, 2, 10, 'f', 100, 120);
    """)
    db.commit()
    db.close()
    url = pg.create_db("before_markers")
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("CREATE SCHEMA ccotel")
        c.execute("CREATE TABLE ccotel.meta (key text PRIMARY KEY, value text NOT NULL)")
        c.execute(MIGRATIONS[0].encode())
        c.execute("INSERT INTO ccotel.meta VALUES ('schema', '1')")
        c.execute("INSERT INTO ccotel.hosts (host) VALUES ('h1')")
        c.execute("INSERT INTO ccotel.files VALUES (1, '/r/a', 1, 2, 10, 'f', 100, 120)")
    marker = Marker(130, 9, "0123456789abcdef")
    for st in (open_state(str(state_dir)), open_state(url, "h1")):
        assert st.files() == {"/r/a": (FileIdentity(1, 2, 10, "f"), 100, 120, None)}
        assert st.commit(Commit(offsets={"/r/a": (FileIdentity(1, 2, 10, "f"), 110, 130, marker)}))
        assert st.files()["/r/a"][3] == marker
        st.close()
    assert sqlite3.connect(state_dir / "state.db").execute(
        "SELECT value FROM meta WHERE key = 'schema'").fetchone() == (str(sqlite.SCHEMA_VERSION),)
