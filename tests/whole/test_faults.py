"""Faults around ccotel, each with what is kept and what the operator sees.

- the state dir read-only: refused with a clear message (exit 1), unless --state-dir none;
- the disk full while committing: no crash, reading and exporting go on, the commit is retried,
  nothing lost or counted twice (SQLite errors injected, and a real full tmpfs when one mounts);
- a corrupt state database: moved aside to state.db.corrupt-<time>, rebuilt from the transcripts
  (a first start: history re-sent with the same ids, its events not counted again);
- a second ccotel on the same state: refused naming the pid that holds it (exit 75); check and
  report still work;
- transcripts deleted while followed (Claude Code's cleanup): no error, their rows pruned;
- unreadable files: counted once as `unreadable`, the rest delivered, read once readable;
- the clock jumping: no negative durations; a forward jump (see the xfail) needs pipeline.py.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

from ccotel.export.memory_sink import MemorySink
from ccotel.export.sinks import ExportQueue
from ccotel.metrics.counters import Metrics
from ccotel.run.pipeline import Options, Pipeline
from ccotel.store.sqlite import SqliteState as State
from tests.run.test_signals import wait_until
from tests.support.otlp import OtlpReceiver
from tests.transcript import Transcript, text, tool_use

REPO = Path(__file__).resolve().parents[2]


def history(root: Path, sessions: int = 6, turns: int = 3, project: str = "-tmp-faults") -> list[Path]:
    paths = []
    for i in range(sessions):
        sid = f"{i:08x}-f00d-4bbb-8ccc-dddddddddddd"
        t = Transcript(sid, t_ms=1_760_000_000_000 + i * 10_000_000)
        for j in range(turns):
            t.tool_turn(f"{project[-6:]}{i}_{j}", "x" * 200, "y" * 500)
        paths.append(Path(t.write(str(root / "projects" / project / f"{sid}.jsonl"))))
    return paths


def expected_ids(root: Path) -> set[str]:
    spans: list = []
    Pipeline(Options(roots=(str(root),)), emit=spans.extend).backfill(close_all=True)
    return {f"{s.span_id:016x}" for s in spans}


def ccotel(*args: str, endpoint: str | None = None, log: Path | None = None,
           prefix: tuple[str, ...] = ()) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if endpoint:
        env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = endpoint
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return subprocess.Popen([*prefix, sys.executable, "-m", "ccotel", *args], env=env, cwd=str(REPO),
                            stdout=subprocess.PIPE, stderr=open(log, "w") if log else subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float = 60) -> tuple[int, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, err or ""




def counters(state_dir: Path) -> Counter[str]:
    db = sqlite3.connect(f"file:{state_dir / 'state.db'}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT key, value FROM counters").fetchall()
    finally:
        db.close()
    total: Counter[str] = Counter()
    for k, v in rows:
        total[k.partition(":")[2]] += v
    return total


def state_paths(state_dir: Path) -> set[str]:
    db = sqlite3.connect(f"file:{state_dir / 'state.db'}?mode=ro", uri=True)
    try:
        return {row[0] for row in db.execute("SELECT path FROM files")}
    finally:
        db.close()


@contextlib.contextmanager
def tmpfs(path: Path, size: str, ro: bool = False):
    path.mkdir(parents=True, exist_ok=True)
    opts = f"size={size},mode=0755" + (",ro" if ro else "")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or 'not root'})")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def run_live(root: Path, state: Path, endpoint: str, log: Path) -> subprocess.Popen:
    proc = ccotel("run", "--root", str(root), "--state-dir", str(state), "--metrics-addr", "none", "--no-status",
                  "--workers", "1", "--stall-timeout", "3600", endpoint=endpoint, log=log)
    assert wait_until(lambda: "caught up" in log.read_text() or proc.poll() is not None, 60), log.read_text()
    assert proc.poll() is None, log.read_text()
    return proc


def stop(proc: subprocess.Popen, log: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0, log.read_text()
    assert "Traceback" not in log.read_text(), log.read_text()


# -- the state dir read-only ---------------------------------------------------------------------


def test_read_only_state_dir_is_refused_with_a_clear_message(tmp_path):
    """A demanding user wants durability or to be told: ccotel refuses (exit 1) naming the dir,
    the reason and the two ways out; --state-dir none runs without checkpoints when asked."""
    root = tmp_path / "claude"
    history(root)
    with OtlpReceiver() as rx:
        with tmpfs(tmp_path / "ro", "1m", ro=True) as ro:
            code, err = finish(ccotel("backfill", "--root", str(root), "--state-dir", str(ro / "ccotel"),
                                      endpoint=rx.endpoint))
        assert code == 1, err
        assert "Traceback" not in err, err
        assert f"the state dir {ro / 'ccotel'} cannot be used" in err and "Read-only file system" in err, err
        assert "--state-dir none" in err
        assert not rx.spans  # nothing sent that a restart would send again
        with tmpfs(tmp_path / "rw", "4m") as rw:  # a state that was written, then the disk went read-only
            code, err = finish(ccotel("backfill", "--root", str(root), "--state-dir", str(rw / "ccotel"),
                                      endpoint=rx.endpoint))
            assert code == 0, err
            subprocess.run(["mount", "-o", "remount,ro", str(rw)], check=True)
            code, err = finish(ccotel("run", "--root", str(root), "--state-dir", str(rw / "ccotel"),
                                      "--metrics-addr", "none", endpoint=rx.endpoint))
            assert code == 1 and "Traceback" not in err and "cannot be used" in err, err
        sent = len(rx.spans)
        code, err = finish(ccotel("backfill", "--root", str(root), "--state-dir", "none", endpoint=rx.endpoint))
        assert code == 0 and "no checkpoints" in err, err
        assert len(rx.spans) == 2 * sent


# -- the disk full while committing --------------------------------------------------------------


class _FullDisk:
    """Wraps State's connection: every COMMIT fails as SQLite fails on a full disk while ``full``."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.full = True
        self.refused = 0

    def execute(self, sql: str, *args):
        if sql == "COMMIT" and self.full:
            self.refused += 1
            raise sqlite3.OperationalError("database or disk is full")
        return self.db.execute(sql, *args)

    def __getattr__(self, name: str):
        return getattr(self.db, name)


