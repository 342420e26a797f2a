"""A report says what it does not know instead of printing 0 (issue 27: "from the ledger+transcripts",
tokens right, but 3 tool calls against 5,321, 0 subagents, health ok).

Tool calls, subagents and health come from the usage ledger alone. When it lacks calls the
transcripts hold, the rows holding them show those figures as unknown (`?` in the table, `null`
in --json, with `unknownReason`), in the two ways it comes to lack them:
- a first catch-up still running: the ledger holds part of the history (marked as filling);
- a full disk: ledger writes fail while the transcripts go on.
Tokens, cost and calls stay right: they are read from the transcripts.
"""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import pytest
from rich.console import Console

from ccotel.commands.report.json_doc import as_json
from ccotel.commands.report.rows import Query, Report
from ccotel.commands.report.summary import summarize
from ccotel.commands.report.table import render
from ccotel.commands.report.transcripts import gather
from ccotel.export.memory_sink import MemorySink
from ccotel.export.sinks import ExportQueue
from ccotel.run.pipeline import Options, Pipeline
from ccotel.run.runner import fill_ledger
from ccotel.run.stopping import Interrupted, Stopper
from ccotel.store.ledger import LEDGER_FILE, Ledger
from ccotel.store.sqlite import SqliteState
from tests.whole.test_faults import _FullDisk, history

S = 10**9
UNKNOWN = ("toolCalls", "toolErrors", "subagents", "health")


def _aged(root: Path) -> None:
    """Transcripts written a month ago: a first catch-up's history (not re-read for its mtime)."""
    old = time.time_ns() - 30 * 86_400 * S
    for p in (root / "projects").rglob("*.jsonl"):
        os.utime(p, ns=(old, old))


def _report(root: Path, ledger: Ledger | None, view: str = "session") -> Report:
    return summarize(gather(Options(roots=(str(root),)), ledger, workers=1), Query(view=view))


def _pipeline(root: Path, state_dir: Path, ledger: Ledger) -> tuple[Pipeline, ExportQueue]:
    queue = ExportQueue(MemorySink())
    pipeline = Pipeline(Options(roots=(str(root),)), emit=queue.submit, state=SqliteState(str(state_dir)),
                        ledger=ledger)
    queue.on_ack = pipeline.acknowledge
    return pipeline, queue


def _complete(root: Path, state_dir: Path) -> Report:
    """The report once a first catch-up has written the whole ledger."""
    fill_ledger(Options(roots=(str(root),)), str(state_dir), Stopper())
    ledger = Ledger(str(state_dir / LEDGER_FILE), roots=(str(root),))
    pipeline, queue = _pipeline(root, state_dir, ledger)
    pipeline.backfill()
    assert queue.close(timeout_s=30)
    pipeline.process_acks()
    try:
        return _report(root, ledger)
    finally:
        ledger.close()


def _table(report: Report) -> str:
    out = io.StringIO()
    render(report, Console(file=out, width=250, no_color=True), Query(view=report.view))
    return out.getvalue()


def test_a_first_catch_up_still_running(tmp_path: Path) -> None:
    root = tmp_path / "claude"
    history(root, sessions=6)
    _aged(root)
    whole = _complete(root, tmp_path / "whole")
    state_dir = tmp_path / "state"
    fill_ledger(Options(roots=(str(root),)), str(state_dir), Stopper())  # a first start: marked as filling
    ledger = Ledger(str(state_dir / LEDGER_FILE), roots=(str(root),))
    pipeline, queue = _pipeline(root, state_dir, ledger)
    read: list[int] = []

    def progress(done: int, total: int) -> None:
        read.append(done)
        if len(read) == 3:  # a few sessions in: the catch-up is still running
            raise Interrupted(15)

    with pytest.raises(Interrupted):
        pipeline.backfill(progress)
    queue.close(timeout_s=30)
    got = _report(root, ledger)
    doc, ref = as_json(got), as_json(whole)
    assert 0 < len(ledger.sessions_with_calls()) < 6
    # what the transcripts say: right, though the ledger holds 2 sessions of 6
    for k in ("inputTokens", "outputTokens", "cacheReadTokens", "totalTokens", "totalCost", "apiCalls"):
        assert doc["totals"][k] == ref["totals"][k], k
    # what only the ledger says: known for its sessions, unknown (never 0) for the others and the totals
    known = {r["sessionId"]: r for r in ref["sessions"]}
    in_ledger = ledger.sessions_with_calls()
    for row in doc["sessions"]:
        if row["sessionId"] in in_ledger:
            assert all(row[k] == known[row["sessionId"]][k] for k in UNKNOWN), row
        else:
            assert all(row[k] is None for k in UNKNOWN), row
    assert all(doc["totals"][k] is None for k in UNKNOWN)
    assert "still being filled" in doc["unknownReason"]
    table = _table(got)
    assert "?" in table and "still being filled" in table
    ledger.close()

    ledger = Ledger(str(state_dir / LEDGER_FILE), roots=(str(root),))  # the catch-up goes on to its end
    pipeline, queue = _pipeline(root, state_dir, ledger)
    pipeline.backfill()
    assert queue.close(timeout_s=30)
    pipeline.process_acks()
    done = as_json(_report(root, ledger))
    assert done == {**ref, "source": done["source"]} and done["unknownReason"] is None
    ledger.close()


def test_ledger_writes_failing_on_a_full_disk(tmp_path: Path) -> None:
    """The ledger was last written at the first session's time; the next sessions (hours later)
    are read while every ledger write fails: their rows do not know their tool calls."""
    root = tmp_path / "claude"
    paths = history(root, sessions=4)
    later = [p.read_bytes() for p in paths[1:]]
    for p in paths[1:]:
        p.unlink()
    whole_root = tmp_path / "whole-claude"
    history(whole_root, sessions=4)
    state_dir = tmp_path / "state"
    first_ns = 1_760_000_000 * S + 3_600 * S  # an hour after the first session: when the ledger was written
    ledger = Ledger(str(state_dir / LEDGER_FILE), roots=(str(root),), clock=lambda: first_ns)
    pipeline, queue = _pipeline(root, state_dir, ledger)
    pipeline.backfill(close_all=True)
    assert queue.flush(timeout_s=30)
    pipeline.process_acks()
    full = _FullDisk(ledger.db)
    ledger.db = full  # type: ignore[assignment]
    for p, data in zip(paths[1:], later, strict=True):
        p.write_bytes(data)
    pipeline.backfill(close_all=True)
    assert queue.close(timeout_s=30)
    pipeline.process_acks()
    assert full.refused and pipeline.stats.errors["ledger_write"]
    ledger.db = full.db  # type: ignore[assignment]  # the report reads the ledger as it is on disk
    got = as_json(_report(root, ledger))
    ref = as_json(_report(whole_root, None))
    assert [r["totalTokens"] for r in got["sessions"]] == [r["totalTokens"] for r in ref["sessions"]]
    first = paths[0].stem
    for row in got["sessions"]:
        if row["sessionId"] == first:
            assert row["toolCalls"] == 3 and row["health"] is not None, row
        else:
            assert all(row[k] is None for k in UNKNOWN), row
    assert got["totals"]["toolCalls"] is None
    assert "not recording" in got["unknownReason"]
    ledger.close()
