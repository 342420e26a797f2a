"""What a restart must keep, as an operator would see it go wrong: every persisted counter is
monotonic across a stop and a start (failures counted after the last checkpoint are kept too)."""

from __future__ import annotations

import re
import signal
import urllib.request
from pathlib import Path

from tests.run.test_signals import wait_until
from tests.support.otlp import OtlpReceiver, refuse
from tests.support.server import free_port
from tests.whole.test_faults import ccotel, counters, history


def scrape(port: int, name: str) -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    m = re.search(rf"^{name} ([0-9.e+]+)$", text, re.M)
    return float(m.group(1)) if m else None


def start_run(root: Path, state: Path, endpoint: str, log: Path, port: int):  # type: ignore[no-untyped-def]
    return ccotel("run", "--root", str(root), "--state-dir", str(state), "--metrics-addr", f"127.0.0.1:{port}",
                  "--no-status", "--workers", "1", endpoint=endpoint, log=log)


def test_export_failures_never_go_backwards_across_a_restart(tmp_path):
    root = tmp_path / "claude"
    history(root)
    state = tmp_path / "state"
    name = "ccotel_export_failures_total"
    with OtlpReceiver(refuse) as rx:  # a backend answering 503 to everything
        port = free_port()
        log = tmp_path / "a.log"
        proc = start_run(root, state, rx.endpoint, log, port)
        try:
            assert wait_until(lambda: (scrape(port, name) or 0) >= 3, 60), log.read_text()
            before = scrape(port, name)
            assert before is not None
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=15)
        assert "Traceback" not in log.read_text(), log.read_text()
        assert counters(state)[name.removesuffix("_total") + "\x1f"] >= before  # kept by the stop
        port = free_port()
        log2 = tmp_path / "b.log"
        proc = start_run(root, state, rx.endpoint, log2, port)
        try:
            assert wait_until(lambda: scrape(port, name) is not None, 60), log2.read_text()
            after = scrape(port, name)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=15)
    assert after is not None and after >= before, f"{name} went from {before} to {after} across a restart"


def test_failures_counted_during_an_interrupted_catch_up_are_kept(tmp_path):
    """A stop during the catch-up checkpoints no offset (its lines are read again), but the
    failed exports it met are not read again: they are kept."""
    import pytest

    from ccotel.metrics import events
    from ccotel.metrics.counters import Metrics
    from ccotel.run.pipeline import Options
    from ccotel.run.runner import Interrupted, Stopper, read_history, wire

    root = tmp_path / "claude"
    history(root)
    state = tmp_path / "state"
    metrics = Metrics()
    wired = wire(Options(roots=(str(root),)), "memory", str(state), metrics)

    def progress(_done: int, _total: int) -> None:
        events.export_failed(metrics)
        events.export_failed(metrics)
        raise Interrupted(signal.SIGTERM)

    with pytest.raises(Interrupted):
        read_history(wired, progress, Stopper())
    assert wired.state is not None
    wired.state.close()
    wired.queue.close(timeout_s=1.0)
    assert counters(state)["ccotel_export_failures\x1f"] == 2


def test_spans_of_another_source_counted_on_delivery_are_saved_without_an_acknowledgement(tmp_path):
    """An agent registry's spans are counted in ccotel_spans_exported when the backend takes them,
    with no transcript id to acknowledge: the next commit keeps that count all the same."""
    from ccotel.metrics.counters import Metrics
    from ccotel.run.delivery import Delivery
    from ccotel.store.sqlite import SqliteState
    from ccotel.store.state import Commit

    state = SqliteState(str(tmp_path / "state"))
    metrics = Metrics()
    delivery = Delivery(state, metrics, clock=lambda: 0)
    delivery.coalesce = True
    delivery.acknowledge([], None, others=3)
    commit = Commit()
    delivery.take_acked(commit)
    delivery.write(commit)
    state.close()
    assert counters(tmp_path / "state")["ccotel_spans_exported\x1f"] == 3


def test_deleting_the_lock_file_does_not_let_a_second_run_start(tmp_path):
    """`rm ccotel.lock` while `ccotel run` runs: a second run on the same state is refused all the
    same (exit 75, as when the lock file is there), and no span is exported twice."""
    import subprocess
    import time
    from collections import Counter

    from tests.support.otlp import OtlpReceiver
    from tests.transcript import Transcript
    from tests.whole.test_faults import expected_ids, run_live, stop

    root = tmp_path / "claude"
    paths = history(root)
    state = tmp_path / "state"
    with OtlpReceiver() as rx:
        log = tmp_path / "a.log"
        first = run_live(root, state, rx.endpoint, log)
        rx.wait_for(len(expected_ids(root)), 30)
        (state / "ccotel.lock").unlink()
        second = ccotel("run", "--root", str(root), "--state-dir", str(state), "--metrics-addr", "none",
                        "--no-status", "--workers", "1", endpoint=rx.endpoint, log=tmp_path / "b.log")
        try:
            code: int | None = second.wait(timeout=20)
        except subprocess.TimeoutExpired:
            code = None  # it started: both follow the same files now
        t = Transcript("0000000b-f00d-4bbb-8ccc-dddddddddddd", t_ms=int(time.time() * 1000))
        t.tool_turn("live1")
        with open(paths[0].parent / f"{t.session_id}.jsonl", "wb") as f:
            f.write(t.bytes())
        n = len(expected_ids(root))
        assert wait_until(lambda: len(rx.spans) >= n, 30)
        time.sleep(2.0)
        if code is None:
            second.send_signal(signal.SIGTERM)
            second.wait(timeout=15)
        assert (state / "ccotel.lock").exists()  # put back by the run that holds the state
        stop(first, log)
    err = (tmp_path / "b.log").read_text()
    assert code == 75, f"the second run was not refused (exit {code}): {err}"
    assert "is using the state dir" in err, err
    twice = [k for k, v in Counter(s["span_id"] for s in rx.spans).items() if v > 1]
    assert not twice, f"{len(twice)} spans exported twice"


def test_a_run_whose_state_dir_is_moved_away_stops_with_exit_1(tmp_path):
    import os

    from tests.support.otlp import OtlpReceiver
    from tests.whole.test_faults import run_live

    root = tmp_path / "claude"
    history(root, sessions=2)
    state = tmp_path / "state"
    with OtlpReceiver() as rx:
        log = tmp_path / "a.log"
        proc = run_live(root, state, rx.endpoint, log)
        os.rename(state, tmp_path / "state.old")
        try:
            code = proc.wait(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
    err = log.read_text()
    assert code == 1, err
    assert "was moved, replaced or deleted while this ccotel ran on it" in err and "Traceback" not in err, err
