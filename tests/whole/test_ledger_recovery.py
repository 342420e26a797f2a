"""Faults under the usage ledger (``ledger.db``), as issue 27's attacks made them.

- Damaged (garbage bytes, a truncated file, a 0-byte one): it recovers as the state does, set
  aside to ``ledger.db.corrupt-<UTC time>``, rebuilt from the transcripts still on disk (as a first
  start fills it), said once in the log; reports then equal a fresh ledger's. (It used to log
  "usage ledger cannot be used" at every start and record nothing again, for good.)
- A full disk under it: no row is lost; the checkpoints wait for the rows. (Rows were dropped
  while the checkpoints moved on: reports showed 3 tool calls of 5,321.)
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import orjson
import pytest

from ccotel.commands.report.json_doc import as_json
from ccotel.commands.report.rows import Query
from ccotel.commands.report.summary import summarize
from ccotel.commands.report.transcripts import gather
from ccotel.export.memory_sink import MemorySink
from ccotel.export.sinks import ExportQueue
from ccotel.metrics.counters import Metrics
from ccotel.run.pipeline import Options, Pipeline
from ccotel.store.ledger import Ledger
from ccotel.store.sqlite import SqliteState
from tests.harness.fixtures import load_fixture
from tests.whole.test_faults import _FullDisk, ccotel, finish

FIXTURES = ("2.1.330-s03_parallel_subagents", "2.1.330-s06_kill_orphan_resume", "s01_bash_tool")


def _history(root: Path) -> None:
    for name in FIXTURES:
        shutil.copytree(load_fixture(name).config_dir, root, dirs_exist_ok=True)


def _backfill(root: Path, state: Path) -> str:
    code, err = finish(ccotel("backfill", "--root", str(root), "--state-dir", str(state), "--traces-exporter",
                              "none", "--workers", "1"))
    assert code == 0, err
    assert "Traceback" not in err, err
    return err


def _report(root: Path, state: Path, view: str) -> dict[str, object]:
    proc = ccotel("report", view, "--json", "--root", str(root), "--state-dir", str(state), "--workers", "1")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return orjson.loads(out)


def _damage(db: Path, how: str) -> None:
    size = db.stat().st_size
    if how == "garbage":
        db.write_bytes(os.urandom(size))
    elif how == "truncated":  # the header and the first pages stay: SQLite opens it, its pages are gone
        with open(db, "r+b") as f:
            f.truncate(size // 3)
    else:
        db.write_bytes(b"")


def _filling(db: sqlite3.Connection) -> str | None:
    row = db.execute("SELECT value FROM meta WHERE key = 'filling'").fetchone()
    return row[0] or None if row else None


@pytest.mark.parametrize("how", ["garbage", "truncated", "empty"])
def test_a_damaged_ledger_is_set_aside_and_rebuilt_from_the_transcripts(tmp_path, how):
    root = tmp_path / "claude"
    _history(root)
    state = tmp_path / "state"
    _backfill(root, state)
    ledger = state / "ledger.db"
    db = sqlite3.connect(ledger)  # everything in the main file: the damage is to what a restart reads
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    assert ledger.stat().st_size > 3 * 4096
    _damage(ledger, how)

    err = _backfill(root, state)  # a start on the damaged ledger, the state intact

    aside = [p for p in state.iterdir() if p.name.startswith("ledger.db.corrupt-") and not p.name.endswith(
        ("-wal", "-shm"))]
    assert len(aside) == 1, sorted(p.name for p in state.iterdir())
    said = [line for line in err.splitlines() if "ledger" in line and "aside" in line]
    assert len(said) == 1, err
    assert aside[0].name in said[0] and "transcripts still on disk" in said[0], said
    assert "cannot be used" not in err, err
    db = sqlite3.connect(ledger)
    assert db.execute("PRAGMA quick_check").fetchone() == ("ok",)
    assert db.execute("SELECT count(*) FROM calls").fetchone()[0] > 0
    assert _filling(db) is None  # the rebuild ended: reports may answer from the ledger alone
    db.close()

    fresh = tmp_path / "fresh"
    _backfill(root, fresh)
    db = sqlite3.connect(fresh / "ledger.db")
    assert _filling(db) is None  # a first catch-up marks it, and its end clears the mark
    db.close()
    for view in ("session", "daily", "project"):
        ours, theirs = _report(root, state, view), _report(root, fresh, view)
        assert ours == theirs, view
        assert ours["totals"]["toolCalls"] and ours["totals"]["subagents"], ours["totals"]

    again = _backfill(root, state)  # said once: the next start finds a sound ledger
    assert "aside" not in again and "cannot be used" not in again, again


# -- a full disk under the ledger ---------------------------------------------------------------------


def _report_json(root: Path, ledger: Ledger, view: str = "session") -> dict[str, object]:
    doc = as_json(summarize(gather(Options(roots=(str(root),)), ledger, workers=1, grace_ns=-(10**18)),
                            Query(view=view)))
    doc.pop("source")
    return doc


def _run(root: Path, state_dir: Path, fault: bool) -> tuple[Pipeline, ExportQueue, Ledger, _FullDisk | None]:
    state = SqliteState(str(state_dir))
    ledger = Ledger(str(state_dir / "ledger.db"), roots=(str(root),))
    full = None
    if fault:
        full = _FullDisk(ledger.db)
        ledger.db = full  # type: ignore[assignment]
    queue = ExportQueue(MemorySink())
    pipeline = Pipeline(Options(roots=(str(root),)), emit=queue.submit, state=state, metrics=Metrics(), ledger=ledger)
    queue.on_ack = pipeline.acknowledge
    return pipeline, queue, ledger, full


@pytest.mark.parametrize("space_again", [True, False], ids=["space-again", "stopped-while-full"])
def test_a_full_disk_under_the_ledger_loses_no_row(tmp_path, space_again):
    """Every ledger write fails (a full disk) while the history is read and exported. Its rows are
    kept and the checkpoints wait for them: with space again they are all written; stopped while
    still full, the next start reads those lines again. Either way the report then equals a
    fresh ledger's: no tool call, subagent or health row missing (issue 27: 3 tool calls of 5,321)."""
    root = tmp_path / "claude"
    _history(root)
    state_dir = tmp_path / "state"
    pipeline, queue, ledger, full = _run(root, state_dir, fault=True)
    pipeline.backfill(close_all=True)
    assert queue.flush(timeout_s=30)
    pipeline.process_acks()
    assert full is not None and full.refused > 0
    assert pipeline.stats.errors["ledger_write"] > 0
    if space_again:
        full.full = False
        pipeline.process_acks()  # the next commit writes what waited, then the checkpoints
    queue.close()
    assert pipeline.state is not None
    pipeline.state.close()
    ledger.db = full.db  # type: ignore[assignment]
    ledger.close()

    pipeline, queue, ledger, _ = _run(root, state_dir, fault=False)  # the next start
    pipeline.backfill(close_all=True)
    assert queue.close(timeout_s=30)
    pipeline.process_acks()
    first, queue2, fresh, _ = _run(root, tmp_path / "fresh", fault=False)  # a ledger that never failed
    first.backfill(close_all=True)
    assert queue2.close(timeout_s=30)
    first.process_acks()
    for view in ("session", "daily"):
        ours = _report_json(root, ledger, view)
        assert ours == _report_json(root, fresh, view), view
        assert ours["totals"]["toolCalls"] and ours["totals"]["subagents"]
