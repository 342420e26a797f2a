"""A console preview (`ccotel backfill --traces-exporter console`) marks nothing as sent: a later
backfill to a trace backend still sends the whole history (issue 28: it sent nothing)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson

from tests.support.otlp import OtlpReceiver
from tests.whole.test_faults import history

PREVIEW_NOTE = "a console preview marks nothing as sent"


def backfill(root: Path, state: Path, exporter: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "ccotel", "backfill", "--root", str(root), "--state-dir", str(state),
                           "--traces-exporter", exporter], capture_output=True, text=True, timeout=120, env=full_env)


def test_a_console_preview_leaves_the_history_to_send(tmp_path: Path) -> None:
    root, state = tmp_path / "claude", tmp_path / "state"
    history(root, sessions=3)
    preview = backfill(root, state, "console")
    assert preview.returncode == 0, preview.stderr
    shown = [orjson.loads(line)["span_id"] for line in preview.stdout.splitlines()]
    assert shown
    with OtlpReceiver() as rx:
        sent = backfill(root, state, "otlp", {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": rx.endpoint})
        assert sent.returncode == 0, sent.stderr
        assert f"{len(shown)} spans exported" in sent.stderr, sent.stderr
        assert sorted(s["span_id"] for s in rx.spans) == sorted(shown)
    assert preview.stderr.count(PREVIEW_NOTE) == 1, preview.stderr  # said once
    report = subprocess.run([sys.executable, "-m", "ccotel", "report", "--root", str(root), "--state-dir", str(state),
                             "--json"], capture_output=True, text=True, timeout=60)
    assert orjson.loads(report.stdout)["totals"]["apiCalls"] == 3 * 3 * 2  # the ledger: every call once
    again = backfill(root, state, "console")  # a preview after the real send still shows it all
    assert sorted(orjson.loads(line)["span_id"] for line in again.stdout.splitlines()) == sorted(shown)


def test_none_still_marks_the_history_as_sent(tmp_path: Path) -> None:
    """docs/run.md: `none` sends nothing while metrics and the ledger still count: its checkpoints move."""
    root, state = tmp_path / "claude", tmp_path / "state"
    history(root, sessions=2)
    first = backfill(root, state, "none")
    assert first.returncode == 0 and PREVIEW_NOTE not in first.stderr, first.stderr
    again = backfill(root, state, "none")
    assert "0 lines, 0 spans exported" in again.stderr, again.stderr