def _pipeline(root: Path, state: State, sink: MemorySink) -> tuple[Pipeline, ExportQueue, Metrics]:
    metrics = Metrics()
    queue = ExportQueue(sink)
    pipeline = Pipeline(Options(roots=(str(root),)), emit=queue.submit, state=state, metrics=metrics)
    queue.on_ack = pipeline.acknowledge
    return pipeline, queue, metrics


@pytest.mark.parametrize("how", ["injected", "tmpfs"])
def test_disk_full_while_committing_keeps_reading_and_retries(tmp_path, caplog, how):
    root = tmp_path / "claude"
    history(root, sessions=8)
    expected = expected_ids(root)
    with contextlib.ExitStack() as stack:
        if how == "tmpfs":
            state_dir = stack.enter_context(tmpfs(tmp_path / "small", "600k")) / "ccotel"
        else:
            state_dir = tmp_path / "state"
        state = State(str(state_dir))
        if how == "tmpfs":  # fill what is left of it
            ballast = state_dir.parent / "ballast"
            with contextlib.suppress(OSError), open(ballast, "wb", buffering=0) as f:
                while True:
                    f.write(b"\1" * 4096)
            fault = None
        else:
            fault = _FullDisk(state._db)
            state._db = fault  # type: ignore[assignment]
        sink = MemorySink()
        pipeline, queue, metrics = _pipeline(root, state, sink)
        with caplog.at_level(logging.DEBUG, logger="ccotel.state"):
            pipeline.backfill()  # commits fail all along: no exception, everything read and exported
            assert queue.flush(timeout_s=30)
            pipeline.process_acks()
        assert {f"{s.span_id:016x}" for s in sink.spans} == expected
        assert state.pending > 0 and state.failures > 1
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and "checkpoint not written" in errors[0].getMessage()
        assert "disk_full" in errors[0].getMessage()
        # space again: the next attempt writes everything held
        if fault is not None:
            fault.full = False
        else:
            os.unlink(ballast)
        assert state.retry() and state.pending == 0
        queue.close()
        totals = metrics.totals()
        state.close()
        # a restart sends nothing again and counts nothing twice
        state = State(str(state_dir))
        sink2 = MemorySink()
        pipeline2, queue2, metrics2 = _pipeline(root, state, sink2)
        pipeline2.backfill()
        assert queue2.close(timeout_s=30)
        pipeline2.process_acks()
        assert sink2.spans == []
        assert metrics2.totals() == totals
        assert totals["ccotel_lines_read\x1f"] == sum(len(p.read_bytes().splitlines())
                                                      for p in (root / "projects").rglob("*.jsonl"))
        state.close()


