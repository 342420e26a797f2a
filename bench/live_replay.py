"""The live CPU row (bench.run, row 3) in one process, for finding its costs:

    .venv/bin/python -m bench.live_replay                 # live vs backfill, main-thread CPU, 3 rounds
    .venv/bin/python -m bench.live_replay --profile DIR   # + cProfile of each (DIR/live.prof, DIR/backfill.prof)

The same ~10,000 lines of 50 sessions as the row, written to an empty root in the order Claude Code
wrote them at the row's 1,000 lines/s, polled as ``ccotel run`` polls (runner.poll_gap: 20 ms
apart, 200 ms while lines come at 800/s or more, as these do), a tick at most every 100 ms
as ``runner.follow`` does; then a backfill of the same files. Spans go nowhere
(``--traces-exporter none``): only the pipeline thread's CPU is measured (``time.thread_time``),
without the HTTP requests, the inotify thread or the machine's other processes. bench.run's row
measures the whole process against a backfill process.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import tempfile
import time
from pathlib import Path

from ccotel.metrics.counters import Metrics
from ccotel.run.pipeline import Options, Pipeline
from ccotel.run.runner import COMMIT_EVERY_S, POLL_GAP_S, TICK_EVERY_S, Wired, poll_gap, wire

from .run import ensure_corpus, open_as_claude_does, replay_plan

LINES_PER_S = 1_000  # the row's rate


def live(src: Path, work: Path, prof: cProfile.Profile | None) -> tuple[float, int]:
    """Pipeline-thread CPU of following the replay live, and the spans built."""
    root = work / "live-root"
    (root / "projects").mkdir(parents=True)
    wired = wire(Options(roots=(str(root),)), "none", str(work / "state-live"), Metrics(), keep_reading=True)
    p = wired.pipeline
    p.backfill()
    p.go_live(COMMIT_EVERY_S)
    fds: dict[str, int] = {}
    dirty: set[str] = set()
    cpu, due, ticked = 0.0, time.monotonic(), [0.0]
    gap, written = POLL_GAP_S, 0
    try:
        for _t, rel, line in replay_plan(src):
            fd = fds.get(rel)
            if fd is None:
                fd, new_dir = open_as_claude_does(src, root, rel)
                fds[rel] = fd
                if new_dir is not None:
                    dirty.add(str(new_dir))
            os.write(fd, line)
            dirty.add(str(root / rel))
            written += 1
            if written >= LINES_PER_S * gap:  # the lines written while the runner waits out its gap
                due += gap
                time.sleep(max(due - time.monotonic(), 0.0))
                before = p.stats.lines
                cpu += _poll(p, dirty, prof, ticked)
                gap, written, dirty = poll_gap(p.stats.lines - before, gap), 0, set()
        cpu += _poll(p, dirty, prof, [0.0])
        cpu += _settle(wired)
    finally:
        for fd in fds.values():
            os.close(fd)
    return cpu, p.stats.spans


def _poll(p: Pipeline, dirty: set[str], prof: cProfile.Profile | None, ticked: list[float]) -> float:
    """One poll, and a tick if the last was TICK_EVERY_S ago (``ticked``: its time), as follow does."""
    start = time.thread_time()
    if prof is not None:
        prof.enable()
    p.poll(sorted(dirty))
    if time.monotonic() - ticked[0] >= TICK_EVERY_S:
        ticked[0] = time.monotonic()
        p.tick()
    if prof is not None:
        prof.disable()
    return time.thread_time() - start


def _settle(wired: Wired) -> float:
    start = time.thread_time()
    wired.queue.flush(10)
    wired.pipeline.process_acks()
    return time.thread_time() - start


def backfill(work: Path, prof: cProfile.Profile | None) -> tuple[float, int]:
    """Pipeline-thread CPU of a backfill of the files the live replay wrote."""
    wired = wire(Options(roots=(str(work / "live-root"),)), "none", str(work / "state-backfill"), Metrics())
    start = time.thread_time()
    if prof is not None:
        prof.enable()
    wired.pipeline.backfill()
    if prof is not None:
        prof.disable()
    cpu = time.thread_time() - start + _settle(wired)
    return cpu, wired.pipeline.stats.spans


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", default="/tmp/ccotel-bench")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", metavar="DIR", help="write cProfile stats of the last round here")
    args = ap.parse_args()
    src = Path(args.workdir) / "livecpu-50-s5"  # bench.run's row 3 corpus (seed 1 + 4)
    ensure_corpus(src, sessions=50, seed=5, session_mean=500_000)
    for r in range(args.rounds):
        last = r == args.rounds - 1
        profs = (cProfile.Profile(), cProfile.Profile()) if args.profile and last else (None, None)
        with tempfile.TemporaryDirectory(prefix="ccotel-live-replay-") as tmp:
            live_cpu, live_spans = live(src, Path(tmp), profs[0])
            bf_cpu, bf_spans = backfill(Path(tmp), profs[1])
        print(f"round {r + 1}: live {live_cpu:.3f} s ({live_spans:,} spans), backfill {bf_cpu:.3f} s "
              f"({bf_spans:,} spans): {live_cpu / bf_cpu:.2f}x")
        if profs[0] is not None and profs[1] is not None:
            os.makedirs(args.profile, exist_ok=True)
            profs[0].dump_stats(os.path.join(args.profile, "live.prof"))
            profs[1].dump_stats(os.path.join(args.profile, "backfill.prof"))


if __name__ == "__main__":
    main()
