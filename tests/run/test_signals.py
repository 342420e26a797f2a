"""SIGTERM / SIGINT / SIGHUP honoured within 2 s in every phase, checkpoints left consistent.

A real ``ccotel run`` / ``ccotel backfill`` subprocess catches up on a ~300 MB generated history
(bench/corpus.py, with its expected span count) and is sent a signal mid-catch-up, in one
process and with two worker processes (``--workers 2 --parallel-min-mb 1``). It must be gone
within 2 s (measured from the signal), leave no worker behind, end by the signal (a shell sees
130 / 143), and a restart must deliver every span to the loopback OTLP receiver exactly once
(0 lost, 0 duplicates) with the read counters counting each line once. Prints the stop times.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

from ccotel.run.stopping import STOP_GRACE_S
from ccotel.store.sqlite import SqliteState as State
from tests.support.otlp import Hold, OtlpReceiver, refuse

STOP_LIMIT_S = 2.0
CORPUS = Path(tempfile.gettempdir()) / "ccotel-test-corpus" / "signals-300MB"
STOP_TIMES: list[tuple[str, float]] = []


@pytest.fixture(scope="module")
def corpus() -> tuple[Path, dict]:
    from bench.corpus import ensure

    doc = ensure(str(CORPUS), 300_000_000, seed=11, session_mean=2_000_000, projects=6)
    return CORPUS, doc["totals"]


def start(cmd: str, root: Path, state: Path, endpoint: str, log: Path, parallel: bool) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = endpoint
    workers = ["--workers", "2", "--parallel-min-mb", "1"] if parallel else ["--workers", "0"]  # 0: run too
    extra = ["--metrics-addr", "none", "--no-status"] if cmd == "run" else []
    return subprocess.Popen([sys.executable, "-m", "ccotel", cmd, "--root", str(root), "--state-dir", str(state),
                             *workers, *extra], env=env, stdout=subprocess.DEVNULL, stderr=open(log, "w"))


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_until(cond, timeout_s: float, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return cond()


def stop_mid_catch_up(proc: subprocess.Popen, rx: OtlpReceiver, log: Path, sig: int, parallel: bool,
                      min_spans: int) -> tuple[float, list[int]]:
    """Wait until the catch-up is well under way (spans arriving, workers running), signal, time the exit."""
    assert wait_until(lambda: len(rx.spans) >= min_spans or proc.poll() is not None, 120), "no spans arrived"
    assert proc.poll() is None, "finished before the signal: " + log.read_text()[-2000:]
    workers = children(proc.pid)
    text = log.read_text()
    assert "caught up" not in text and "backfill:" not in text, "not mid-catch-up"
    if parallel:
        assert "processes" in text, text
    t0 = time.monotonic()
    proc.send_signal(sig)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired as err:
        proc.kill()
        proc.wait()
        raise AssertionError("did not stop within 10 s") from err
    return time.monotonic() - t0, workers


SCENARIOS = [
    ("run", False, signal.SIGTERM),
    ("run", True, signal.SIGTERM),
    ("run", True, signal.SIGINT),
    ("run", True, signal.SIGHUP),  # the terminal or tmux pane it ran in was closed
    ("backfill", False, signal.SIGINT),
    ("backfill", True, signal.SIGTERM),
]


@pytest.mark.parametrize("cmd,parallel,sig", SCENARIOS,
                         ids=[f"{c}-{'2workers' if p else '1process'}-{signal.Signals(s).name}"
                              for c, p, s in SCENARIOS])
def test_signal_mid_catch_up_stops_within_2s_and_restart_delivers_each_span_once(corpus, tmp_path, cmd, parallel,
                                                                                  sig):
    root, totals = corpus
    state = tmp_path / "state"
    with OtlpReceiver() as rx:
        log1 = tmp_path / "first.log"
        proc = start(cmd, root, state, rx.endpoint, log1, parallel)
        took, workers = stop_mid_catch_up(proc, rx, log1, sig, parallel, min_spans=8000)
        err = log1.read_text()
        assert proc.returncode == -sig, (proc.returncode, err[-3000:])  # ended by the signal: 128+n in a shell
        assert "Traceback" not in err, err
        # the catch-up's shared count has no lock: a stop leaves no semaphore to multiprocessing's
        # resource tracker, which said so at exit ("leaked semaphore objects")
        assert "leaked" not in err, err
        assert "checkpoints hold what the backend acknowledged" in err, err
        name = f"{cmd} {'--workers 2' if parallel else '--workers 1'} {signal.Signals(sig).name}"
        STOP_TIMES.append((name, took))
        print(f"\n{name}: stopped {took:.3f} s after the signal, {len(rx.spans)} spans delivered before; "
              f"workers {workers}")
        assert took < STOP_LIMIT_S, f"{name}: {took:.2f} s"
        if parallel:
            assert len(workers) >= 2, workers
        assert wait_until(lambda: not any(running(p) for p in workers), 1.0), \
            f"orphan processes: {[p for p in workers if running(p)]}"
        before = len(rx.spans)

        # restart: the same command to the end
        log2 = tmp_path / "second.log"
        proc = start(cmd, root, state, rx.endpoint, log2, parallel)
        if cmd == "backfill":
            assert proc.wait(timeout=180) == 0, log2.read_text()[-3000:]
        else:
            assert wait_until(lambda: "caught up" in log2.read_text() or proc.poll() is not None, 180, 0.2)
            assert wait_until(lambda: len({s["span_id"] for s in rx.spans}) >= totals["spans"], 60, 0.1)
            time.sleep(0.5)
            proc.send_signal(signal.SIGTERM)  # caught up: a stop is the normal end of run
            assert proc.wait(timeout=10) == 0, log2.read_text()[-3000:]
    received = Counter(s["span_id"] for s in rx.spans)
    lost = totals["spans"] - len(received)
    twice = sum(c - 1 for c in received.values() if c > 1)
    print(f"{name}: {before} spans before the stop, {len(rx.spans) - before} after the restart; "
          f"expected {totals['spans']}, lost {lost}, delivered twice {twice}")
    warnings = [ln for log in (log1, log2) for ln in log.read_text().splitlines() if "WARNING" in ln]
    assert lost == 0 and twice == 0, warnings[-20:]  # the warnings say why (a worker killed, a batch out)
    if cmd == "run":
        counters = State(str(state)).counters()
        total: Counter[str] = Counter()
        for k, v in counters.items():
            total[k.partition(":")[2]] += v
        assert total["ccotel_lines_read\x1f"] == totals["lines"]  # each line once across the stop
        assert total["ccotel_bytes_read\x1f"] == totals["bytes"]
        assert total["ccotel_spans_exported\x1f"] == totals["spans"]
        assert not any(k.startswith("ccotel_api_calls") and v for k, v in total.items())  # history is not counted


def test_signal_while_discovering_and_a_second_signal_during_shutdown(corpus, tmp_path):
    """A stop right after start (discovery, opening the state) is immediate; so is a second signal
    while the first one's stop waits for a backend that does not answer (a catch-up worker's
    request in flight: on a fast machine a stop with nothing in flight ended within the 50 ms
    before the second signal, which then found no process)."""
    root, _ = corpus
    with OtlpReceiver() as rx:
        proc = start("run", root, tmp_path / "state", rx.endpoint, tmp_path / "a.log", parallel=False)
        time.sleep(0.6)  # imports done, discovering or at the first files
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        early = time.monotonic() - t0
        assert proc.returncode == -signal.SIGTERM, (tmp_path / "a.log").read_text()
        proc = start("run", root, tmp_path / "state", rx.endpoint, tmp_path / "b.log", parallel=True)
        assert wait_until(lambda: len(rx.spans) >= 3000, 60)
        rx.decide = hold = Hold()
        try:
            assert wait_until(lambda: hold.waiting >= 1, 10)
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.05)
            assert proc.poll() is None  # still stopping: the second signal comes during the shutdown
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=10)
            second = time.monotonic() - t0
        finally:
            hold.release()
    print(f"\nstop during start-up: {early:.3f} s; second SIGTERM 50 ms after the first: {second:.3f} s")
    STOP_TIMES.append(("run, start-up", early))
    STOP_TIMES.append(("run --workers 2, second SIGTERM after 50 ms", second))
    # The second signal's path is proved by the log; the time only has to stay below the grace
    # period the first one starts (a missed second signal ends by the watchdog at 1.75 s). Under
    # a loaded CI machine the exit itself took 0.86 s once: 1.2 s leaves room for that.
    assert early < STOP_LIMIT_S and second < 1.2 < STOP_GRACE_S
    assert proc.returncode == -signal.SIGTERM
    log = (tmp_path / "b.log").read_text()
    assert "again: exiting now" in log and "still stopping" not in log, log[-2000:]


def test_signal_while_the_backend_is_down_and_the_queue_is_full(corpus, tmp_path):
    """Backpressure: the reader is blocked on a full export queue and the batch in flight is being
    retried; the stop must not wait for the backend."""
    root, _ = corpus
    with OtlpReceiver() as rx:
        rx.decide = refuse
        log = tmp_path / "down.log"
        proc = start("backfill", root, tmp_path / "state", rx.endpoint, log, parallel=False)
        assert wait_until(lambda: "not reachable" in log.read_text(), 60), log.read_text()
        time.sleep(2.0)  # the reader fills the queue (20,000 spans) and blocks
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        took = time.monotonic() - t0
    print(f"\nstop with the backend refusing (queue full): {took:.3f} s")
    STOP_TIMES.append(("backfill, backend down, queue full", took))
    assert took < STOP_LIMIT_S and proc.returncode == -signal.SIGTERM, log.read_text()[-2000:]