# -- a corrupt state database --------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["garbage", "pages"])
def test_corrupt_state_is_moved_aside_and_rebuilt(tmp_path, damage):
    root = tmp_path / "claude"
    paths = history(root)
    state = tmp_path / "state"
    with OtlpReceiver() as rx:
        log = tmp_path / "a.log"
        proc = run_live(root, state, rx.endpoint, log)
        t = Transcript("0000000a-f00d-4bbb-8ccc-dddddddddddd", t_ms=int(time.time() * 1000))
        t.tool_turn("live1")
        with open(paths[0].parent / f"{t.session_id}.jsonl", "wb") as f:
            f.write(t.bytes())
        n = len(expected_ids(root))
        assert wait_until(lambda: len(rx.spans) >= n, 20)
        time.sleep(1.0)
        stop(proc, log)
        before = counters(state)
        assert before["ccotel_api_calls\x1fclaude-opus-4-6"] == 2  # the live turn only
        db = state / "state.db"
        size = db.stat().st_size
        with open(db, "r+b") as f:
            if damage == "garbage":
                f.write(os.urandom(size))
            else:  # the header stays, the pages after the first are garbage
                f.seek(4096)
                f.write(os.urandom(max(size - 4096, 8192)))
        sent = len(rx.spans)
        log2 = tmp_path / "b.log"
        proc = run_live(root, state, rx.endpoint, log2)
        assert wait_until(lambda: len(rx.spans) >= 2 * sent, 20)
        time.sleep(1.0)
        stop(proc, log2)
        err = log2.read_text()
    aside = list(state.glob("state.db.corrupt-*"))
    assert [p.name for p in aside if not p.name.endswith(("-wal", "-shm"))], list(state.iterdir())
    assert "is corrupt" in err and "moved it aside to" in err and str(aside[0]).split("-wal")[0] in err, err
    # the history again as on a first start: every span re-sent with the same ids, nothing else
    by_id = Counter(s["span_id"] for s in rx.spans)
    assert set(by_id.values()) == {2} and len(by_id) == sent // 2 * 1 or set(by_id.values()) == {2}
    after = counters(state)
    lines = sum(len(p.read_bytes().splitlines()) for p in (root / "projects").rglob("*.jsonl"))
    assert after["ccotel_lines_read\x1f"] == lines == before["ccotel_lines_read\x1f"]  # not twice
    assert not after["ccotel_api_calls\x1fclaude-opus-4-6"]  # the history is not counted again


# -- a second ccotel on the same state ----------------------------------------------------------


