"""How big ccotel's state gets: after a backfill of a large history, and over simulated months of
live use with Claude Code's cleanup sweep deleting old transcripts.

    .venv/bin/python -m bench.state_size --corpus /tmp/ccotel-bench/corpus-1000MB   # 1 GB backfill
    .venv/bin/python -m bench.state_size --month                                   # simulated months

The state keeps a digest (or mark) for as long as a transcript on disk holds it (state.py), so
after a backfill it is proportional to what is on disk, and in live use it stops growing once
the sweep deletes as much a day as Claude Code writes.
"""

from __future__ import annotations

import argparse
import copy
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from typing import Any

from ccotel.records import SpanRecord
from ccotel.run.pipeline import Options, Pipeline
from ccotel.store.sqlite import SqliteState as State


def backfill_sizes(corpus: str) -> dict[str, Any]:
    """``ccotel backfill`` in one process over the corpus, then the state's rows and bytes."""
    with tempfile.TemporaryDirectory(prefix="ccotel-state-size-") as tmp:
        state_dir = os.path.join(tmp, "state")
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "ccotel", "backfill", "--root", corpus, "--workers", "1",
                        "--traces-exporter", "none", "--state-dir", state_dir], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seconds = time.perf_counter() - t0
        st = State(state_dir)
        sizes = st.sizes()
        st.close()
    corpus_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(corpus) for f in fs
                       if f.endswith(".jsonl"))
    return {"corpus_mb": corpus_bytes / 1e6, "seconds": seconds, **sizes}


Lines = list[dict[str, Any]]


def _session_lines(sid: str, day: int, n: int, agents: int) -> tuple[Lines, dict[str, Lines]]:
    """A main file with ``n`` tool turns and ``agents`` subagent files (2.1.x layout)."""
    from tests.assemble.test_assemble import one_tool_turn
    from tests.transcript import Transcript

    t = Transcript(sid, t_ms=1_750_000_000_000 + day * 86_400_000)
    for i in range(n):
        one_tool_turn(t, f"{day}_{sid[9:13]}_{i}")
    subs: dict[str, list[dict[str, Any]]] = {}
    for a in range(agents):
        agent_id = f"a{day:04d}{a:012d}"
        s = Transcript(sid, agent_id=agent_id, t_ms=t.t_ms)
        one_tool_turn(s, f"{day}_{sid[9:13]}_sub{a}")
        subs[agent_id] = [copy.deepcopy(x) for x in s.lines]
    return t.lines, subs


def month_sizes(days: int, retention: int, per_day: int, turns: int, agents: int) -> list[dict[str, Any]]:
    """A pipeline following a root day by day: ``per_day`` new sessions a day, files older than
    ``retention`` days deleted (Claude Code's cleanupPeriodDays), every span acknowledged."""
    import orjson

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ccotel-month-") as tmp:
        root = os.path.join(tmp, "claude")
        proj = os.path.join(root, "projects", "-tmp-proj")
        os.makedirs(proj)
        holder: list[Pipeline] = []

        def emit(spans: list[SpanRecord]) -> None:
            holder[0].acknowledge(spans)

        p = Pipeline(Options(roots=(root,)), emit=emit, state=State(os.path.join(tmp, "st")))
        holder.append(p)
        p.backfill(close_all=True)
        written: list[tuple[int, list[str]]] = []
        tracemalloc.start()
        for day in range(days):
            for i in range(per_day):
                sid = f"{day:08d}-{i:04d}-4222-8333-444444444444"
                main, subs = _session_lines(sid, day, turns, agents)
                paths = [os.path.join(proj, f"{sid}.jsonl")]
                with open(paths[0], "wb") as f:
                    f.writelines(orjson.dumps(x) + b"\n" for x in main)
                for agent_id, lines in subs.items():
                    d = os.path.join(proj, sid, "subagents")
                    os.makedirs(d, exist_ok=True)
                    paths.append(os.path.join(d, f"agent-{agent_id}.jsonl"))
                    with open(paths[-1], "wb") as f:
                        f.writelines(orjson.dumps(x) + b"\n" for x in lines)
                written.append((day, paths))
                p.poll(paths)
            swept = [x for d, ps in written if d <= day - retention for x in ps if os.path.exists(x)]
            for path in swept:
                os.remove(path)
            p.forget_deleted(set(swept))
            p.backfill(close_all=True)  # the day's turns end (live, the stall timeout ends them)
            assert p.state is not None
            sizes = p.state.sizes()
            rows.append({"day": day + 1, **sizes, "seen_calls": len(p.assembler._seen_calls),
                         "files_followed": len(p.files), "traced_kb": tracemalloc.get_traced_memory()[0] // 1024})
        tracemalloc.stop()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", help="a bench corpus (bench/corpus.py) to backfill")
    ap.add_argument("--month", action="store_true", help="simulate live use with the cleanup sweep")
    ap.add_argument("--days", type=int, default=90)
    ap.add_argument("--retention", type=int, default=30, help="Claude Code's cleanupPeriodDays")
    ap.add_argument("--per-day", type=int, default=40, help="sessions a day")
    args = ap.parse_args(argv)
    if args.corpus:
        r = backfill_sizes(args.corpus)
        print(f"backfill of {r['corpus_mb']:,.0f} MB in {r['seconds']:.1f} s: state {r['bytes'] / 1e6:.1f} MB"
              f" ({r['bytes'] / r['corpus_mb'] / 1e3:.2f} KB per MB read); rows: files {r['files']:,},"
              f" calls {r['calls']:,}, prompts {r['prompts']:,}, acked_ids {r['acked_ids']:,},"
              f" marks {r['marks']:,}, counters {r['counters']:,}")
    if args.month:
        rows = month_sizes(args.days, args.retention, args.per_day, turns=3, agents=1)
        print(f"{args.per_day} sessions a day (3 turns, 1 subagent each), files deleted after {args.retention} days")
        print(f"{'day':>4} {'state KB':>9} {'files':>6} {'calls':>7} {'prompts':>7} {'acked_ids':>9} {'marks':>5}"
              f" {'seen':>7} {'followed':>8} {'py KB':>7}")
        for r in rows:
            if r["day"] % 10 == 0 or r["day"] == 1:
                print(f"{r['day']:>4} {r['bytes'] // 1024:>9,} {r['files']:>6,} {r['calls']:>7,} {r['prompts']:>7,}"
                      f" {r['acked_ids']:>9,} {r['marks']:>5,} {r['seen_calls']:>7,} {r['files_followed']:>8,}"
                      f" {r['traced_kb']:>7,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
