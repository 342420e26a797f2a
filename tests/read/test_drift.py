"""Format drift: unknown line types and fields, by Claude Code version (drift.py)."""

from __future__ import annotations

from pathlib import Path

import orjson

from ccotel.metrics.counters import Metrics
from ccotel.read.drift import FormatDrift
from ccotel.read.parse import parse_line
from ccotel.run.pipeline import Options, Pipeline
from ccotel.store.sqlite import SqliteState as State
from ccotel.store.state import Commit
from tests.harness.fixtures import FIXTURES_DIR
from tests.support.ccusage import realdata_dir
from tests.transcript import Transcript, text


def test_everything_the_real_data_writes_is_known():
    """Every line type and top-level field of shared/realdata (1.0.17 to 2.1.237) and of the real-CLI
    fixtures of the version matrix is in rules.KNOWN_FIELDS: a report is news."""
    drift = FormatDrift(sample_lines=10 ** 9)
    files = list(realdata_dir().glob("*/*.jsonl")) + [p for p in FIXTURES_DIR.rglob("*.jsonl") if "runs" not in p.parts]
    found = []
    for path in files:
        for i, line in enumerate(path.read_bytes().splitlines()):
            for e in parse_line(line, i).entries:
                found += drift.observe(e, line)
    assert len(files) > 150 and found == []


def test_a_new_release_is_seen_by_version(tmp_path: Path):
    root = tmp_path / "claude"
    sid = "abababab-1111-4222-8333-444444444444"
    t = Transcript(sid, version="2.1.999")
    t.prompt("hi", parent=None)
    t.response("msg_1", [text("hello")], stop_reason="end_turn")
    t.lines[-1]["newField"] = {"x": 1}
    for _ in range(3):
        t.raw({"type": "future-thing", "sessionId": sid, "payload": 1})
    path = root / "projects" / "-p" / f"{sid}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(t.bytes())
    state = State(str(tmp_path / "state"))
    state.commit(Commit(marks=[("caught_up", 0)]))  # counted, as after a first catch-up
    metrics = Metrics()
    p = Pipeline(Options(roots=(str(root),)), emit=lambda spans: None, state=state, metrics=metrics)
    p.backfill(close_all=True)
    assert metrics.value("ccotel_format_unknown", "2.1.999", "line_type", "future-thing") == 0  # no version on it
    assert metrics.value("ccotel_format_unknown", "unknown", "line_type", "future-thing") == 3
    assert metrics.value("ccotel_format_unknown", "2.1.999", "field", "assistant.newField") == 1
    assert p.stats.errors == {}  # drift is not an error: the rest was read as usual


def test_label_values_are_bounded():
    drift = FormatDrift(max_series=5)
    labels = set()
    for i in range(50):
        line = orjson.dumps({"type": f"t{i}" + "x" * 100, "version": "9.9.9"})
        for e in parse_line(line, 0).entries:
            labels.update(drift.observe(e, line))
    assert len(labels) == 6 and ("other", "line_type", "other") in labels
    assert all(len(name) <= 64 for _v, _k, name in labels)
