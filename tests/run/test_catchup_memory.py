"""The catch-up reports the memory of every process that took part (bench/run.py row 4 reads it)."""

from __future__ import annotations

import logging
import re
import resource
import time
from types import SimpleNamespace
from typing import Any

from ccotel.run.catchup import catch_up_in_parallel
from ccotel.run.pipeline import Options


def test_peaks_of_the_workers_and_of_the_caller_are_reported(tmp_path, caplog):
    from bench.corpus import generate

    root = tmp_path / "claude"
    generate(str(root), 2_000_000, seed=3, session_mean=200_000, projects=2)
    with caplog.at_level(logging.INFO, logger="ccotel.catchup"):
        done = catch_up_in_parallel(Options(roots=(str(root),)), str(tmp_path / "state"), "none", 2, min_bytes=0)
    assert done is not None and done.workers == 2 and done.failed_workers == 0
    assert len(done.worker_peak_rss_mb) == 2 and all(p > 5 for p in done.worker_peak_rss_mb)
    # this process's high-water mark as it was when its workers had ended (1 MB of slack: VmHWM and
    # ru_maxrss come from the kernel's RSS counters summed and read approximately, which differ by
    # its per-CPU batches when the mark is the RSS of the moment: a grown test process)
    assert 5 < done.caller_peak_rss_mb <= resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 + 1
    line = next(r.getMessage() for r in caplog.records if "high-water mark" in r.getMessage())
    caller, together = (float(x) for x in re.findall(r"([0-9.]+) MB", line))
    assert caller == round(done.caller_peak_rss_mb)
    assert together == round(done.caller_peak_rss_mb + done.workers_together_mb())
    assert not re.search(r"peak RSS [0-9]", line)  # bench/run.py takes the workers' peaks from "peak RSS a / b MB"


class _Live:
    """livefirst.LiveFirst as catch_up_in_parallel uses it, with no live session; its take-over
    (adopt_state) grows this process by ``grow`` MB, touched and kept."""

    def __init__(self, grow: int) -> None:
        self.kept: list[bytearray] = []
        self.pipeline = SimpleNamespace(delivery=SimpleNamespace(started_sizes=None), metrics=None, state=None,
                                        process_acks=lambda force=True: None, adopt_state=lambda: self._grow(grow))

    def _grow(self, mb: int) -> None:
        held = bytearray(mb << 20)
        for i in range(0, len(held), 4096):
            held[i] = 1
        self.kept.append(held)

    def live_shards(self, *_args: Any) -> tuple[list[Any], list[Any]]:
        return [], []

    def adopt(self, _groups: Any) -> None:
        pass  # no live session: nothing is taken over before the workers have ended

    def hold(self, _groups: Any) -> None:
        pass

    def note_heads(self, *_args: Any) -> None:
        pass

    def poll(self, timeout_s: float) -> None:
        time.sleep(timeout_s)


def test_the_callers_mark_is_taken_before_it_takes_over_what_the_workers_wrote(tmp_path):
    """Its take-over (every file's checkpoint, the ids and digests the workers wrote) comes after
    the workers have ended: it is never held beside them, and bench/run.py adds this mark to theirs."""
    from bench.corpus import generate
    from ccotel.run.catchup import _peak_rss_mb

    root = tmp_path / "claude"
    generate(str(root), 2_000_000, seed=3, session_mean=200_000, projects=2)
    rss = int(re.search(r"VmRSS:\s+(\d+)", open("/proc/self/status").read()).group(1)) / 1024
    grow = int(_peak_rss_mb() - rss) + 64  # past this process's mark so far, whatever the tests before it held
    live = _Live(grow)
    done = catch_up_in_parallel(Options(roots=(str(root),)), str(tmp_path / "state"), "none", 2, min_bytes=0,
                                live=live)  # type: ignore[arg-type]
    assert done is not None and live.kept
    assert done.caller_peak_rss_mb < _peak_rss_mb() - 32


def _child_peak(out) -> None:  # noqa: ANN001 - a multiprocessing queue
    from ccotel.run.catchup import _peak_rss_mb

    out.put(_peak_rss_mb())


