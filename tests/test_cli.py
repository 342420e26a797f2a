"""The ccotel command as a user runs it: a real process, real files, an OTLP receiver on loopback."""

from __future__ import annotations

import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from tests.harness.fixtures import load_fixture
from tests.support.otlp import OtlpReceiver
from tests.transcript import Transcript, text, tool_use
from tests.whole.test_faults import history

SID = "cccccccc-1111-4222-8333-444444444444"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ccotel(*args: str, env: dict[str, str] | None = None, **kw) -> subprocess.Popen:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    full_env.update(env or {})
    return subprocess.Popen([sys.executable, "-m", "ccotel", *args], env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def stop(proc: subprocess.Popen, timeout: float = 20) -> tuple[str, str]:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return out, err


def test_backfill_console_prints_every_span(tmp_path):
    fx = load_fixture("s03_parallel_subagents")
    proc = ccotel("backfill", "--root", str(fx.config_dir), "--traces-exporter", "console", "--state-dir", "none")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    spans = [orjson.loads(line) for line in out.splitlines()]
    assert spans and all(len(s["trace_id"]) == 32 and len(s["span_id"]) == 16 for s in spans)
    assert sum(1 for s in spans if s["parent_span_id"] is None) == 1
    assert "spans exported" in err


def test_run_without_a_backend_says_so_once_then_delivers(tmp_path):
    fx = load_fixture("s01_bash_tool")
    root = tmp_path / "claude"
    shutil.copytree(fx.config_dir, root)
    port = free_port()
    proc = ccotel("run", "--root", str(root), "--no-status", "--state-dir", str(tmp_path / "st"),
                  "--metrics-addr", "none",
                  env={"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"})
    try:
        time.sleep(6)  # several export attempts fail meanwhile
        with OtlpReceiver(port=port) as rx:
            spans = rx.wait_for(4, timeout_s=60)
            assert len(spans) == 4
            assert {s["resource"]["service.name"] for s in spans} == {"ccotel"}
            assert all(s["resource"].get("host.name") for s in spans)
            _, err = stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert err.count("not reachable") == 1, err
    assert err.count("answers again") == 1, err
    assert "Traceback" not in err
    assert len(err.splitlines()) < 10, err


def test_run_follows_a_live_transcript(tmp_path):
    root = tmp_path / "claude"
    (root / "projects").mkdir(parents=True)
    with OtlpReceiver() as rx:
        proc = ccotel("run", "--root", str(root), "--no-status", "--state-dir", str(tmp_path / "st"),
                      "--metrics-addr", "none",
                      env={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": rx.endpoint})
        try:
            time.sleep(2)
            t = Transcript(SID, t_ms=int(time.time() * 1000))
            t.prompt("live one", parent=None)
            t.response("msg_live_1", [tool_use("toolu_live")], stop_reason="tool_use")
            path = root / "projects" / "-tmp-live" / f"{SID}.jsonl"  # a directory created after start
            path.parent.mkdir()
            with open(path, "ab") as f:
                for line in t.bytes().splitlines(keepends=True):
                    f.write(line)
                    f.flush()
                    time.sleep(0.05)
                t.lines = []
                t.tool_result("toolu_live", "ok")
                f.write(t.bytes())
                f.flush()
                tool = _wait_name(rx, "execute_tool Bash", 20)
                assert tool["attributes"]["gen_ai.tool.call.id"] == "toolu_live"
                t.lines = []
                t.response("msg_live_2", [text("done")], stop_reason="end_turn")
                f.write(t.bytes())
                f.flush()
            root_span = _wait_name(rx, "invoke_agent claude-code", 20)
            assert root_span["attributes"]["gen_ai.conversation.id"] == SID
            assert {s["trace_id"] for s in rx.spans} == {root_span["trace_id"]}
            stop(proc)
        finally:
            if proc.poll() is None:
                proc.kill()


def _wait_name(rx: OtlpReceiver, name: str, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for s in list(rx.spans):
            if s["name"] == name:
                return s
        time.sleep(0.05)
    raise AssertionError(f"no {name!r} span; got {[s['name'] for s in rx.spans]}")


def test_two_processes_export_identical_ids(tmp_path):
    fx = load_fixture("s05_nested_subagent")

    def ids() -> list[tuple]:
        proc = ccotel("backfill", "--root", str(fx.config_dir), "--traces-exporter", "console", "--state-dir", "none")
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        return sorted((s["trace_id"], s["span_id"], s["parent_span_id"]) for s in map(orjson.loads, out.splitlines()))

    first, second = ids(), ids()
    assert first == second and len(first) > 5


def test_since_skips_older_turns_and_report_json(tmp_path):
    root = tmp_path / "claude"
    old = Transcript(SID, t_ms=1_600_000_000_000)  # 2020
    old.prompt("old", parent=None)
    old.response("msg_old", [text("x")], stop_reason="end_turn")
    new_sid = SID.replace("c", "d")
    new = Transcript(new_sid, t_ms=int(time.time() * 1000) - 3_600_000)
    new.prompt("new", parent=None)
    new.response("msg_new", [text("y")], stop_reason="end_turn")
    old.write(str(root / "projects" / "-p" / f"{SID}.jsonl"))
    os.utime(root / "projects" / "-p" / f"{SID}.jsonl", (1_600_000_000, 1_600_000_000))
    new.write(str(root / "projects" / "-p" / f"{new_sid}.jsonl"))
    proc = ccotel("backfill", "--root", str(root), "--traces-exporter", "console", "--state-dir", "none",
                  "--since", "7d")
    out, _ = proc.communicate(timeout=60)
    names = {orjson.loads(line)["attributes"].get("gen_ai.response.id") for line in out.splitlines()}
    assert "msg_new" in names and "msg_old" not in names
    rep = subprocess.run([sys.executable, "-m", "ccotel", "report", "--root", str(root), "--json"],
                         capture_output=True, text=True, timeout=60)
    doc = orjson.loads(rep.stdout)
    assert {s["sessionId"] for s in doc["sessions"]} == {SID, new_sid}
    assert doc["totals"]["outputTokens"] == 100 and doc["totals"]["apiCalls"] == 2


def test_a_named_command_parses_as_with_every_command_built():
    """main builds only the named command's options (5 ms less at every start); each command
    must parse the same as when the whole parser is built."""
    from ccotel.cli import _COMMANDS, _command_of, build_parser

    argvs = [["run", "--root", "/r", "--metrics-addr", "none", "--poll"], ["backfill", "--workers", "1", "--close-all"],
             ["check", "abc", "--json"], ["report", "daily", "--json", "--state-dir", "/s"],
             ["trace", "abc", "--root", "/r"], ["sessions", "--root", "/r"],
             ["top", "--root", "/r", "--once"], ["doctor", "--root", "/r"], ["relay"],
             ["statusline", "--root", "/r", "--state", "none"],
             ["hook", "--state", "/s"]]
    assert sorted(a[0] for a in argvs) == sorted(_COMMANDS)
    for argv in argvs:
        only = build_parser(_command_of(argv))
        assert list(only._subparsers._group_actions[0].choices) == [argv[0]]  # noqa: SLF001 - what was built
        assert vars(only.parse_args(argv)) == vars(build_parser().parse_args(argv))


# -- a closed stdout (`ccotel ... | head`) ends the command quietly, status 0 ---------------------

def closed_early(*args: str, read: int, timeout: float = 30) -> tuple[int, str]:
    """Run ccotel with its stdout a pipe whose reader reads ``read`` bytes (0: none) and closes
    it, as `| head -c N` does; the exit status and stderr, or a failure if it does not end in time."""
    proc = ccotel(*args)
    assert proc.stdout is not None
    if read:
        assert proc.stdout.read(read)
    proc.stdout.close()
    proc.stdout = None  # communicate reads stderr alone
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"still running {timeout} s after its stdout was closed: {err[-2000:]}") from None
    return proc.returncode, err


def _quiet(status: int, err: str) -> None:
    assert status == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err and "Broken pipe" not in err, err
    assert "waiting for the trace backend" not in err and "sent again" not in err, err


def test_console_backfill_into_a_closed_pipe_ends_quietly(tmp_path):
    history(tmp_path / "claude", sessions=12, turns=20)  # spans that far outgrow a pipe's buffer
    _quiet(*closed_early("backfill", "--root", str(tmp_path / "claude"), "--traces-exporter", "console",
                         "--state-dir", str(tmp_path / "st"), read=100))


def test_console_run_into_a_closed_pipe_ends_quietly(tmp_path):
    history(tmp_path / "claude", sessions=12, turns=20)  # spans that far outgrow a pipe's buffer
    _quiet(*closed_early("run", "--root", str(tmp_path / "claude"), "--traces-exporter", "console",
                         "--state-dir", str(tmp_path / "st"), "--metrics-addr", "none", read=100))


def test_reading_commands_into_a_closed_pipe_end_quietly(tmp_path):
    """Their output is small: the pipe is closed before they write, so their first write finds it closed."""
    root = tmp_path / "claude"
    sid = history(root, sessions=2)[0].stem
    for args in (["report", "--state", "none"], ["report", "session", "--json", "--state", "none"],
                 ["sessions"], ["trace", sid[:8]], ["check", sid], ["check", sid, "--json"],
                 ["doctor", "--state", "none", "--traces-exporter", "none", "--metrics-addr", "none"]):
        status, err = closed_early(args[0], "--root", str(root), *args[1:], read=0)
        assert status in (0, 1) if args[0] == "doctor" else status == 0, (args, err)  # doctor: 1 if a check fails
        assert "Traceback" not in err and "BrokenPipe" not in err and "Broken pipe" not in err, (args, err)


@pytest.mark.parametrize("command", ["run", "backfill", "report"])
@pytest.mark.parametrize("option,value", [("--workers", v) for v in ("-1", "65", "two", "1.5", "")]
                         + [("--parallel-min-mb", v) for v in ("-1", "nan", "inf", "big", "")])
def test_a_bad_worker_count_or_size_is_exit_2_before_any_work(tmp_path: Path, command: str, option: str,
                                                              value: str) -> None:
    """--workers takes 0 to 64: a negative count used to be read as one process, and 10,000 would
    have started 10,000 workers' worth of shards. --parallel-min-mb takes a size from 0 up: NaN
    used to end the catch-up's start in a ValueError."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CCOTEL_"))}
    env["XDG_STATE_HOME"] = str(tmp_path / "xdg")
    done = subprocess.run([sys.executable, "-m", "ccotel", command, "--root", str(tmp_path / "none"),
                           option, value], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert option in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "xdg").exists()  # no state was made: nothing was done


@pytest.mark.parametrize("value,want", [("0", 0), ("1", 1), ("64", 64), (" 4 ", 4)])
def test_a_worker_count_from_0_to_64_is_taken(value: str, want: int) -> None:
    from ccotel.commands.options import worker_count

    assert worker_count(value) == want


@pytest.mark.parametrize("argv,option", [
    (["sessions", "--limit", "-1"], "--limit"),
    (["sessions", "--width", "39"], "--width"),
    (["trace", "abcdef12", "--width", "5"], "--width"),
    (["top", "--once", "--width", "0"], "--width"),
    (["backfill", "--max-attribute-length", "0"], "--max-attribute-length"),
    (["backfill", "--max-attribute-length", "-1"], "--max-attribute-length"),
    (["run", "--max-label-values", "-1"], "--max-label-values"),
    (["relay", "--max-label-values", "0"], "--max-label-values"),
])
def test_a_count_or_width_out_of_range_is_exit_2_before_any_work(tmp_path: Path, argv: list[str], option: str) -> None:
    """Taken before: a negative --limit listed every session, --width under 30 ended trace in an
    IndexError, --max-attribute-length -1 cut every captured text by one character, and a label cap
    under 1 folded every value into "other"."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CCOTEL_"))}
    env["XDG_STATE_HOME"] = str(tmp_path / "xdg")
    done = subprocess.run([sys.executable, "-m", "ccotel", *argv, "--root", str(tmp_path / "none")],
                          env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert f"argument {option}" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "xdg").exists()


