"""Bad option values are a usage error (exit 2, one line saying why) before any work.

An adversarial pass over every option of every command found these ending in a traceback:
``--stall-timeout nan`` / ``inf`` / ``1e999`` (run, backfill, sessions, trace, top: its seconds made
nanoseconds), ``--registry-kill-grace inf``, ``top --active inf`` / ``--window inf``, ``doctor
--timeout -1`` / ``nan`` / ``inf``, any ``--orchestrator-patterns`` file that was missing, a
directory, empty or not a list of patterns, and ``--redact '('`` once content was captured.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from ccotel.cli import EXIT_USAGE, build_parser
from ccotel.commands import options
from ccotel.sources.orchestrator import PatternFileError, load_patterns

REPO = Path(__file__).resolve().parents[2]
COMMANDS = ("run", "backfill", "report", "check", "trace", "sessions", "top", "doctor", "relay", "statusline", "hook")
NOT_NUMBERS = ("nan", "inf", "-inf", "1e999", "NaN", "infinity")


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        build_parser(argv[0]).parse_args(argv)
    assert exit_.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize(("argv", "says"), [
    (["run", "--stall-timeout", "nan"], "not more than 0"),
    (["backfill", "--stall-timeout", "inf"], "not more than 0"),
    (["backfill", "--stall-timeout", "1e999"], "not more than 0"),
    (["backfill", "--stall-timeout", "-1"], "not more than 0"),
    (["backfill", "--stall-timeout", "0"], "not more than 0"),
    (["sessions", "--stall-timeout", "nan"], "not more than 0"),
    (["trace", "--stall-timeout", "inf"], "not more than 0"),
    (["check", "x", "--stall-timeout", "nan"], "not more than 0"),
    (["top", "--stall-timeout", "inf"], "not more than 0"),
    (["top", "--active", "inf"], "minutes is not more than 0"),
    (["top", "--window", "1e999"], "minutes is not more than 0"),
    (["top", "--interval", "0"], "is not from 0.1 to 3600"),
    (["run", "--registry-kill-grace", "inf"], "is not from 0 to 3600"),
    (["run", "--registry-kill-grace", "-1"], "is not from 0 to 3600"),
    (["relay", "--flush-timeout", "nan"], "is not from 0 to 86400"),
    (["doctor", "--timeout", "-1"], "is not more than 0"),
    (["doctor", "--timeout", "nan"], "is not more than 0"),
    (["doctor", "--timeout", "inf"], "is not more than 0"),
    (["backfill", "--redact", "("], "not a regular expression"),
    (["run", "--redact", "[a-"], "not a regular expression"),
    (["run", "--orchestrator-patterns", "/nonexistent/patterns.json"], "cannot read it"),
    (["backfill", "--stall-timeout", "soon"], "not a number of seconds: 'soon'"),
])
def test_a_bad_value_is_a_usage_error(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert says in _refused(argv, capsys)


def _value_options(command: str) -> list[argparse.Action]:
    parser = build_parser(command)
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return [a for a in sub.choices[command]._actions if a.option_strings and a.nargs != 0 and not a.choices]


@pytest.mark.parametrize("command", COMMANDS)
def test_no_option_takes_a_number_that_is_not_finite(command: str) -> None:
    """Every option of every command: NaN or an infinity is refused, or taken as a string (a path,
    a name): never as a float that a later int() or a sleep ends in a traceback."""
    for action in _value_options(command):
        for value in NOT_NUMBERS:
            argv = [command, *(["x"] if command in ("check",) else []), action.option_strings[-1], value]
            try:
                ns = build_parser(command).parse_args(argv)
            except SystemExit as exit_:
                assert exit_.code == EXIT_USAGE
                continue
            got = getattr(ns, action.dest)
            for v in got if isinstance(got, list) else [got]:
                assert not (isinstance(v, float) and not math.isfinite(v)), (command, action.option_strings, value)


@pytest.mark.parametrize(("content", "says"), [
    ("", "not JSON"),
    ("{}", "not a JSON list"),
    ("[1]", 'item 0: not {"metric": "...", "regex": "..."}'),
    ('[{"metric": "ccotel_aborts"}]', "item 0: not"),
    ('[{"metric": "ccotel_nope", "regex": "x"}]', "item 0: unknown metric 'ccotel_nope'"),
    ('[{"metric": "ccotel_aborts", "regex": "("}]', "item 0: not a regular expression"),
    ('[{"metric": "ccotel_aborts", "regex": "x", "reason": 5}]', "item 0: its reason is not a string"),
])
def test_a_bad_pattern_file_says_what_is_wrong(tmp_path: Path, content: str, says: str) -> None:
    path = tmp_path / "patterns.json"
    path.write_text(content)
    with pytest.raises(PatternFileError) as exc:
        load_patterns(str(path))
    assert str(exc.value).startswith(f"{path}: ") and says in str(exc.value)
    with pytest.raises(argparse.ArgumentTypeError):
        options.pattern_file(str(path))


def test_a_pattern_file_that_is_not_a_file(tmp_path: Path) -> None:
    for path in (tmp_path, "/dev/null", tmp_path / "missing.json"):
        with pytest.raises(PatternFileError, match="cannot read it"):
            load_patterns(str(path))
    big = tmp_path / "big.json"
    big.write_bytes(b"[" + b" " * (1 << 20) + b"]")
    with pytest.raises(PatternFileError, match="larger than 1 MiB"):
        load_patterns(str(big))


def test_a_good_pattern_file_is_read_while_parsing(tmp_path: Path) -> None:
    path = tmp_path / "patterns.json"
    path.write_text(json.dumps([{"metric": "ccotel_watchdog_kills", "regex": r"killed pid \d+"}]))
    ns = build_parser("run").parse_args(["run", "--orchestrator-patterns", str(path)])
    assert [p.metric for p in ns.orchestrator_patterns] == ["ccotel_watchdog_kills"]


def test_statusline_stall_is_the_rule_s() -> None:
    """The status line keeps its own copy of --stall-timeout's default (it imports nothing of the
    pipeline, for its start time): it must stay the rule's."""
    from ccotel.assemble.closing import STALL_TIMEOUT_NS, Timeouts
    from ccotel.commands.statusline import line

    assert line._STALL_NS == STALL_TIMEOUT_NS == Timeouts().stall_ns
    assert build_parser("run").parse_args(["run"]).stall_timeout * 1e9 == STALL_TIMEOUT_NS


@pytest.mark.parametrize("argv", [
    ["backfill", "--traces-exporter", "none", "--state", "none", "--capture-content", "--redact", "("],
    ["backfill", "--traces-exporter", "none", "--state", "none", "--stall-timeout", "nan"],
    ["run", "--traces-exporter", "none", "--state", "none", "--metrics-addr", "none", "--orchestrator-patterns",
     "/dev/null"],
])
def test_the_command_exits_2_with_one_line_and_no_work(tmp_path: Path, argv: list[str]) -> None:
    root = tmp_path / "root"
    (root / "projects").mkdir(parents=True)
    proc = subprocess.run([sys.executable, "-m", "ccotel", *argv, "--root", str(root)], cwd=REPO, text=True,
                          capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == EXIT_USAGE, proc.stderr
    assert "Traceback" not in proc.stderr and "reading" not in proc.stderr and "caught up" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(f"ccotel {argv[0]}: error: argument ")
