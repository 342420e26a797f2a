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

from ccotel.pipeline import Options, Pipeline
from tests.otlp_receiver import OtlpReceiver
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
        rx.refuse = True
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
            rx.refuse = False
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
    assert err.count("not reachable") == 1 and "answers again" in err
