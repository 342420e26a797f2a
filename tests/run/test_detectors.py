"""The detectors' absent-transcript reasons: the same rule as ccotel check on the same inputs, each
counted once, across restarts; what is legitimately absent is never a missing transcript."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ccotel.commands.check import _ABSENT_CODES, check_session
from ccotel.export.sinks import ExportQueue, make_sink
from ccotel.metrics.counters import Metrics
from ccotel.rules.transcript import Absence
from ccotel.run.pipeline import Options, Pipeline
from ccotel.store.sqlite import SqliteState as State
from ccotel.store.state import Commit
from tests.commands.test_check import absent_root, real_copy

REASONS = [a.value for a in Absence]


def run_once(root: Path, state_dir: Path, now_ns: int, deleted: list[Path] | None = None,
             before_tick=None) -> Metrics:
    """One ccotel run on ``root`` (counting: a restart after the first catch-up), its clock at ``now_ns``."""
    if not state_dir.exists():
        State(str(state_dir)).commit(Commit(marks=[("caught_up", 0)]))
    now = [now_ns]
    metrics, queue = Metrics(), ExportQueue(make_sink("none"))
    state = State(str(state_dir))
    pipeline = Pipeline(Options(roots=(str(root),)), emit=queue.submit, state=state, metrics=metrics,
                        clock=lambda: now[0])
    queue.on_ack = pipeline.acknowledge
    pipeline.backfill()
    if before_tick is not None:
        before_tick(pipeline)
    now[0] += 10 * 60 * 10 ** 9  # past the stall timeout
    pipeline.tick()
    queue.close(timeout_s=10)
    pipeline.process_acks()
    state.close() if hasattr(state, "close") else None
    return metrics


def resets(m: Metrics) -> dict[str, float]:
    return {r: m.value("ccotel_session_resets", r, "transcript") for r in REASONS
            if m.value("ccotel_session_resets", r, "transcript")}


@pytest.mark.parametrize("kind", ["not_persisted", "swept", "missing"])
def test_check_and_the_detector_agree_and_count_once(tmp_path, kind):
    root, sid, now_ns = absent_root(tmp_path, kind)
    h = check_session(sid, (str(root),), now_ns=now_ns)
    reason = next(a for a, (code, _) in _ABSENT_CODES.items() if code == h.findings[0].code)
    m = run_once(root, tmp_path / "state", now_ns)
    assert resets(m) == {reason.value: 1}
    missing = m.value("ccotel_missing_transcripts", "session")
    assert missing == (1 if reason is Absence.MISSING else 0)  # legitimately absent: never missing
    again = run_once(root, tmp_path / "state", now_ns + 60 * 10 ** 9)  # a restart: counted once
    assert resets(again) == {reason.value: 1}
    assert again.value("ccotel_missing_transcripts", "session") == missing


def test_a_live_session_without_transcript_is_not_judged(tmp_path):
    import json

    root, sid, now_ns = absent_root(tmp_path, "not_persisted")
    f = next((root / "sessions").glob("*.json"))
    doc = json.loads(f.read_text())
    with open(f"/proc/{os.getpid()}/stat") as fh:
        start = fh.read().rsplit(")", 1)[1].split()[19]
    f.write_text(json.dumps({**doc, "pid": os.getpid(), "procStart": start}))
    assert resets(run_once(root, tmp_path / "state", now_ns)) == {}


@pytest.mark.parametrize("age_days,reason", [(40, "transcript_swept"), (0, "missing_transcript")])
def test_a_followed_transcript_deleted(tmp_path, age_days, reason):
    """A real transcript ccotel follows is deleted: older than cleanupPeriodDays it was swept, else lost."""
    root, sid, main = real_copy("s01_bash_tool", tmp_path)
    mtime = main.stat().st_mtime - age_days * 86400
    os.utime(main, (mtime, mtime))
    now_ns = int((main.stat().st_mtime + (age_days + 0.01) * 86400) * 1e9)

    def delete(p: Pipeline) -> None:
        main.unlink()
        p.forget_deleted([str(main)])

    m = run_once(root, tmp_path / "state", now_ns, before_tick=delete)
    assert resets(m) == {reason: 1}
    assert m.value("ccotel_missing_transcripts", "session") == (reason == "missing_transcript")
    assert resets(run_once(root, tmp_path / "state", now_ns)) == {reason: 1}  # restart: not again


def test_a_followed_transcript_moved_to_another_project_dir_is_relocated(tmp_path):
    root, sid, main = real_copy("s01_bash_tool", tmp_path)
    now_ns = int((main.stat().st_mtime + 3600) * 1e9)

    def move(p: Pipeline) -> None:
        dest = root / "projects" / "-elsewhere"
        dest.mkdir()
        shutil.move(str(main), dest / main.name)
        p.forget_deleted([str(main)])

    m = run_once(root, tmp_path / "state", now_ns, before_tick=move)
    assert resets(m) == {"transcript_relocated": 1} and m.value("ccotel_missing_transcripts", "session") == 0


def test_a_deleted_transcript_the_config_dir_still_knows_of_is_counted_once(tmp_path):
    """Swept while followed, and its session still named by a sessions/<pid>.json (a process killed):
    the deletion and the session known on disk are one event, counted once, also after a restart."""
    root, sid, main = real_copy("s06_kill_orphan_resume", tmp_path, version="2.1.330", snapshot="after_kill")
    assert list((root / "sessions").glob("*.json"))  # the config dir names the session besides its transcript
    old = main.stat().st_mtime - 40 * 86400
    for p in [main, *(root / "sessions").glob("*.json")]:
        os.utime(p, (old, old))
    now_ns = int((old + 40.01 * 86400) * 1e9)

    def delete(p: Pipeline) -> None:
        main.unlink()
        p.forget_deleted([str(main)])

    m = run_once(root, tmp_path / "state", now_ns, before_tick=delete)
    assert resets(m) == {"transcript_swept": 1}
    assert resets(run_once(root, tmp_path / "state", now_ns + 10 ** 9)) == {"transcript_swept": 1}


def test_deleted_empty_transcripts_are_no_lost_sessions(tmp_path):
    """Empty transcript files (never a line in them) deleted, thousands at once: no session was lost, so
    no reset and no missing transcript; and the deletion is handled in bounded work per file."""
    import time
    import uuid

    root = tmp_path / "claude"
    proj = root / "projects" / "-p"
    proj.mkdir(parents=True)
    empty = [proj / f"{uuid.uuid4()}.jsonl" for _ in range(3000)]
    for p in empty:
        p.touch()
    now_ns = int((time.time() + 3600) * 1e9)
    took: list[float] = []

    def delete(p: Pipeline) -> None:
        for f in empty:
            f.unlink()
        t0 = time.monotonic()
        p.forget_deleted([str(f) for f in empty])
        took.append(time.monotonic() - t0)

    m = run_once(root, tmp_path / "state", now_ns, before_tick=delete)
    assert took[0] < 2.0  # a pass over the followed files per deleted path made it quadratic
    assert resets(m) == {} and m.value("ccotel_missing_transcripts", "session") == 0


def test_a_first_start_traces_history_and_counts_no_missing_subagent(tmp_path):
    """The public transcripts name subagents whose transcripts are not in them: read on the very first
    start that is history (traces only), so no missing transcript is counted, then or after a restart."""
    from tests.support.ccusage import realdata_dir, realdata_tree

    if not realdata_dir().is_dir():
        pytest.skip("no shared/realdata beside the checkout")
    root = realdata_tree(tmp_path / "claude", mode="symlink")
    now = [int(1e9 * max(p.stat().st_mtime for p in root.rglob("*.jsonl"))) + 3600 * 10 ** 9]
    for _ in range(2):  # the first start, then a restart on its state
        metrics, queue = Metrics(), ExportQueue(make_sink("none"))
        state = State(str(tmp_path / "state"))
        p = Pipeline(Options(roots=(str(root),)), emit=queue.submit, state=state, metrics=metrics,
                     clock=lambda: now[0])
        queue.on_ack = p.acknowledge
        p.backfill()
        now[0] += 10 * 60 * 10 ** 9  # past the stall timeout: every named subagent is judged
        p.tick()
        queue.close(timeout_s=10)
        p.process_acks()
        state.close()
        assert metrics.value("ccotel_missing_transcripts", "subagent") == 0
        assert metrics.value("ccotel_missing_transcripts", "session") == 0, resets(metrics)