def test_a_spawned_worker_reports_its_own_peak_not_its_parents():
    """ru_maxrss keeps, across exec, the RSS of the process a child was forked from: a worker
    spawned by a 150 MB ccotel run reported >= 150 MB though it held a tenth of that."""
    import multiprocessing

    held = bytearray(150 << 20)
    for i in range(0, len(held), 4096):
        held[i] = 1  # touched: resident
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_child_peak, args=(out,))
    p.start()
    peak = out.get(timeout=60)
    p.join(timeout=60)
    assert 5 < peak < 100, peak
    del held


def test_ccotel_run_keeps_no_helper_process_after_its_catch_up(tmp_path):
    """ccotel run has threads when it catches up, so its workers are spawned, and spawning starts
    multiprocessing's resource tracker: a Python process of its own (~9 MB) that stayed beside
    ccotel run for as long as it ran, with nothing to track once the workers had ended."""
    import os
    import subprocess
    import sys
    import urllib.request

    from bench.corpus import generate
    from tests.run.test_signals import children, wait_until

    root = tmp_path / "claude"
    generate(str(root), 3_000_000, seed=3, session_mean=200_000, projects=2)
    log = tmp_path / "run.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    proc = subprocess.Popen([sys.executable, "-m", "ccotel", "run", "--root", str(root), "--state-dir",
                             str(tmp_path / "state"), "--traces-exporter", "none", "--metrics-addr", "127.0.0.1:0",
                             "--no-status", "--workers", "2", "--parallel-min-mb", "1"],
                            env=env, stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    try:
        assert wait_until(lambda: "following live" in log.read_text(), 60, 0.1), log.read_text()
        text = log.read_text()
        assert re.search(r"2 processes.* read ", text), text  # the history was read by spawned workers
        # the log names the port the system chose for port 0, and /metrics answers there
        port = int(re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", text).group(1))  # type: ignore[union-attr]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            assert b"ccotel_build_info" in answer.read()
        assert wait_until(lambda: not children(proc.pid), 5, 0.1), [
            open(f"/proc/{pid}/cmdline").read().replace("\0", " ") for pid in children(proc.pid)]
    finally:
        proc.terminate()
        proc.wait(10)
    # its counter's semaphore was freed before the tracker stopped: nothing leaked, nothing raised
    assert "leaked" not in log.read_text() and "Traceback" not in log.read_text(), log.read_text()


def test_ccotel_run_reads_even_a_small_history_in_one_worker_and_holds_less(tmp_path):
    """ccotel run's defaults (options.SIDECAR_WORKERS, SIDECAR_PARALLEL_MIN_MB): a history of 20 MB
    is read by one worker beside it, whose memory is given back when it ends; read by ccotel run
    itself (as a history under 256 MB was before), what it read stays in its memory as long as it
    runs. Both with the price cache warm (a cold one has ccotel run load genai-prices either way)."""
    import os
    import subprocess
    import sys

    from bench.corpus import generate
    from tests.run.test_signals import wait_until

    root = tmp_path / "claude"
    generate(str(root), 20_000_000, seed=3, session_mean=1_000_000, projects=2)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CCOTEL_"))}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")

    def caught_up(name: str, *extra: str) -> tuple[str, int]:
        log = tmp_path / f"{name}.log"
        proc = subprocess.Popen([sys.executable, "-m", "ccotel", "run", "--root", str(root), "--state-dir",
                                 str(tmp_path / f"state-{name}"), "--traces-exporter", "none",
                                 "--metrics-addr", "none", "--no-status", *extra],
                                env=env, stdout=subprocess.DEVNULL, stderr=open(log, "w"))
        try:
            assert wait_until(lambda: "following live" in log.read_text() or proc.poll() is not None, 120, 0.1)
            time.sleep(2.0)  # what it holds from then on, not what the catch-up's last step held
            with open(f"/proc/{proc.pid}/status") as f:
                rss_kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
            return log.read_text(), rss_kb
        finally:
            proc.terminate()
            proc.wait(10)

    caught_up("warm")  # fills the price cache
    text, itself = caught_up("itself", "--parallel-min-mb", "256")
    assert "catching up on" not in text, text
    text, beside = caught_up("beside")
    assert re.search(r"catching up on [0-9.]+ MB in 1 process\b", text), text
    assert re.search(r"\b1 process read \d+ files", text), text
    assert beside < itself, (beside, itself)
