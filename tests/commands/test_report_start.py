"""``ccotel report`` answered from the ledger alone starts without cli.py, logging or the transcript
reader (report.command.run_from_ledger, reached first by ``python -m ccotel``), and says and
prints exactly what cli.py's way does, for good arguments and bad."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ccotel.run.pipeline import Options, Pipeline
from ccotel.store.ledger import LEDGER_FILE, Ledger
from tests.harness.fixtures import load_fixture

REPO = Path(__file__).resolve().parents[2]
CLI = "import sys; from ccotel.cli import main; raise SystemExit(main(sys.argv[1:]))"


def _ledger_state(tmp_path: Path) -> tuple[str, str]:
    """A root whose transcripts are older than its ledger's grace (the ledger answers alone), and
    the state dir holding that ledger."""
    config = load_fixture("2.1.330-s01_bash_tool").config_dir
    old = 1_600_000_000
    for path in Path(config).rglob("*.jsonl"):
        os.utime(path, (old, old))
    state = tmp_path / "state"
    state.mkdir()
    ledger = Ledger(str(state / LEDGER_FILE), roots=(str(config),))
    Pipeline(Options(roots=(str(config),)), emit=ledger.record, state=None).backfill(close_all=True)
    ledger.close()
    return str(config), str(state)


def _ccotel(*argv: str, code: str | None = None, importtime: bool = False) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "COLUMNS": "200"}
    how = ["-c", code] if code else ["-m", "ccotel"]
    return subprocess.run([sys.executable, *(["-X", "importtime"] if importtime else []), *how, *argv],
                          capture_output=True, text=True, env=env, timeout=60, cwd=REPO)


def test_a_report_from_the_ledger_loads_no_parser_of_other_commands_nor_logging(tmp_path):
    root, state = _ledger_state(tmp_path)
    proc = _ccotel("report", "--json", "--root", root, "--state-dir", state, importtime=True)
    assert proc.returncode == 0, proc.stderr
    loaded = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "ccotel.commands.report.from_ledger" in loaded and '"source": "ledger"' in proc.stdout
    for heavy in ("ccotel.cli", "logging", "ccotel.run.stopping", "ccotel.commands.report.transcripts",
                  "ccotel.read.discover", "ccotel.spans", "ccotel.store.state", "msgspec", "rich", "genai_prices"):
        assert heavy not in loaded, heavy


@pytest.mark.parametrize("argv", [
    ["--json"], [], ["daily", "--json"], ["weekly", "-w", "monday", "--json"], ["project", "--breakdown"],
    ["monthly", "--order=desc", "--json"], ["daily", "-s", "20200101", "-u", "2030-01-01", "-z", "UTC", "--json"],
    ["blocks", "--json"], ["--no-ledger", "--json"], ["--js"],  # blocks and --no-ledger: cli.py's way
    ["--order", "sideways"], ["--bogus"], ["-s", "yesterday"], ["-z", "Nowhere/Else"], ["extra", "--json"],
    ["--token-limit", "0"], ["--he"],  # errors, and an abbreviated --help: said as cli.py says them
])
def test_the_same_output_and_exit_as_through_cli(tmp_path, argv):
    root, state = _ledger_state(tmp_path)
    where = ["--root", root, "--state-dir", state]
    fast = _ccotel("report", *argv, *where)
    slow = _ccotel("report", *argv, *where, code=CLI)
    assert (fast.returncode, fast.stdout, fast.stderr) == (slow.returncode, slow.stdout, slow.stderr)


def test_a_ledger_for_other_roots_is_said_in_the_log_as_before(tmp_path):
    root, state = _ledger_state(tmp_path)
    other = tmp_path / "other"
    (other / "projects").mkdir(parents=True)
    fast = _ccotel("report", "--json", "--root", str(other), "--state-dir", state)
    assert fast.returncode == 0 and "was written for other roots" in fast.stderr
    assert " ccotel INFO " in fast.stderr  # cli.py's log format: logging set up as before
