"""The hook handler's cost per call (``python -m bench.hook``): ``python -m ccotel hook`` and the
``ccotel`` script's way in (``ccotel.__main__:main``) beside ``python -c pass`` and ``python -m json.tool``
(a stdlib module run the same way), interleaved in the same run, median and p90 of N runs each, and the
ratio to ``python -c pass``. Each run writes one spool line into a temp state dir."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EVENT = json.dumps({"session_id": "0f6c1c5e-5d7a-4a5e-9a59-0c1f2a3b4c5d", "transcript_path": "/x.jsonl", "cwd": "/p",
                    "permission_mode": "default", "hook_event_name": "PermissionRequest", "tool_name": "Bash",
                    "tool_input": {"command": "touch made.txt", "description": "Create a file"},
                    "permission_suggestions": []}).encode()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("-n", type=int, default=40)
    args = p.parse_args(argv)
    state = tempfile.mkdtemp(prefix="ccotel-bench-hook-")
    env = {**os.environ, "PYTHONPATH": str(REPO), "CCOTEL_STATE": state}
    rows = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "python -m json.tool (stdlib, same way in)": [sys.executable, "-m", "json.tool"],
        "python -m ccotel hook": [sys.executable, "-m", "ccotel", "hook"],
        "ccotel hook (the script's entry point)": [sys.executable, "-c",
                                                   "import sys; from ccotel.__main__ import main; "
                                                   "sys.exit(main(['hook']))"],
        "through the full CLI (cli.main, as before)": [sys.executable, "-c", "import sys; from ccotel.cli import main; "
                                                       "sys.exit(main(['hook']))"],
    }
    times: dict[str, list[float]] = {k: [] for k in rows}
    for _ in range(args.n):
        for name, argv_ in rows.items():  # interleaved: the machine's load falls on every row alike
            t = time.perf_counter()
            subprocess.run(argv_, input=EVENT, env=env, stdout=subprocess.DEVNULL, check=True, timeout=60)
            times[name].append((time.perf_counter() - t) * 1000)
    base = statistics.median(times["python -c pass"])
    for name, ts in times.items():
        ts.sort()
        med, p90 = statistics.median(ts), ts[int(0.9 * (len(ts) - 1))]
        print(f"{name:45s} median {med:6.1f} ms  p90 {p90:6.1f} ms  x{med / base:4.2f} of python -c pass")
    spooled = sum(len(f.read_text().splitlines()) for f in Path(state, "hooks").glob("*.jsonl"))
    print(f"spool lines written: {spooled} (expected {3 * args.n})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
