"""Rerun scenarios with the real CLI and rewrite their fixtures, per Claude Code version.

    python -m tests.harness.regenerate --version 2.1.330                 # all scenarios of one version
    python -m tests.harness.regenerate --version 2.1.330 s01_bash_tool   # some
    python -m tests.harness.regenerate                                   # every version of the matrix
    python -m tests.harness.regenerate --missing                         # only fixtures not there yet
    python -m tests.harness.regenerate --list

Fixtures of 2.1.197 are ``tests/fixtures/<scenario>/``, of a newer version
``tests/fixtures/<version>/<scenario>/`` (see :mod:`tests.harness.fixtures`).

A fixture is only written when every check of :mod:`tests.harness.checks` passes on the fresh run
(``--force`` writes it anyway and records the problems in meta.json). Each run uses a private HOME in
a fresh temp dir, so nothing of the machine's own ``~/.claude`` can end up in a fixture.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .checks import check_scenario, evidence_from_result
from .fixtures import FIXTURES_DIR, fixture_root
from .install import VERSIONS, install
from .scenarios import SCENARIOS, ScenarioResult, copy_config_tree, run_scenario

__all__ = ["write_fixture", "main"]


def _node_version() -> str | None:
    try:
        return subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None


def write_fixture(result: ScenarioResult, dest_root: Path = FIXTURES_DIR,
                  problems: list[str] | None = None) -> Path:
    """Write ``result`` as its version's ``<scenario>/`` under ``dest_root`` (replacing an older copy);
    returns that path."""
    name = result.scenario.name
    version = result.version
    dest_root = fixture_root(version, Path(dest_root))
    dest_root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=dest_root))
    try:
        copy_config_tree(result.sandbox.config_dir, staging / "claude")
        snaps = result.sandbox.root / "snapshots"
        if snaps.is_dir():
            for snap in sorted(snaps.iterdir()):
                shutil.copytree(snap, staging / "snapshots" / snap.name)
        shutil.copy2(result.ground_truth, staging / "ground_truth.jsonl")
        runs: list[dict[str, Any]] = []
        for i, (label, run) in enumerate(result.runs, start=1):
            rel = Path("runs") / f"{i:02d}_{label}"
            (staging / rel).mkdir(parents=True)
            (staging / rel / "stdout.jsonl").write_text(run.stdout, encoding="utf-8")
            entry: dict[str, Any] = {
                "label": label,
                "argv": ["claude"] + run.argv[1:],
                "returncode": run.returncode,
                "killed": run.killed,
                "timed_out": run.timed_out,
                "duration_s": round(run.duration_s, 3),
                "session_id": run.session_id,
                "stdout": (rel / "stdout.jsonl").as_posix(),
            }
            if run.stderr.strip():
                (staging / rel / "stderr.txt").write_text(run.stderr, encoding="utf-8")
                entry["stderr"] = (rel / "stderr.txt").as_posix()
            runs.append(entry)
        files = sorted(p for p in staging.rglob("*") if p.is_file())
        sb = result.sandbox
        meta = {
            "scenario": name,
            "number": result.scenario.number,
            "description": result.scenario.description,
            "cli_version": version,
            "generated_at": datetime.fromtimestamp(result.started, timezone.utc).isoformat(timespec="seconds"),
            "generator": f"python -m tests.harness.regenerate --version {version} {name}",
            "node": _node_version(),
            "platform": f"{platform.system()} {platform.machine()}",
            "sandbox_root": str(sb.root),
            "home": str(sb.home),
            "config_dir": str(sb.config_dir),
            "cwd": str(sb.cwd),
            "tmpdir": str(sb.tmp),
            "session_ids": result.session_ids,
            "runs": runs,
            "hand_made": [],
            "notable": result.scenario.notable_for(version),
            "notes": result.notes,
            "check_problems": problems or [],
            "files": [{"path": p.relative_to(staging).as_posix(), "bytes": p.stat().st_size} for p in files],
        }
        (staging / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        final = dest_root / name
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
        return final
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.harness.regenerate", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenarios", nargs="*", help="scenario names (default: all)")
    ap.add_argument("--version", action="append", choices=VERSIONS,
                    help="Claude Code version (repeatable; default: every version of the matrix)")
    ap.add_argument("--missing", action="store_true", help="only scenarios that have no fixture for the version yet")
    ap.add_argument("--list", action="store_true", help="list the scenarios and exit")
    ap.add_argument("--force", action="store_true", help="write fixtures even when checks fail")
    ap.add_argument("--keep", action="store_true", help="keep the temp sandboxes")
    ap.add_argument("--dest", type=Path, default=FIXTURES_DIR, help="fixtures root (default: tests/fixtures)")
    args = ap.parse_args(argv)
    if args.list:
        for s in SCENARIOS.values():
            print(f"{s.name:28s} {s.description}")
        return 0
    unknown = [n for n in args.scenarios if n not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenario(s): {unknown}; see --list")
    failed = 0
    for version in args.version or VERSIONS:
        install(version=version)
        started = time.monotonic()
        for name in args.scenarios or list(SCENARIOS):
            scenario = SCENARIOS[name]
            if not scenario.runs_on(version):
                print(f"{version} {name}: not reachable on this version, skipped")
                continue
            if args.missing and (fixture_root(version, args.dest) / name / "meta.json").is_file():
                continue
            result = run_scenario(scenario, version=version)
            try:
                problems = check_scenario(evidence_from_result(result))
                if problems and not args.force:
                    failed += 1
                    print(f"{version} {name}: NOT written, {len(problems)} problem(s):", file=sys.stderr)
                    for p in problems:
                        print(f"  - {p}", file=sys.stderr)
                    continue
                path = write_fixture(result, args.dest, problems)
                size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
                print(f"{version} {name}: {path} ({size} bytes, {result.finished - result.started:.1f}s)"
                      + (f", {len(problems)} problem(s) recorded" if problems else ""), flush=True)
            finally:
                if args.keep:
                    print(f"  sandbox kept: {result.sandbox.root}")
                else:
                    shutil.rmtree(result.sandbox.root, ignore_errors=True)
        print(f"{version}: {time.monotonic() - started:.1f}s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
