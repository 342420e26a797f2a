"""``ccotel statusline`` beside ``ccusage statusline`` on the same input, against Python's own start.

    .venv/bin/python -m bench.statusline [--runs 100] [--out bench/results-statusline.json]

Lays out ../shared/realdata as a Claude config dir (tests.support.ccusage.realdata_tree), writes
the usage ledger as ``ccotel run`` would, and picks its largest session. Each round runs, one after
the other (the machine's load falls on all of them alike):

- baselines: ``python -c pass`` (Python's own start with the site packages: the floor of any
  Python status line), ``python -I -c pass`` (isolated: no user site, no PYTHON* variables) and
  ``python -S -c pass`` (no site module at all: below what an installed command can reach);
- ccotel, steady: ``python -m ccotel statusline`` with the session's JSON, nothing new written
  since the last run (its cache is warm);
- ccotel, new call: the same after a new API call is appended to the session (Claude Code runs the
  status line after each message: this is the usual case; the call is read and priced from the
  price memo);
- ccotel, console script: the new-call case as the ``ccotel`` command pip installs starts it (pip's
  wrapper, which imports ``re``, then ``ccotel.__main__:main``);
- ccotel, python -c: the same started as ``python -c "from ccotel.__main__ import main; main()"
  statusline`` (neither runpy nor re);
- ccotel, new call and ledger commit: the same after the ledger was written to (as ``ccotel run``
  does after a call): the line's snapshot of the ledger is stale, the ledger is read;
- ccotel, new model or day: a new call when the price memo is gone (the pricing module is loaded:
  for a model not seen yet, a new genai-prices table, or once a month);
- ccotel, no bytecode: the steady case with PYTHONDONTWRITEBYTECODE=1 and no ``.pyc`` of ccotel (as
  a checkout this machine's shells run: every module of the line compiled on each run);
- ccusage: ``ccusage statusline`` (20.0.24, its defaults: offline prices, its 1 s output cache),
  and ``--no-cache``, on the same JSON and config dir.

All Python rows but the no-bytecode one run with their ``.pyc`` files written (a
PYTHONPYCACHEPREFIX in the work dir, warmed before the rounds), as an installed ccotel runs. A p99
in milliseconds on a loaded machine says more about the load than about the line: each row is also
given as a ratio to the baselines measured in the same rounds, with the load average before and
after. Writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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


def _timed(argv: list[str], stdin: str, env: dict[str, str]) -> tuple[float, str, float]:
    """(wall seconds, stdout, CPU seconds: the child's user + system time, which the load does not
    stretch as it stretches the wall time)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, env=env, timeout=120, check=False)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:4]} exited {proc.returncode}: {proc.stderr[-500:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return took, proc.stdout.strip(), cpu


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


def _ledger_commit(path: Path, n: int) -> None:
    """A write to the ledger, as ``ccotel run`` makes after a call (the line's snapshot of it is
    then stale: SQLite is loaded and the ledger read)."""
    import sqlite3

    with sqlite3.connect(path) as db:
        db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('bench', ?)", (str(n),))
    db.close()


def _wall_cpu(timed: tuple[float, str, float]) -> tuple[float, float]:
    return timed[0], timed[2]


BASELINES = ("python -c pass", "python -I -c pass", "python -S -c pass")


def _wrapper(path: Path) -> list[str]:
    """pip's console script for ``ccotel = ccotel.__main__:main`` (distlib's template)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{sys.executable}\n# -*- coding: utf-8 -*-\nimport re\nimport sys\n"
                    "from ccotel.__main__ import main\nif __name__ == '__main__':\n"
                    "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
                    "    sys.exit(main())\n")
    path.chmod(0o755)
    return [str(path)]


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
    base_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    env = {**base_env, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "CLAUDE_CONFIG_DIR": str(config),
           "PYTHONPYCACHEPREFIX": str(work / "pycache")}
    no_pyc = {**base_env, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "CLAUDE_CONFIG_DIR": str(config),
              "PYTHONDONTWRITEBYTECODE": "1"}
    compiled = any((REPO / "ccotel").rglob("*.pyc"))
    opts = ["statusline", "--root", str(config), "--state", str(state)]
    ours = [sys.executable, "-m", "ccotel", *opts]
    script = [*_wrapper(work / "bin" / "ccotel"), *opts]
    launcher = [sys.executable, "-c", "from ccotel.__main__ import main; main()", *opts]
    memo = state / "statusline" / "prices.memo.json"
    home = work / "home"
    cc_env = _private_env(home, config)
    cc = [str(ccusage_bin()), "statusline", "--offline"]
    rows: dict[str, list[tuple[float, float]]] = {name: [] for name in (
        *BASELINES, "ccotel statusline, steady", "ccotel statusline, after a new call",
        "ccotel statusline, after a new call, console script", "ccotel statusline, after a new call, python -c",
        "ccotel statusline, after a new call and a ledger commit",
        "ccotel statusline, new model or day (pricing loaded)",
        "ccotel statusline, steady, no bytecode", "ccusage statusline", "ccusage statusline --no-cache")}
    samples: dict[str, str] = {}
    _timed(ours, doc, env)  # the first run reads the whole session and prices it: its cache is then warm
    _new_call(transcript, -1, sid, model)
    _timed(ours, doc, env)  # ... and the memo holds today's price of the model
    for name in BASELINES:
        _timed([sys.executable, *name.split()[1:-1], "pass"], "", env)  # the standard library's .pyc under the prefix
    load_before = os.getloadavg()
    for n in range(args.runs):
        for name in BASELINES:
            rows[name].append(_wall_cpu(_timed([sys.executable, *name.split()[1:-1], "pass"], "", env)))
        timed = _timed(ours, doc, env)
        rows["ccotel statusline, steady"].append(_wall_cpu(timed))
        samples["ccotel"] = timed[1]
        _new_call(transcript, 5 * n, sid, model)
        rows["ccotel statusline, after a new call"].append(_wall_cpu(_timed(ours, doc, env)))
        _new_call(transcript, 5 * n + 1, sid, model)
        rows["ccotel statusline, after a new call, console script"].append(_wall_cpu(_timed(script, doc, env)))
        _new_call(transcript, 5 * n + 2, sid, model)
        rows["ccotel statusline, after a new call, python -c"].append(_wall_cpu(_timed(launcher, doc, env)))
        _new_call(transcript, 5 * n + 3, sid, model)
        _ledger_commit(state / LEDGER_FILE, n)
        rows["ccotel statusline, after a new call and a ledger commit"].append(_wall_cpu(_timed(ours, doc, env)))
        _new_call(transcript, 5 * n + 4, sid, model)
        memo.unlink()
        rows["ccotel statusline, new model or day (pricing loaded)"].append(_wall_cpu(_timed(ours, doc, env)))
        if not compiled:
            rows["ccotel statusline, steady, no bytecode"].append(_wall_cpu(_timed(ours, doc, no_pyc)))
        timed = _timed(cc, doc, cc_env)
        rows["ccusage statusline"].append(_wall_cpu(timed))
        samples["ccusage"] = timed[1]
        rows["ccusage statusline --no-cache"].append(_wall_cpu(_timed([*cc, "--no-cache"], doc, cc_env)))
    load_after = os.getloadavg()
    def stats(name: str) -> tuple[float, float, float]:
        walls, cpus = [w for w, _c in rows[name]], [c for _w, c in rows[name]]
        return _pct(walls, 50), _pct(walls, 99), _pct(cpus, 50)

    base = {name: stats(name) for name in BASELINES}
    result: dict[str, Any] = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "runs": args.runs,
                              "session_bytes": transcript.stat().st_size, "load_before": load_before,
                              "load_after": load_after, "rows": {}, "lines": samples}
    print(f"load average before {load_before}, after {load_after} ({os.cpu_count()} CPUs), {args.runs} rounds")
    print(f"{'row':52s} {'p50 ms':>7s} {'p99 ms':>7s} {'p50 x':>6s} {'p99 x':>6s} {'p99 xI':>6s} {'p99 xS':>6s} "
          f"{'cpu ms':>7s} {'cpu x':>6s}")
    for name, xs in rows.items():
        if not xs:
            continue
        p50, p99, cpu = stats(name)
        ratios = {"p50_x_pass": p50 / base[BASELINES[0]][0], "p99_x_pass": p99 / base[BASELINES[0]][1],
                  "p99_x_isolated": p99 / base[BASELINES[1]][1], "p99_x_no_site": p99 / base[BASELINES[2]][1]}
        result["rows"][name] = {"p50_ms": round(p50 * 1e3, 1), "p99_ms": round(p99 * 1e3, 1),
                                **{k: round(v, 2) for k, v in ratios.items()}, "cpu_p50_ms": round(cpu * 1e3, 1),
                                "cpu_p50_x_pass": round(cpu / base[BASELINES[0]][2], 2)}
        print(f"{name:52s} {p50 * 1e3:7.1f} {p99 * 1e3:7.1f} " + " ".join(f"{v:6.2f}" for v in ratios.values())
              + f" {cpu * 1e3:7.1f} {cpu / base[BASELINES[0]][2]:6.2f}")
    for k, v in samples.items():
        print(f"{k}: {v}")
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
