"""A fleet host's first catch-up read by several processes (catchup.py over PostgreSQL).

The workers are writers of their host's id in the shared state (postgres.py ``writers``) while the
parent holds the host's lock and lease. ``ccotel backfill --workers 2`` over a generated corpus
split in two shards must deliver what ``--workers 1`` does, each span once, leave the same
checkpoints and digests, and its ledger must give the report the SQLite state's does.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

from ccotel.commands.report.json_doc import as_json
from ccotel.commands.report.rows import Query
from ccotel.commands.report.summary import summarize
from ccotel.commands.report.transcripts import gather
from ccotel.run.pipeline import Options
from ccotel.store.ledger import Ledger
from ccotel.store.postgres import PgState
from ccotel.store.postgres_ledger import open_report_ledger
from tests.support.otlp import OtlpReceiver
from tests.support.postgres import PostgresServer, running_server

pg = pytest.fixture(scope="module", name="pg")(running_server)


@pytest.fixture(scope="module", name="corpus")
def corpus_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from bench.corpus import generate

    root = tmp_path_factory.mktemp("corpus") / "claude"
    generate(str(root), 12_000_000, seed=5, session_mean=250_000, projects=4)
    return root


def _env(endpoint: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PG", "CCOTEL_"))}
    env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = endpoint
    return env


def backfill(root: Path, state: str, endpoint: str, workers: int) -> str:
    env = _env(endpoint)
    proc = subprocess.run(
        [sys.executable, "-m", "ccotel", "backfill", "--root", str(root), "--state", state, "--host-id", "A",
         "--workers", str(workers), "--parallel-min-mb", "1", "-v"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stderr


def received_once(rx: OtlpReceiver) -> set[str]:
    counts = Counter(s["span_id"] for s in rx.spans)
    assert counts and max(counts.values()) == 1, sum(c - 1 for c in counts.values())
    return set(counts)


def report(root: Path, ledger: Ledger | None) -> list[tuple[Any, ...]]:
    assert ledger is not None
    try:
        data = gather(Options(roots=(str(root),)), ledger, workers=1)
    finally:
        ledger.close()
    rows = as_json(summarize(data, Query(view="session")))["sessions"]
    return sorted((r["sessionId"], r["inputTokens"], r["outputTokens"], r["cacheCreationTokens"],
                   r["cacheReadTokens"], r["totalTokens"], round(r["totalCost"], 9)) for r in rows)


def test_backfill_in_two_processes_on_postgres_equals_one(pg: PostgresServer, corpus: Path, tmp_path: Path) -> None:
    root = corpus
    one_url, two_url = pg.create_db("catchup_one"), pg.create_db("catchup_two")
    sqlite_dir = tmp_path / "state"
    with OtlpReceiver() as one, OtlpReceiver() as two, OtlpReceiver() as local:
        assert "catching up on" not in backfill(root, one_url, one.endpoint, 1)
        err = backfill(root, two_url, two.endpoint, 2)
        assert re.search(r"catching up on [0-9.]+ MB in 2 processes", err), err[-3000:]
        backfill(root, str(sqlite_dir), local.endpoint, 1)
        spans = received_once(one)
        assert received_once(two) == spans == received_once(local)
    st_one, st_two = PgState(one_url, "A"), PgState(two_url, "A")
    try:
        assert st_two.files() == st_one.files() and len(st_one.files()) > 1
        assert st_two.calls() == st_one.calls() and st_two.prompts() == st_one.prompts()
        assert st_two.counters() == st_one.counters()
    finally:
        st_one.close()
        st_two.close()
    with psycopg.connect(two_url, autocommit=True) as c:
        # the workers dropped their rows when they closed; the parent's ends with its process (postgres.WRITER_KEPT)
        rows = c.execute("SELECT count(*) FROM ccotel.writers").fetchone()
        assert rows is not None and rows[0] <= 1
    want = report(root, Ledger.in_state_dir(str(sqlite_dir), (str(root),)))
    assert want
    assert report(root, open_report_ledger(two_url, "A", (str(root),))) == want
    assert report(root, open_report_ledger(one_url, "A", (str(root),))) == want


def run_until_caught_up(root: Path, url: str, rx: OtlpReceiver, workers: int) -> str:
    """``ccotel run`` until it follows live with every span of the history delivered, then SIGTERM."""
    with tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ccotel", "run", "--root", str(root), "--state", url, "--host-id", "A",
             "--workers", str(workers), "--parallel-min-mb", "1", "--metrics-addr", "none", "--no-status", "-v"],
            env=_env(rx.endpoint), stdout=subprocess.DEVNULL, stderr=err, text=True)
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and proc.poll() is None:
                err.seek(0)
                if "caught up:" in err.read():
                    break
                time.sleep(0.2)
            time.sleep(3.0)  # the last acknowledgements committed
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        err.seek(0)
        text = err.read()
    assert proc.returncode == 0 and "caught up:" in text, text[-3000:]
    return text


def test_run_catching_up_in_two_processes_on_postgres_counts_as_one(pg: PostgresServer, corpus: Path) -> None:
    """``ccotel run``'s catch-up: the workers add their counter increments to their host's totals
    (each a writer of its own), and the host's own pipeline then goes on from them."""
    one_url, two_url = pg.create_db("run_one"), pg.create_db("run_two")
    with OtlpReceiver() as one, OtlpReceiver() as two:
        assert "catching up on" not in run_until_caught_up(corpus, one_url, one, 0)
        err = run_until_caught_up(corpus, two_url, two, 2)
        assert re.search(r"catching up on [0-9.]+ MB in 2 processes", err), err[-3000:]
        assert received_once(two) == received_once(one)
    st_one, st_two = PgState(one_url, "A"), PgState(two_url, "A")
    try:
        want = st_one.counters()
        assert sum(v for k, v in want.items() if "ccotel_lines_read" in k) > 0, sorted(want)[:20]
        assert st_two.counters() == want
        assert st_two.files() == st_one.files()
    finally:
        st_one.close()
        st_two.close()
