"""SIGKILL ccotel at random points during backfill and during live tailing, restart it each time.

A loopback OTLP receiver keeps every delivery. At the end it must hold every expected span
(a single clean in-process pass over the final files) exactly once by span id, and the
checkpointed counters must equal what the live writes contained. Prints the numbers the issue
asks for: kill points survived, spans lost, spans delivered twice.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from contextlib import closing
from pathlib import Path

from ccotel.run.pipeline import Options, Pipeline
from ccotel.store.sqlite import SqliteState as State
from tests.harness.fixtures import list_fixtures, load_fixture
from tests.support.otlp import OtlpReceiver
from tests.transcript import Transcript, text, tool_use

SEED = 20261121


def start_ccotel(root: Path, state: Path, endpoint: str, parallel: bool = False) -> subprocess.Popen:
    """``parallel``: the catch-up is read by 3 worker processes whatever its size (catchup.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = endpoint
    workers = ["--workers", "3", "--parallel-min-mb", "0"] if parallel else ["--workers", "1"]
    return subprocess.Popen(
        [sys.executable, "-m", "ccotel", "run", "--root", str(root), "--state-dir", str(state),
         "--metrics-addr", "none", "--no-status", "--stall-timeout", "3600", *workers],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


def history(root: Path, rng: random.Random) -> None:
    """Real-CLI fixtures plus many synthetic sessions: enough that a backfill takes a while."""
    for name in list_fixtures():
        shutil.copytree(load_fixture(name).config_dir / "projects", root / "projects", dirs_exist_ok=True)
    for i in range(150):
        sid = f"{i:08x}-aaaa-4bbb-8ccc-dddddddddddd"
        t = Transcript(sid, t_ms=1_760_000_000_000 + i * 10_000_000)
        for j in range(rng.randint(1, 6)):
            t.tool_turn(f"h{i}_{j}", "x" * rng.randint(10, 3000), "y" * rng.randint(10, 20000))
        t.write(str(root / "projects" / f"-tmp-hist-{i % 5}" / f"{sid}.jsonl"))


def live_turn(t: Transcript, tag: str) -> bytes:
    t.lines = []
    t.t_ms = int(time.time() * 1000)
    t.prompt(f"live {tag}", parent=t.last)
    t.response(f"msg_{tag}_a", [text("looking"), tool_use(f"toolu_{tag}")], stop_reason="tool_use",
               usage={"input_tokens": 5, "cache_creation_input_tokens": 7, "cache_read_input_tokens": 11,
                      "output_tokens": 13})
    t.tool_result(f"toolu_{tag}", "ok")
    t.response(f"msg_{tag}_b", [text("done")], stop_reason="end_turn",
               usage={"input_tokens": 5, "cache_creation_input_tokens": 7, "cache_read_input_tokens": 11,
                      "output_tokens": 17})
    return t.bytes()


def caught_up(state: Path) -> bool:
    """The first catch-up's mark is committed (read-only: ccotel is running)."""
    try:
        with closing(sqlite3.connect(f"file:{state / 'state.db'}?mode=ro", uri=True, timeout=5)) as db:
            return db.execute("SELECT 1 FROM marks WHERE key = 'caught_up'").fetchone() is not None
    except sqlite3.OperationalError:  # not created yet
        return False


def expected_span_ids(root: Path) -> set[str]:
    spans: list = []
    Pipeline(Options(roots=(str(root),)), emit=spans.extend).backfill(close_all=True)
    return {f"{s.span_id:016x}" for s in spans}


def test_sigkill_during_backfill_and_live_tailing(tmp_path):
    rng = random.Random(SEED)
    root, state = tmp_path / "claude", tmp_path / "state"
    history(root, rng)
    kills_backfill = kills_live = 0
    with OtlpReceiver() as rx:
        # 1. backfill, killed at random points
        t0 = time.monotonic()
        for k in range(12):
            proc = start_ccotel(root, state, rx.endpoint, parallel=k % 2 == 0)
            time.sleep(rng.uniform(0.3, 1.8))
            kill(proc)
            kills_backfill += 1
        history_ids = expected_span_ids(root)
        proc = start_ccotel(root, state, rx.endpoint, parallel=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not history_ids <= {s["span_id"] for s in rx.spans}:
            time.sleep(0.2)
        assert history_ids <= {s["span_id"] for s in rx.spans}, "history not delivered"
        # Live lines count only once the first catch-up is committed (its mark): before that, a
        # restart reads them as history. Under load that takes more than the spans' delivery.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not caught_up(state):
            time.sleep(0.1)
        assert caught_up(state), "the first catch-up was never committed"
        t1 = time.monotonic()
        # 2. live: sessions written line by line while ccotel is killed and restarted
        live = [Transcript(f"{i:08x}-eeee-4fff-8aaa-bbbbbbbbbbbb") for i in range(4)]
        paths = [root / "projects" / "-tmp-live" / f"{t.session_id}.jsonl" for t in live]
        paths[0].parent.mkdir(parents=True, exist_ok=True)
        n_turns = 0
        next_kill = time.monotonic() + rng.uniform(0.2, 0.8)
        for k in range(40):
            i = k % len(live)
            for line in live_turn(live[i], f"l{k}").splitlines(keepends=True):
                with open(paths[i], "ab") as f:
                    f.write(line)
                time.sleep(rng.uniform(0.0, 0.08))
                if time.monotonic() >= next_kill and kills_live < 12:
                    kill(proc)
                    kills_live += 1
                    time.sleep(rng.uniform(0.0, 0.3))
                    proc = start_ccotel(root, state, rx.endpoint, parallel=kills_live % 2 == 0)
                    next_kill = time.monotonic() + rng.uniform(0.2, 0.8)
            n_turns += 1
        t2 = time.monotonic()
        expected = expected_span_ids(root)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not expected <= {s["span_id"] for s in rx.spans}:
            time.sleep(0.2)
        time.sleep(2.0)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
    received = Counter(s["span_id"] for s in rx.spans)
    lost = expected - set(received)
    extra = set(received) - expected
    resent = sum(c - 1 for c in received.values() if c > 1)
    print(f"\ncrash test: {kills_backfill} kills during backfill, {kills_live} during live tailing; "
          f"{len(expected)} spans expected, lost {len(lost)}, unexpected {len(extra)}, "
          f"delivered twice {resent}; phases {t1 - t0:.0f}s backfill, {t2 - t1:.0f}s live")
    assert kills_backfill + kills_live >= 20
    assert not lost and not extra
    counters = State(str(state)).counters()
    total = {}
    for k, v in counters.items():
        key = k.partition(":")[2]
        total[key] = total.get(key, 0.0) + v
    # All at once, so a failure tells a live turn counted twice (10 input, 30 output tokens a
    # turn) from a history one counted as live (each call 3 input and 50 output tokens).
    counted = {k.replace("\x1f", "/"): v for k, v in total.items()
               if k.startswith(("ccotel_api_calls", "ccotel_tool_calls", "ccotel_turns", "ccotel_tokens"))}
    assert counted == {
        "ccotel_api_calls/claude-opus-4-6": 2 * n_turns,
        "ccotel_tool_calls/Bash/ok": n_turns,
        "ccotel_turns/completed": n_turns,
        "ccotel_tokens/claude-opus-4-6/input": 10 * n_turns,
        "ccotel_tokens/claude-opus-4-6/output": (13 + 17) * n_turns,
        "ccotel_tokens/claude-opus-4-6/cache_creation": 14 * n_turns,
        "ccotel_tokens/claude-opus-4-6/cache_read": 22 * n_turns,
    }
    assert len(expected) <= total.get("ccotel_spans_exported\x1f", 0) <= len(expected) + resent
    assert "ccotel_turns\x1finterrupted" not in total  # history (the s11 fixture) is not counted
