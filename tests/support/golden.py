"""What ccotel exports and reports, written out so that two checkouts can be compared byte for byte.

    python -m tests.support.golden OUT_DIR        # in one checkout, then in another
    diff -r OUT_A OUT_B                           # nothing: the same spans and reports

Black box: only the command line (``python -m ccotel``), so the same script serves a checkout
before and after its modules move. For every committed fixture of every CLI version and for
``shared/realdata`` laid out as a config dir:
- ``spans.jsonl``: ``ccotel backfill --traces-exporter console --state none``, every span
  (ids, names, times, status, attributes, events), sorted by trace and span id;
- ``report-<view>.json``: ``ccotel report <view> --json --breakdown`` read from the transcripts
  alone (``--state none``) and from the ledger a backfill wrote (``--state DIR``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.ccusage import realdata_dir, realdata_tree

REPO = Path(__file__).resolve().parents[2]
VIEWS = ("daily", "weekly", "monthly", "session", "project")
# Every transcript's mtime, so that a report does not depend on how long ago the checkout was made (the
# ledger answers alone for transcripts older than its last write by a grace period).
PINNED_MTIME_NS = 1_767_225_600 * 10**9  # 2026-01-01T00:00:00Z


def _ccotel(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, TZ="UTC", COLUMNS="200", NO_COLOR="1")
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    return subprocess.run([sys.executable, "-m", "ccotel", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)


def _spans(root: Path) -> str:
    out = _ccotel("backfill", "--root", str(root), "--traces-exporter", "console", "--state", "none",
                  "--workers", "1")
    if out.returncode != 0:
        raise SystemExit(f"backfill of {root} failed ({out.returncode}): {out.stderr[-2000:]}")
    spans = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    spans.sort(key=lambda s: (s["trace_id"], s["span_id"], s["start_ns"]))
    return "".join(json.dumps(s, sort_keys=True) + "\n" for s in spans)


def _reports(root: Path, state: str) -> dict[str, str]:
    reports = {}
    for view in VIEWS:
        out = _ccotel("report", view, "--json", "--breakdown", "--root", str(root), "--state", state)
        reports[view] = f"exit {out.returncode}\n{out.stdout}"
    return reports


def _pinned(tree: Path) -> Path:
    for path in tree.rglob("*"):
        if path.is_file():
            os.utime(path, ns=(PINNED_MTIME_NS, PINNED_MTIME_NS))
    return tree


def corpora(scratch: Path) -> dict[str, Path]:
    """Name -> config dir: every fixture's, then realdata's, copied into ``scratch`` with pinned mtimes."""
    found = {}
    fixtures = REPO / "tests" / "fixtures"
    for claude in sorted(fixtures.glob("**/claude")):
        if (claude / "projects").is_dir():
            name = str(claude.parent.relative_to(fixtures))
            copy = scratch / "fixtures" / name / "claude"
            shutil.copytree(claude, copy, symlinks=True)
            found[name] = _pinned(copy)
    if realdata_dir().is_dir():
        found["realdata"] = _pinned(realdata_tree(scratch / "realdata" / "claude"))
    return found


def write(out_dir: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        for name, root in corpora(scratch).items():
            dest = out_dir / name.replace("/", "__")
            dest.mkdir(parents=True, exist_ok=True)
            (dest / "spans.jsonl").write_text(_spans(root))
            for view, text in _reports(root, "none").items():
                (dest / f"report-{view}-transcripts.json").write_text(text)
            state = scratch / "state" / name.replace("/", "__")
            out = _ccotel("backfill", "--root", str(root), "--traces-exporter", "none", "--state", str(state),
                          "--workers", "1")
            if out.returncode != 0:
                raise SystemExit(f"backfill of {root} with a state failed: {out.stderr[-2000:]}")
            for view, text in _reports(root, str(state)).items():
                (dest / f"report-{view}-ledger.json").write_text(text)
            print(f"{name}: {sum(1 for _ in (dest / 'spans.jsonl').open())} spans", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m tests.support.golden OUT_DIR")
    write(Path(sys.argv[1]))
