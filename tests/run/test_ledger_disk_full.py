"""A full disk while the usage ledger is written: the ledger's write fails first (it is written
before the checkpoints, which then wait for its rows), so the disk's own reason must be what
``ccotel_checkpoint_errors_total`` counts, not the store that happened to hit it first.

The fault is injected where SQLite reports it: the ledger's COMMIT fails as SQLite fails on a full
disk (``database or disk is full``, SQLITE_FULL; an ENOSPC from the file system reaches Python so).
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ccotel.export.memory_sink import MemorySink
from ccotel.export.sinks import ExportQueue
from ccotel.metrics.counters import Metrics
from ccotel.run.pipeline import Options, Pipeline
from ccotel.store.ledger import Ledger
from ccotel.store.sqlite import SqliteState
from tests.whole.test_faults import expected_ids, history


class _Refusing:
    """A ledger's connection whose COMMIT fails with ``error`` while ``failing``."""

    def __init__(self, db: sqlite3.Connection, error: sqlite3.Error) -> None:
        self.db, self.error, self.failing = db, error, True

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == "COMMIT" and self.failing:
            raise self.error
        return self.db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


@pytest.mark.parametrize("error,reason", [
    (sqlite3.OperationalError("database or disk is full"), "disk_full"),
    (sqlite3.OperationalError("disk I/O error"), "io_error"),
    (sqlite3.OperationalError("attempt to write a readonly database"), "read_only"),
    (sqlite3.OperationalError("database is locked"), "ledger"),  # the ledger's own trouble, not the disk's
])
def test_a_ledger_write_failing_on_the_disk_counts_the_disk_s_reason(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, error: sqlite3.Error, reason: str) -> None:
    root = tmp_path / "claude"
    history(root, sessions=3)
    state = SqliteState(str(tmp_path / "state"))
    ledger = Ledger.in_state_dir(str(tmp_path / "state"), (str(root),))
    fault = _Refusing(ledger.db, error)
    ledger.db = fault  # type: ignore[assignment]
    metrics, sink = Metrics(), MemorySink()
    queue = ExportQueue(sink)
    pipeline = Pipeline(Options(roots=(str(root),)), emit=queue.submit, state=state, metrics=metrics, ledger=ledger)
    queue.on_ack = pipeline.acknowledge
    try:
        with caplog.at_level(logging.ERROR, logger="ccotel.pipeline"):
            pipeline.backfill()
            assert queue.flush(timeout_s=30)
            pipeline.process_acks()
        assert {f"{s.span_id:016x}" for s in sink.spans} == expected_ids(root)  # tracing goes on
        counted = {r: metrics.value("ccotel_checkpoint_errors", r)
                   for r in ("disk_full", "io_error", "read_only", "ledger")}
        assert counted[reason] > 0 and sum(counted.values()) == counted[reason], counted
        [said] = [r.getMessage() for r in caplog.records if "usage ledger" in r.getMessage()]
        assert reason in said, said
        fault.failing = False  # room again: the rows held are written with the next commit
        assert ledger.retry() and ledger.pending == 0
    finally:
        queue.close()
        ledger.close()
        state.close()
