"""The trace backend refuses for a while, then accepts: no span is missing, memory stays bounded.

While the backend is away ccotel keeps at most ExportQueue.max_pending spans in memory and
stops reading (the rest waits in the transcript files), so its peak RSS does not grow with the
amount of history. Bound checked here: 150 MB (VmHWM of the ccotel process).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from ccotel.run.pipeline import Options, Pipeline
from tests.support.otlp import OtlpReceiver, accept, refuse
from tests.transcript import Transcript

PEAK_RSS_BOUND_MB = 150


def corpus(root: Path, sessions: int, rng: random.Random) -> None:
    for i in range(sessions):
        sid = f"{i:08x}-1234-4bbb-8ccc-dddddddddddd"
        t = Transcript(sid, t_ms=1_760_000_000_000 + i * 10_000_000)
        for j in range(8):
            t.tool_turn(f"o{i}_{j}", "x" * rng.randint(10, 2000), "y" * rng.randint(10, 30000))
        t.write(str(root / "projects" / f"-p{i % 7}" / f"{sid}.jsonl"))


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def test_backend_outage_loses_nothing_and_memory_stays_bounded(tmp_path):
    rng = random.Random(7)
    root = tmp_path / "claude"
    corpus(root, 600, rng)  # ~19,000 spans, ~90 MB of transcripts: more than the queue holds
    expected: list = []
    Pipeline(Options(roots=(str(root),)), emit=expected.extend).backfill(close_all=True)
    want = {f"{s.span_id:016x}" for s in expected}
    with OtlpReceiver() as rx:
        rx.decide = refuse
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = rx.endpoint
        proc = subprocess.Popen(
            [sys.executable, "-m", "ccotel", "run", "--root", str(root), "--state-dir", str(tmp_path / "st"),
             "--metrics-addr", "none", "--no-status"], env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(12)  # the backend is down: ccotel holds what it can and stops reading
            assert rx.spans == []
            held_mb = peak_rss_mb(proc.pid)
            rx.decide = accept
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not want <= {s["span_id"] for s in rx.spans}:
                time.sleep(0.25)
            peak = peak_rss_mb(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
    got = {s["span_id"] for s in rx.spans}
    print(f"\noutage: {len(want)} spans expected, {len(want - got)} missing; peak RSS {held_mb:.0f} MB while "
          f"the backend was down, {peak:.0f} MB at the end (bound {PEAK_RSS_BOUND_MB} MB)")
    assert want <= got, f"{len(want - got)} spans missing"
    assert peak < PEAK_RSS_BOUND_MB
    # said once by ccotel run's exporter, and at most once by its catch-up worker's, each in the
    # log's format (a spawned worker's warnings were printed bare, with no time or level)
    own = [line for line in err.splitlines() if " ccotel WARNING " in line]
    worker = [line for line in err.splitlines() if " ccotel (catch-up worker) WARNING " in line]
    assert sum("not reachable" in line for line in own) == 1 and any("answers again" in line for line in own), err
    assert sum("not reachable" in line for line in worker) <= 1, err
    assert not [line for line in err.splitlines() if line.startswith("trace backend")], err


def test_a_full_trace_queue_does_not_stop_reading_or_counting(tmp_path):
    """The backend is away and the trace queue (50 spans here) overflows: ccotel keeps reading and
    counting (every token of ground truth counted, every line read), lets the spans that do not
    fit go, and when the backend has taken what was queued reads them again from the trace cursor
    (the file checkpoints), round after round: every span delivered exactly once, no counter
    changed by the catch-up. Before: reading stopped at the first full queue, and the metrics
    with it."""
    from ccotel.export.memory_sink import MemorySink
    from ccotel.export.sinks import ExportQueue
    from ccotel.metrics.counters import Metrics
    from ccotel.run.runner import _emitter, catch_up_traces
    from ccotel.store.sqlite import SqliteState as State

    rng = random.Random(11)
    src = tmp_path / "src"
    corpus(src, 30, rng)  # 30 sessions x 8 turns: ~1,000 spans
    expected: list = []
    Pipeline(Options(roots=(str(src),)), emit=expected.extend).backfill(close_all=True)
    want_out = sum(s.attributes.get("gen_ai.usage.output_tokens", 0) for s in expected)
    root = tmp_path / "claude"
    (root / "projects").mkdir(parents=True)
    sink = MemorySink().retry(times=10 ** 6)
    metrics, state = Metrics(), State(str(tmp_path / "st"))
    queue = ExportQueue(sink, max_pending=50, max_backoff_s=0.02,
                        on_failure=lambda: metrics.inc("ccotel_export_failures"))
    now = [time.time_ns()]
    pipeline = Pipeline(Options(roots=(str(root),)), emit=_emitter(queue, True), clock=lambda: now[0],
                        state=state, metrics=metrics)
    queue.on_ack = pipeline.acknowledge
    pipeline.backfill()  # caught up on nothing: what comes next is live, and counted
    import shutil
    shutil.copytree(src / "projects", root / "projects", dirs_exist_ok=True)
    pipeline.rescan()
    now[0] += 3600 * 10 ** 9
    pipeline.tick()
    assert pipeline.traces_behind and sink.spans == []
    assert sum(v for k, v in metrics.totals().items() if k.startswith("ccotel_tokens") and k.endswith("output")) \
        == want_out  # counted although nothing was delivered
    lines = metrics.value("ccotel_lines_read")
    assert lines == sum(len(p.read_bytes().splitlines()) for p in src.rglob("*.jsonl"))
    with sink._cv:
        sink._script.clear()  # the backend answers again
    rounds = 0
    assert queue.flush(timeout_s=20)
    assert metrics.value("ccotel_export_failures") > 0  # the refused attempts
    before_catch_up = len(sink.spans)
    assert 0 < before_catch_up < len(expected)  # what the queue held; the rest was let go
    for rounds in range(1, 200):  # noqa: B007 - the count is read after the loop
        if not pipeline.traces_behind:
            break
        assert queue.pending() == 0 and queue.down_since is None
        failures = metrics.value("ccotel_export_failures")
        pipeline = catch_up_traces(pipeline, queue, metrics)
        assert metrics.value("ccotel_export_failures") == failures  # counted once, never taken back
        now[0] += 3600 * 10 ** 9
        pipeline.tick()
        assert queue.flush(timeout_s=20)
    queue.close(timeout_s=10)
    assert rounds >= 2  # at least one catch-up from the trace cursor
    delivered = [s.span_id for s in sink.spans]
    assert len(delivered) == len(set(delivered)), "a span delivered twice"
    assert set(delivered) == {s.span_id for s in expected}
    assert sum(v for k, v in metrics.totals().items() if k.startswith("ccotel_tokens") and k.endswith("output")) \
        == want_out  # the catch-up counted nothing again
    assert metrics.value("ccotel_lines_read") == lines
    assert metrics.value("ccotel_turns", "completed") == 30 * 8