def test_second_instance_is_refused_naming_the_pid_while_check_and_report_work(tmp_path):
    root = tmp_path / "claude"
    history(root)
    state = tmp_path / "state"
    with OtlpReceiver() as rx:
        log = tmp_path / "a.log"
        proc = run_live(root, state, rx.endpoint, log)
        n = len(rx.wait_for(len(expected_ids(root)), 20))
        for cmd in (["run", "--metrics-addr", "none"], ["backfill"]):
            t0 = time.monotonic()
            code, err = finish(ccotel(*cmd, "--root", str(root), "--state-dir", str(state), endpoint=rx.endpoint), 30)
            assert code == 75, err
            assert time.monotonic() - t0 < 10
            assert f"another ccotel (pid {proc.pid}) is using the state dir {state}" in err, err
            assert "Traceback" not in err
        code, out = finish(ccotel("report", "--json", "--root", str(root)), 60)
        assert code == 0, out
        code, _ = finish(ccotel("check", "00000000-f00d-4bbb-8ccc-dddddddddddd", "--root", str(root)), 60)
        assert code in (0, 1)
        assert len(rx.spans) == n  # the refused ones sent nothing
        stop(proc, log)
        code, err = finish(ccotel("backfill", "--root", str(root), "--state-dir", str(state), endpoint=rx.endpoint))
        assert code == 0, err  # the lock went with the process
        assert len(rx.spans) == n


# -- transcripts deleted while followed -----------------------------------------------------------


def test_transcripts_deleted_while_followed_are_forgotten_without_errors(tmp_path):
    root = tmp_path / "claude"
    paths = history(root, sessions=6)
    agent = Transcript(paths[5].stem, agent_id="a1b2c3d4e5f607182", t_ms=1_760_000_900_000)
    agent.tool_turn("agent1")
    sub = Path(agent.write(str(paths[5].parent / paths[5].stem / "subagents" / "agent-a1b2c3d4e5f607182.jsonl")))
    state = tmp_path / "state"
    with OtlpReceiver() as rx:
        log = tmp_path / "a.log"
        proc = run_live(root, state, rx.endpoint, log)
        rx.wait_for(len(expected_ids(root)), 20)
        time.sleep(1.0)
        assert {str(p) for p in paths} | {str(sub)} <= state_paths(state)
        # Claude Code's cleanup sweep: old sessions and a session's subagent directory go
        paths[1].unlink()
        paths[2].unlink()
        shutil.rmtree(paths[5].parent / paths[5].stem)
        gone = {str(paths[1]), str(paths[2]), str(sub)}
        assert wait_until(lambda: not gone & state_paths(state), 5), state_paths(state) & gone
        # still following the rest
        t = Transcript(paths[0].stem, t_ms=int(time.time() * 1000))
        t.tool_turn("after")
        with open(paths[0], "ab") as f:
            f.write(t.bytes())
        n = len(rx.spans)
        assert wait_until(lambda: len(rx.spans) >= n + 4, 10)
        stop(proc, log)
        # deleted while ccotel is down: forgotten at the next start
        paths[3].unlink()
        log2 = tmp_path / "b.log"
        proc = run_live(root, state, rx.endpoint, log2)
        assert str(paths[3]) not in state_paths(state)
        stop(proc, log2)
    c = counters(state)
    assert not [k for k, v in c.items() if k.startswith("ccotel_parse_errors") and v], c
    assert "skipped bad input" not in log.read_text() + log2.read_text()
    assert len({s["span_id"] for s in rx.spans}) == len(rx.spans)


# -- unreadable files -----------------------------------------------------------------------------


def test_unreadable_transcript_is_counted_once_and_read_when_readable_again(tmp_path):
    """chmod 000 does not stop root: as root the test runs ccotel as nobody (setpriv)."""
    prefix: tuple[str, ...] = ()
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("running as root (chmod does not block reads) and setpriv is not there")
        prefix = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--")
    base = Path(tempfile.mkdtemp(prefix="ccotel-unreadable-", dir="/tmp"))
    try:
        base.chmod(0o777)
        root = base / "claude"
        paths = history(root, sessions=4)
        for d in [root, *root.rglob("*")]:
            d.chmod(0o755 if d.is_dir() else 0o644)
        expected = expected_ids(root)
        paths[2].chmod(0o000)
        state = base / "state"
        with OtlpReceiver() as rx:
            code, err = finish(ccotel("backfill", "--root", str(root), "--state-dir", str(state),
                                      "--workers", "1", endpoint=rx.endpoint, prefix=prefix))
            assert code == 0, err
            assert "skipped bad input (unreadable)" in err and "Traceback" not in err, err
            first = {s["span_id"] for s in rx.spans}
            assert first < expected and len(expected - first) == 12  # one session's 3 turns of 4 spans
            paths[2].chmod(0o644)
            code, err = finish(ccotel("backfill", "--root", str(root), "--state-dir", str(state),
                                      "--workers", "1", endpoint=rx.endpoint, prefix=prefix))
            assert code == 0, err
        got = Counter(s["span_id"] for s in rx.spans)
        assert set(got) == expected and max(got.values()) == 1
    finally:
        shutil.rmtree(base, ignore_errors=True)


