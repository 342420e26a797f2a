"""Claim leases in a fleet (PostgreSQL): a host's claims on spans it has not delivered yet are
held while its lease is renewed (it holds its host lock, ``lock_host``) and taken over by another
host once the lease ran out; a delivered span stays its host's for good.

Against a real server (tests/support/postgres.py), with a short lease; every wait is bounded.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from ccotel.store.postgres import PgState
from ccotel.store.postgres_lease import lock_host
from ccotel.store.state import Claimed, Commit, anchor_of, claim_lease
from tests.support.postgres import PostgresServer, running_server

pg = pytest.fixture(scope="module", name="pg")(running_server)

LEASE_S = 1.0
FILE = anchor_of("/r/s.jsonl")


def until(check: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return check()


def test_a_live_hosts_claims_are_never_taken(pg: PostgresServer) -> None:
    url = pg.create_db("lease_live")
    lock_a, lock_b = lock_host(url, "A", LEASE_S), lock_host(url, "B", LEASE_S)
    a, b = PgState(url, "A"), PgState(url, "B")
    try:
        assert a.claim([1, 2, 3], FILE) == Claimed(frozenset({1, 2, 3}))
        assert b.claim([1, 2, 3, 4], FILE) == Claimed(frozenset({4}), frozenset({1, 2, 3}))
        time.sleep(LEASE_S * 3)  # A renews its lease meanwhile
        assert b.claim([1, 2, 3], FILE) == Claimed(frozenset(), frozenset({1, 2, 3}))
        assert a.commit(Commit(acked=[(1, "turn")]))  # A delivered span 1: final, nobody else's to take
        assert b.claim([1, 2, 3], FILE) == Claimed(frozenset(), frozenset({2, 3}))
    finally:
        for st in (a, b):
            st.close()
        lock_a.release()
        lock_b.release()


def test_a_dead_hosts_undelivered_claims_are_taken_over(pg: PostgresServer) -> None:
    url = pg.create_db("lease_dead")
    lock_a, lock_b = lock_host(url, "A", LEASE_S), lock_host(url, "B", LEASE_S)
    a, b = PgState(url, "A"), PgState(url, "B")
    try:
        assert a.claim([1, 2, 3], FILE).mine == {1, 2, 3}
        assert a.commit(Commit(acked=[(1, "turn")]))
        lock_a.release()  # A dies: nobody renews its lease
        a.close()
        assert until(lambda: b.claim([1, 2, 3], FILE).mine == {2, 3}, LEASE_S * 10)
        assert b.claim([1], FILE) == Claimed(frozenset())  # delivered by A: never sent again
        # A comes back: what B took over is B's now (B is alive)
        lock_a = lock_host(url, "A", LEASE_S)
        a = PgState(url, "A")
        assert a.claim([1, 2, 3], FILE) == Claimed(frozenset({1}), frozenset({2, 3}))  # 1: its own, delivered
    finally:
        for st in (a, b):
            st.close()
        lock_a.release()
        lock_b.release()


def test_two_hosts_taking_over_one_dead_host_split_its_claims(pg: PostgresServer) -> None:
    """B and C both take over A's claims: each span goes to exactly one of them."""
    url = pg.create_db("lease_race")
    lock_a = lock_host(url, "A", LEASE_S)
    locks = [lock_host(url, h, LEASE_S) for h in ("B", "C")]
    a = PgState(url, "A")
    ids = list(range(1, 201))
    assert a.claim(ids, FILE).mine == set(ids)
    lock_a.release()
    a.close()
    b, c = PgState(url, "B"), PgState(url, "C")
    try:
        time.sleep(LEASE_S * 1.5)
        won_b = b.claim(ids[::2] + ids[1::2], FILE).mine
        won_c = c.claim(ids, FILE).mine
        assert won_b == set(ids) and won_c == set()
        assert c.claim(ids, FILE).elsewhere == set(ids)  # B is alive
    finally:
        for st in (b, c):
            st.close()
        for lock in locks:
            lock.release()


def test_claims_made_before_the_lease_schema_stay_with_their_host(pg: PostgresServer) -> None:
    """A state written by a ccotel without leases: its claims may have been delivered (nothing
    says otherwise), so they are never taken over."""
    url = pg.create_db("lease_upgrade")
    st = PgState(url, "old")
    st.close()
    with psycopg.connect(url, autocommit=True) as c:
        hid = c.execute("SELECT hid FROM ccotel.hosts WHERE host = 'old'").fetchone()[0]  # type: ignore[index]
        c.execute("INSERT INTO ccotel.claims (span_id, hid, anchor) VALUES (7, %s, 0)", (hid,))
        c.execute("UPDATE ccotel.hosts SET lease_until = now() - interval '1 hour' WHERE hid = %s", (hid,))
    lock_b = lock_host(url, "B", LEASE_S)
    b = PgState(url, "B")
    try:
        assert b.claim([7], FILE) == Claimed(frozenset())
    finally:
        b.close()
        lock_b.release()


@pytest.mark.parametrize("lease", ["0", "-5", "nan", "inf", "1e9", "soon", ""])
@pytest.mark.parametrize("how", ["option", "env"])
def test_a_bad_claim_lease_is_refused_before_any_work(lease: str, how: str, tmp_path: Path) -> None:
    root = tmp_path / "claude"
    (root / "projects").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "OTEL_", "CCOTEL_"))}
    args = [sys.executable, "-m", "ccotel", "backfill", "--root", str(root), "--traces-exporter", "none",
            "--state", "postgresql://u@127.0.0.1:1/db"]
    if how == "option":
        args += [f"--claim-lease={lease}"]
    else:
        env["CCOTEL_CLAIM_LEASE"] = lease
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    if how == "env" and lease == "":
        assert "claim lease" not in done.stderr  # unset: the default
        return
    assert done.returncode == 2, done.stderr
    assert "claim lease" in done.stderr and "Traceback" not in done.stderr
    assert "cannot be reached" not in done.stderr  # before the state was opened


def test_claim_lease_values() -> None:
    assert claim_lease(None, {}) == 60.0
    assert claim_lease(None, {"CCOTEL_CLAIM_LEASE": "2.5"}) == 2.5
    assert claim_lease("10", {"CCOTEL_CLAIM_LEASE": "2.5"}) == 10.0
