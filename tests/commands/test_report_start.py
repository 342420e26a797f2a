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


ALLOWED = {  # what ``ccotel report --json`` from the ledger may load past Python's start
    "ccotel", "ccotel.__main__", "ccotel.commands", "ccotel.commands.options", "ccotel.commands.report",
    "ccotel.commands.report.command", "ccotel.commands.report.from_ledger", "ccotel.commands.report.json_doc",
    "ccotel.commands.report.rows", "ccotel.commands.report.summary", "ccotel.read", "ccotel.read.layout",
    "ccotel.rules", "ccotel.rules.model_name", "ccotel.store", "ccotel.store.ledger", "ccotel.store.ledger_schema",
    "__future__", "argparse", "gettext", "locale", "_locale", "warnings",  # argparse's
    "re", "re._casefix", "re._compiler", "re._constants", "re._parser", "_sre", "enum", "copyreg",
    "typing", "typing.io", "typing.re", "_typing", "collections", "collections.abc", "_collections", "contextlib",
    "functools", "_functools", "itertools", "keyword", "operator", "_operator", "reprlib", "types", "errno",
    "datetime", "_datetime", "math", "json", "json.decoder", "json.encoder", "json.scanner", "_json",
    "sqlite3", "sqlite3.dbapi2", "_sqlite3",
    "ccotel.commands.report.freshness", "ccotel.commands.report.kept", "ccotel.commands.report.views",
    "ccotel.store.ledger_peek", "ccotel.store.location", "ccotel.store.private_file", "zlib",  # the kept answer's
}
_DRIVER = """import sys
before = set(sys.modules)
sys.argv = ["ccotel", *sys.argv[1:]]
from ccotel.__main__ import main
main()
sys.stderr.write("\\n".join(sorted(set(sys.modules) - before)))
"""


def test_what_it_loads_is_an_allow_list(tmp_path):
    """Not orjson (it imports dataclasses, inspect, uuid), dataclasses, shutil (argparse's help
    width) nor anything else that slowed this start before: json_doc.dumps writes the JSON."""
    root, state = _ledger_state(tmp_path)
    proc = _ccotel("report", "--json", "--root", root, "--state-dir", state, code=_DRIVER)
    assert proc.returncode == 0 and '"source": "ledger"' in proc.stdout, proc.stderr
    loaded = set(proc.stderr.split())
    assert "ccotel.commands.report.from_ledger" in loaded and loaded <= ALLOWED, sorted(loaded - ALLOWED)


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


def test_its_json_is_orjsons_byte_for_byte():
    """json_doc.dumps (the JSON without orjson's import) against orjson's indented JSON: floats on
    both sides of each notation change (1e-5, 1e-4, 1e16), escapes, empty and nested containers."""
    import random

    import orjson

    from ccotel.commands.report.json_doc import dumps

    rng = random.Random(31)
    floats = [0.0, -0.0, 1e-5, 9.999e-6, 1e-4, 9.9e-5, -5e-05, -1.2e-7, 1e16, 9999999999999998.0, 1e300, 5e-324,
              float("inf"), float("nan")]
    floats += [rng.uniform(-1, 1) * 10.0 ** rng.randint(-320, 300) for _ in range(20_000)]
    floats += [round(rng.random() * 10.0 ** rng.randint(-8, 4), 6) for _ in range(20_000)]
    doc = {"floats": floats, "empty": [[], {}, ""], "ints": [0, -1, 2**63 - 1], "flags": [True, False, None],
           "text": ["é\u2028\x00\x1f\x7f\"/\\\n\t\b\f\r", "plain"], "nested": {"a": {"b": [{"c": 1.5}]}}}
    assert dumps(doc).encode() == orjson.dumps(doc, option=orjson.OPT_INDENT_2)
