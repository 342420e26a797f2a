"""``ccotel report`` answered from the ledger vs read from the transcripts, on shared/realdata.

    .venv/bin/python -m bench.report_ledger [--repeat 5] [--root CONFIG_DIR]

Lays out ../shared/realdata as a Claude config dir in a temp dir (or takes ``--root``), writes a
ledger as the pipeline reads it, dates the files a day back (so none is newer than the ledger:
the report answers from it alone), then times ``report.run`` in this process (best of
``--repeat``) for the session and daily views: from the ledger, and with ``--no-ledger`` (one
process, and the default workers). Machines here are shared: read the ratio.
"""

from __future__ import annotations

import argparse
import io
import os
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path

from ccotel.commands.report.command import add_arguments, run
from ccotel.run.pipeline import Options, Pipeline
from ccotel.store.ledger import LEDGER_FILE, Ledger


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("--root", action="append")
    p.add_argument("--state-dir")
    add_arguments(p)
    return p


def _best(argv: list[str], repeat: int) -> float:
    parser = _parser()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        with redirect_stdout(io.StringIO()):
            run(parser.parse_args(argv))
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--root", default=None, help="a Claude config dir (default: a realdata tree)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ccotel-bench-ledger-") as tmp:
        if args.root:
            root = args.root
        else:
            from tests.support.ccusage import realdata_tree

            root = str(realdata_tree(Path(tmp) / "claude"))
        state = os.path.join(tmp, "state")
        ledger = Ledger(os.path.join(state, LEDGER_FILE), roots=(root,))
        start = time.perf_counter()
        Pipeline(Options(roots=(root,)), emit=ledger.record, state=None).backfill(close_all=True)
        print(f"ledger written as the pipeline reads: {time.perf_counter() - start:.2f} s, "
              f"{ledger.coverage().calls} calls")
        ledger.close()
        day_ago = time.time() - 86_400
        for path in Path(root).rglob("*"):
            os.utime(path, (day_ago, day_ago))
        base = ["--root", root, "--state-dir", state, "--json", "--timezone", "UTC"]
        for view in ("session", "daily"):
            led = _best([view, *base], args.repeat)
            one = _best([view, *base, "--no-ledger", "--workers", "1"], args.repeat)
            many = _best([view, *base, "--no-ledger"], args.repeat)
            print(f"{view:8} ledger {led:.3f} s | transcripts, 1 process {one:.3f} s (ratio {led / one:.2f}) | "
                  f"transcripts, default workers {many:.3f} s (ratio {led / many:.2f})")


if __name__ == "__main__":
    main()