def test_a_terminal_narrower_than_the_least_width_gets_the_least_width(monkeypatch) -> None:
    from ccotel.commands.terminal import MIN_WIDTH, stdout_console

    class Narrow(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("COLUMNS", "12")
    assert stdout_console(file=Narrow()).width == MIN_WIDTH
    monkeypatch.setenv("COLUMNS", "50")
    assert stdout_console(file=Narrow()).width == 50


@pytest.mark.parametrize("argv", [["trace", "-"], ["top", "--once"], ["sessions"], ["report"]])
def test_an_ascii_only_stdout_gets_question_marks_not_an_encoding_error(tmp_path: Path, argv: list[str]) -> None:
    """PYTHONIOENCODING=ascii (or an ASCII locale without Python's UTF-8 coercion): trace and top
    ended in UnicodeEncodeError on their own characters (· … and the bars)."""
    root = tmp_path / "claude"
    sid = history(root, sessions=1)[0].stem
    argv = [sid[:8] if a == "-" else a for a in argv]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CCOTEL_"))}
    env.update(PYTHONIOENCODING="ascii", XDG_STATE_HOME=str(tmp_path / "xdg"), COLUMNS="100")
    done = subprocess.run([sys.executable, "-m", "ccotel", *argv, "--root", str(root)], env=env,
                          capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")[-2000:]
    assert done.stdout.isascii() and done.stdout.strip()


@pytest.mark.parametrize("value", ["", ",", " , ,, "])
def test_a_claude_config_dir_of_only_commas_is_the_default_root(value: str) -> None:
    from ccotel.read.layout import default_roots

    home = os.path.expanduser("~")
    assert default_roots({"CLAUDE_CONFIG_DIR": value}) == [os.path.join(home, ".claude")]
    assert default_roots({"CLAUDE_CONFIG_DIR": " /a, ,/b "}) == ["/a", "/b"]
