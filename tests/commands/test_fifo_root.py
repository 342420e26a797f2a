"""Every command that reads transcripts ends on a config dir where a FIFO has a transcript's name
(each hung on one, waiting for a writer): the session beside it is read, the FIFO is skipped,
and the pipeline counts it as unreadable input. Each command runs as ``python -m ccotel`` with a
time limit."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.fixtures import load_fixture

REPO = Path(__file__).resolve().parents[2]
FIFO_SID = "11111111-2222-3333-4444-555555555555"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    config = tmp_path_factory.mktemp("fifo") / "c"
    shutil.copytree(load_fixture("2.1.330-s01_bash_tool").config_dir, config)
    project = next((config / "projects").iterdir())
    real = next(project.glob("*.jsonl")).stem
    os.mkfifo(project / f"{FIFO_SID}.jsonl")
    return config, real


def _ccotel(config: Path, tmp: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "COLUMNS": "200", "XDG_STATE_HOME": str(tmp)}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    return subprocess.run([sys.executable, "-m", "ccotel", *argv, "--root", str(config)], capture_output=True,
                          text=True, env=env, timeout=120, cwd=tmp)


@pytest.mark.parametrize("argv", [
    ("report", "session", "--no-ledger", "--json"),
    ("report", "daily", "--no-ledger", "--json"),
    ("sessions",),
    ("backfill", "--traces-exporter", "none", "--state", "none"),
])
def test_a_command_reads_the_session_beside_the_fifo(root, tmp_path, argv):
    config, real = root
    proc = _ccotel(config, tmp_path, *argv)
    assert proc.returncode == 0, proc.stderr
    if argv[0] == "backfill":
        assert "bad input: unreadable=1" in proc.stderr and f"{FIFO_SID}.jsonl" in proc.stderr
    elif argv[0] == "sessions":
        assert real[:8] in proc.stdout
        assert "of 2 sessions" not in proc.stdout  # the FIFO is no session that --limit 0 would list
    else:
        assert '"totalCost"' in proc.stdout and '"totalTokens": 0' not in proc.stdout.split('"totals"')[-1]


def test_trace_of_the_fifo_session_says_it_has_no_turn(root, tmp_path):
    config, real = root
    assert _ccotel(config, tmp_path, "trace", real[:8]).returncode == 0
    proc = _ccotel(config, tmp_path, "trace", FIFO_SID[:8])
    assert proc.returncode == 2 and "no turn" in proc.stderr