# -- the clock jumping ---------------------------------------------------------------------------


class _Clock:
    def __init__(self, ns: int) -> None:
        self.ns = ns

    def __call__(self) -> int:
        return self.ns


def _open_sessions(root: Path, now_ms: int, n: int) -> None:
    for i in range(n):
        t = Transcript(f"{i:08x}-c10c-4bbb-8ccc-dddddddddddd", t_ms=now_ms - 60_000)
        t.prompt(f"long tool {i}")
        t.response(f"msg_clock{i}", [text("running"), tool_use(f"toolu_clock{i}")], stop_reason="tool_use")
        t.write(str(root / "projects" / "-tmp-clock" / f"{t.session_id}.jsonl"))


def test_forward_clock_jump_does_not_orphan_every_open_tool_call(tmp_path):
    """The wall clock steps 3 h forward while the steady clock does not (NTP, a resumed VM): the
    running tool calls are not orphans. (The real steady clock is used beside the fake wall clock.)"""
    root = tmp_path / "claude"
    now = time.time_ns()
    _open_sessions(root, now // 1_000_000, 20)
    clock, metrics, spans = _Clock(now), Metrics(), []
    pipeline = Pipeline(Options(roots=(str(root),)), emit=spans.extend, clock=clock, metrics=metrics,
                        elapsed=time.monotonic_ns)
    pipeline.backfill()
    pipeline.tick()
    assert spans == [] and pipeline.assembler.open_count() == 20  # tool calls running
    clock.ns += 3 * 3600 * 10**9  # NTP step, a VM resumed: the tools did not run 3 hours
    pipeline.tick()
    orphaned = [s for s in spans if s.name.startswith("execute_tool")]
    assert pipeline.assembler.stalled_now() == 0 and orphaned == []


def test_backward_clock_jump_exports_no_negative_duration(tmp_path):
    """Claude Code's own timestamps step back 2 h inside a turn, and ccotel's clock steps back too."""
    root = tmp_path / "claude"
    now_ms = int(time.time() * 1000)
    t = Transcript("0000c10c-baac-4bbb-8ccc-dddddddddddd", t_ms=now_ms - 10_000)
    t.prompt("back in time")
    t.response("msg_back_a", [text("go"), tool_use("toolu_back")], stop_reason="tool_use")
    t.t_ms -= 2 * 3600 * 1000
    t.tool_result("toolu_back", "ok")
    t.response("msg_back_b", [text("done")], stop_reason="end_turn")
    t.write(str(root / "projects" / "-tmp-clock" / f"{t.session_id}.jsonl"))
    _open_sessions(root, now_ms, 3)
    clock, metrics, spans = _Clock(now_ms * 10**6), Metrics(), []
    pipeline = Pipeline(Options(roots=(str(root),)), emit=spans.extend, clock=clock, metrics=metrics)
    pipeline.backfill()
    clock.ns -= 2 * 3600 * 10**9
    pipeline.tick()
    clock.ns += 10 * 3600 * 10**9
    pipeline.tick()
    pipeline.assembler.flush(None)
    pipeline.tick()
    assert spans and all(s.end_ns >= s.start_ns for s in spans)
    assert all(v >= 0 for k, v in metrics.totals().items() if k.startswith("ccotel_tool_duration_seconds_sum"))
