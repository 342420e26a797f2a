"""``ccotel statusline`` beside ``ccusage statusline`` on the same input, against ``python -c pass``.

    .venv/bin/python -m bench.statusline [--runs 100] [--out bench/results-statusline.json]

Lays out ../shared/realdata as a Claude config dir (tests.support.ccusage.realdata_tree), writes
the usage ledger as ``ccotel run`` would, and picks its largest session. Each round runs, one after
the other (the machine's load falls on all of them alike):

- baseline: ``python -c pass`` (Python's own start, the floor of any Python status line);
- floor: ``python -c "import json, sqlite3"``, the two standard modules the line needs (its JSON
  input, the ledger): what any Python status line reading a ledger pays;
- ccotel, steady: ``python -m ccotel statusline`` with the session's JSON, nothing new written
  since the last run (its cache is warm);
- ccotel, new call: the same after a new API call is appended to the session (Claude Code runs the
  status line after each message: this is the usual case; the call is read and priced);
- ccotel, console script: the steady case as the installed ``ccotel`` command starts it (its entry
  point, ``ccotel.__main__:main``, without ``-m``'s runpy);
- ccusage: ``ccusage statusline`` (20.0.24, its defaults: offline prices, its 1 s output cache),
  and ``--no-cache``, on the same JSON and config dir.

Prints p50 and p99 per row and each as a ratio to the baseline's; writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def _timed(argv: list[str], stdin: str, env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, env=env, timeout=120, check=False)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:4]} exited {proc.returncode}: {proc.stderr[-500:]}")
    return took, proc.stdout.strip()


def _new_call(path: Path, n: int, sid: str, model: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    line = {"type": "assistant", "uuid": f"bench-{n}", "sessionId": sid, "requestId": f"req_bench_{n}",
            "timestamp": stamp, "message": {"id": f"msg_bench_{n}", "model": model, "role": "assistant",
                                            "content": [{"type": "text", "text": "ok"}],
                                            "usage": {"input_tokens": 10, "output_tokens": 20,
                                                      "cache_creation_input_tokens": 300,
                                                      "cache_read_input_tokens": 40000}}}
    with path.open("a") as f:
        f.write(json.dumps(line, separators=(",", ":")) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--out", default=str(REPO / "bench" / "results-statusline.json"))
    args = ap.parse_args(argv)

    from ccotel.run.pipeline import Options, Pipeline
    from ccotel.store.ledger import LEDGER_FILE, Ledger
    from tests.support.ccusage import _private_env, ccusage_bin, realdata_tree

    work = Path(tempfile.mkdtemp(prefix="ccotel-bench-statusline-"))
    config = realdata_tree(work / "claude")
    state = work / "state"
    state.mkdir()
    ledger = Ledger(str(state / LEDGER_FILE), roots=(str(config),))
    Pipeline(Options(roots=(str(config),)), emit=ledger.record, state=None).backfill(close_all=True)
    ledger.close()
    transcript = max((p for p in (config / "projects").glob("*/*.jsonl")), key=lambda p: p.stat().st_size)
    sid = transcript.stem
    model = "claude-opus-4-6"
    doc = json.dumps({"session_id": sid, "transcript_path": str(transcript), "cwd": "/w",
                      "model": {"id": model, "display_name": "Opus 4.6"},
                      "workspace": {"current_dir": "/w", "project_dir": "/w"}, "version": "2.1.330",
                      "cost": {"total_cost_usd": 1.23, "total_duration_ms": 60000, "total_api_duration_ms": 30000,
                               "total_lines_added": 1, "total_lines_removed": 0},
                      "context_window": {"context_window_size": 200000, "used_percentage": 20,
                                         "total_input_tokens": 40000, "total_output_tokens": 1000}})
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "CLAUDE_CONFIG_DIR": str(config)}
    ours = [sys.executable, "-m", "ccotel", "statusline", "--root", str(config), "--state", str(state)]
    home = work / "home"
    cc_env = _private_env(home, config)
    cc = [str(ccusage_bin()), "statusline", "--offline"]
    script = [sys.executable, "-c", "import sys; from ccotel.__main__ import main; sys.exit(main())", "statusline",
              *ours[4:]]
    rows: dict[str, list[float]] = {"baseline: python -c pass": [], "floor: import json, sqlite3": [],
                                    "ccotel statusline, steady": [], "ccotel statusline, console script": [],
                                    "ccotel statusline, after a new call": [], "ccusage statusline": [],
                                    "ccusage statusline --no-cache": []}
    samples: dict[str, str] = {}
    _timed(ours, doc, env)  # the first run reads the whole session and prices it: its cache is then warm
    for n in range(args.runs):
        rows["baseline: python -c pass"].append(_timed([sys.executable, "-c", "pass"], "", env)[0])
        rows["floor: import json, sqlite3"].append(_timed([sys.executable, "-c", "import json, sqlite3"], "", env)[0])
        took, out = _timed(ours, doc, env)
        rows["ccotel statusline, steady"].append(took)
        samples["ccotel"] = out
        rows["ccotel statusline, console script"].append(_timed(script, doc, env)[0])
        _new_call(transcript, n, sid, model)
        rows["ccotel statusline, after a new call"].append(_timed(ours, doc, env)[0])
        took, out = _timed(cc, doc, cc_env)
        rows["ccusage statusline"].append(took)
        samples["ccusage"] = out
        rows["ccusage statusline --no-cache"].append(_timed([*cc, "--no-cache"], doc, cc_env)[0])
    base99, base50 = _pct(rows["baseline: python -c pass"], 99), _pct(rows["baseline: python -c pass"], 50)
    result: dict[str, Any] = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "runs": args.runs,
                              "session_bytes": transcript.stat().st_size, "load": os.getloadavg(),
                              "rows": {}, "lines": samples}
    print(f"{'row':40s} {'p50 ms':>8s} {'p99 ms':>8s} {'p50 x':>7s} {'p99 x':>7s}")
    for name, xs in rows.items():
        p50, p99 = _pct(xs, 50), _pct(xs, 99)
        result["rows"][name] = {"p50_ms": round(p50 * 1e3, 1), "p99_ms": round(p99 * 1e3, 1),
                                "p50_x_baseline": round(p50 / base50, 2), "p99_x_baseline": round(p99 / base99, 2)}
        print(f"{name:40s} {p50 * 1e3:8.1f} {p99 * 1e3:8.1f} {p50 / base50:7.2f} {p99 / base99:7.2f}")
    for k, v in samples.items():
        print(f"{k}: {v}")
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
