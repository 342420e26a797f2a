"""``ccotel top``: the row model on real-CLI fixtures replayed as if they were being written now,
its one-frame output at 80 and 120 columns, and the live view under a pseudo-terminal.

A fixture is staged under a temp root with its timestamps moved to just now, each transcript cut
after a given line (the rest appended later, as Claude Code would write it), and a sessions file
naming this test's own process (alive) or a finished one (killed).
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import shutil
import struct
import subprocess
import sys
import termios
import time
from datetime import datetime, timezone
from pathlib import Path

import orjson
import pytest
from rich.console import Console

from ccotel.commands.report.transcripts import build_report
from ccotel.commands.sessions import _compact, select_sessions
from ccotel.commands.terminal import dollars
from ccotel.commands.top import view as top
from ccotel.commands.top.rows import Sort, TopRow, Watcher, sort_rows
from ccotel.run.pipeline import Options
from tests.harness.fixtures import load_fixture

REPO = Path(__file__).resolve().parents[2]
MINUTE = 60 * 10 ** 9


def _ns(ts: str) -> int:
    return int(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1e9)


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Staged:
    """A fixture's transcripts as if being written now: ``write(file, n)`` puts its first n lines."""

    def __init__(self, name: str, dest: Path, snapshot: str | None = None, ago_s: float = 2.0) -> None:
        fx = load_fixture(name)
        self.root = dest / "claude"
        shutil.copytree(fx.snapshots[snapshot] if snapshot else fx.config_dir, self.root)
        self.sid = fx.session_ids[0]
        self.files = {p: p.read_bytes().splitlines() for p in self.root.glob("projects/**/*.jsonl")}
        stamps = [d["timestamp"] for lines in self.files.values() for raw in lines
                  if isinstance(d := orjson.loads(raw), dict) and isinstance(d.get("timestamp"), str)]
        self.delta = time.time_ns() - int(ago_s * 1e9) - max(_ns(t) for t in stamps)
        for f in (self.root / "sessions").glob("*.json"):
            f.unlink()
        for path in self.files:
            self.write(path, len(self.files[path]))

    @property
    def main(self) -> Path:
        return next(p for p in self.files if p.name == f"{self.sid}.jsonl")

    def write(self, path: Path, n: int) -> None:
        out, last = [], 0
        for raw in self.files[path][:n]:
            doc = orjson.loads(raw)
            if isinstance(doc.get("timestamp"), str):
                ns = _ns(doc["timestamp"]) + self.delta
                doc["timestamp"], last = _iso(ns), max(last, ns)
            out.append(orjson.dumps(doc))
        path.write_bytes(b"".join(line + b"\n" for line in out))
        if last:  # written when its last line says, as Claude Code would have
            os.utime(path, ns=(last, last))

    def process(self, pid: int) -> None:
        """A sessions file naming ``pid`` as the session's Claude Code process."""
        try:
            with open(f"/proc/{pid}/stat") as f:
                start = f.read().rsplit(")", 1)[1].split()[19]
        except OSError:
            start = "1"
        (self.root / "sessions").mkdir(exist_ok=True)
        (self.root / "sessions" / f"{pid}.json").write_text(
            orjson.dumps({"pid": pid, "sessionId": self.sid, "procStart": start}).decode())

    def rows(self, now_ns: int | None = None, stall_s: float = 180.0) -> list[TopRow]:
        from ccotel.assemble.closing import Timeouts

        options = Options(roots=(str(self.root),), timeouts=Timeouts(stall_ns=int(stall_s * 1e9)))
        return Watcher(options, active_ns=10 * MINUTE, window_ns=5 * MINUTE).rows(now_ns)


def _first_tool_use(lines: list[bytes]) -> int:
    """The index of the first assistant line with a tool_use."""
    docs = [orjson.loads(raw) for raw in lines]
    return next(i for i, d in enumerate(docs) if d.get("type") == "assistant"
                and any(c.get("type") == "tool_use" for c in d["message"]["content"]))


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


# -- the row model ---------------------------------------------------------------------------------


def test_a_running_tool_its_time_and_the_figures_of_sessions(tmp_path: Path) -> None:
    st = Staged("s06_kill_orphan_resume", tmp_path, snapshot="after_kill", ago_s=5)
    st.process(os.getpid())
    now = time.time_ns()
    [row] = st.rows(now)
    assert (row.session_id, row.state, row.process, row.turn_open) == (st.sid, "live", "running", True)
    assert row.tool == "Bash" and row.tools_running == 1 and row.agents_running == 0
    assert row.tool_started_ns is not None and 4.0 <= (now - row.tool_started_ns) / 1e9 <= 30
    # its figures are `ccotel sessions`' and the fast report's
    [summary] = select_sessions(Options(roots=(str(st.root),)), now_ns=now).sessions
    assert (row.turns, row.cost_usd) == (summary.turns, summary.cost_usd)
    report = build_report(Options(roots=(str(st.root),)), workers=1)[st.sid]
    assert row.tokens == report.input_tokens + report.output_tokens + report.cache_read_tokens + \
        report.cache_creation_tokens
    # every call ended within the window; the session is younger than a minute: a minute's rate
    assert row.tokens_per_min == pytest.approx(row.tokens) and row.usd_per_min == pytest.approx(row.cost_usd)
    assert not row.red


def test_synthetic_appends_move_the_row(tmp_path: Path) -> None:
    """s01 written line by line: the turn opens, a tool runs, its result comes, the tokens grow."""
    st = Staged("s01_bash_tool", tmp_path)
    st.process(os.getpid())
    lines = st.files[st.main]
    tool_use = _first_tool_use(lines)
    st.write(st.main, tool_use + 1)
    watcher = Watcher(Options(roots=(str(st.root),)), active_ns=10 * MINUTE, window_ns=5 * MINUTE)
    [during] = watcher.rows()
    assert during.tool == "Bash" and during.turn_open and during.state == "live"
    st.write(st.main, len(lines))
    [after] = watcher.rows(time.time_ns() + 2 * 10 ** 9)  # past the time a read took, 5 times over
    assert after.tool is None and after.tools_running == 0
    assert after.tokens > during.tokens and after.cost_usd > during.cost_usd


def test_a_frame_reads_each_process_file_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A frame's running sessions and their process states come from one read of sessions/<pid>.json
    (it was read twice a frame, every few seconds)."""
    from ccotel.read import procs

    st = Staged("s01_bash_tool", tmp_path, ago_s=20 * 60)  # older than --active: running by its process only
    st.process(os.getpid())
    opened: list[str] = []
    real = procs.open_regular
    monkeypatch.setattr(procs, "open_regular", lambda path, *a, **k: opened.append(str(path)) or real(path, *a, **k))
    watcher = Watcher(Options(roots=(str(st.root),)), active_ns=10 * MINUTE, window_ns=5 * MINUTE)
    [row] = watcher.rows()  # the session's first read checks its health too (check_session reads the file)
    assert row.process == "running" and opened
    opened.clear()
    [row] = watcher.rows()  # the next frame: the session unchanged, its read kept
    assert row.process == "running"
    assert opened == [str(st.root / "sessions" / f"{os.getpid()}.json")]


def _s03_before_the_agents_results(tmp_path: Path) -> Staged:
    """s03 staged with a live process, its main transcript cut at the first tool result."""
    st = Staged("s03_parallel_subagents", tmp_path)
    st.process(os.getpid())
    lines = [orjson.loads(raw) for raw in st.files[st.main]]
    first_result = next(i for i, d in enumerate(lines) if d.get("type") == "user" and isinstance(
        d["message"]["content"], list) and any(c.get("type") == "tool_result" for c in d["message"]["content"]))
    st.write(st.main, first_result)
    return st


def test_subagents_running(tmp_path: Path) -> None:
    """s03 cut before the two Agent calls' results: two subagents at work, two tools running."""
    st = _s03_before_the_agents_results(tmp_path)
    for path, agent_lines in st.files.items():
        if path != st.main:
            st.write(path, len(agent_lines) - 1)
    [row] = st.rows()
    assert (row.tools_running, row.agents_running, row.tool) == (2, 2, "Agent"), row
    st.write(st.main, len(st.files[st.main]))
    [done] = st.rows()
    assert (done.tools_running, done.agents_running) == (0, 0)


def test_a_tool_under_an_agent_call_is_counted_once(tmp_path: Path) -> None:
    """s03 cut while both subagents run their Bash: two tools at work (the column's `+N` counts tool
    calls, each once), not the two Agent calls waiting on them as well; two subagents. Then one
    subagent has its Bash result and thinks: its Agent call is the tool at work on that side."""
    st = _s03_before_the_agents_results(tmp_path)
    agents = sorted(p for p in st.files if p != st.main)
    for path in agents:
        st.write(path, _first_tool_use(st.files[path]) + 1)
    [row] = st.rows()
    assert (row.tool, row.tools_running, row.agents_running) == ("Bash", 2, 2), row
    assert top._tool_cell(row, time.time_ns()).endswith(" +1")
    st.write(agents[0], _first_tool_use(st.files[agents[0]]) + 2)  # its Bash result: that subagent thinks
    [row] = st.rows(time.time_ns() + 2 * 10 ** 9)
    assert (row.tool, row.tools_running, row.agents_running) == ("Bash", 2, 2), row


def _red(row: TopRow) -> str:
    console = Console(width=120, force_terminal=True, color_system="standard", record=True)
    console.print(top.frame([row], time.time_ns(), 120, Sort.COST_RATE, ["/r"]))
    return console.export_text(styles=True)


def test_a_stall_of_a_live_process_is_red(tmp_path: Path) -> None:
    st = Staged("s06_kill_orphan_resume", tmp_path, snapshot="after_kill", ago_s=5)
    st.process(os.getpid())
    [row] = st.rows(stall_s=2)
    assert row.state == "stalled" and row.red and row.tool == "Bash"
    assert re.search(r"\x1b\[1;31mstalled", _red(row)), _red(row)


def test_a_stall_is_seen_when_due_not_at_the_next_health_check(tmp_path: Path) -> None:
    """The health is asked every few seconds; a silent turn's time runs on in between."""
    from ccotel.assemble.closing import Timeouts

    st = Staged("s06_kill_orphan_resume", tmp_path, snapshot="after_kill", ago_s=5)
    st.process(os.getpid())
    watcher = Watcher(Options(roots=(str(st.root),), timeouts=Timeouts(stall_ns=7 * 10 ** 9)),
                      active_ns=10 * MINUTE, window_ns=5 * MINUTE)
    now = time.time_ns()
    assert [r.state for r in watcher.rows(now)] == ["live"]
    assert [r.state for r in watcher.rows(now + 3 * 10 ** 9)] == ["stalled"]


def test_a_model_that_never_answers_while_its_process_runs_is_stalled(tmp_path: Path) -> None:
    """s01 cut after its prompt, 200 s ago, its process alive: the turn owes a reply. Under way (not
    closed as incomplete after a minute's quiet) and, past the stall timeout, stalled."""
    st = Staged("s01_bash_tool", tmp_path, ago_s=200)
    st.process(os.getpid())
    lines = [orjson.loads(raw) for raw in st.files[st.main]]
    st.write(st.main, next(i for i, d in enumerate(lines) if d.get("type") == "user") + 1)
    [row] = st.rows(stall_s=180)
    assert (row.state, row.turn_open, row.turns) == ("stalled", True, 1), row
    [row] = st.rows(stall_s=600)
    assert (row.state, row.turn_open) == ("live", True), row


def test_a_subagent_at_work_is_not_a_stall_of_its_silent_main_thread(tmp_path: Path) -> None:
    st = Staged("s03_parallel_subagents", tmp_path, ago_s=2)
    st.process(os.getpid())
    st.write(st.main, 8)  # the main thread waits on its two Agent calls: its file is silent
    old = time.time() - 60
    os.utime(st.main, (old, old))
    for path, agent_lines in st.files.items():
        if path != st.main:
            st.write(path, len(agent_lines) - 1)
            os.utime(path)  # the subagents write now
    [row] = st.rows(stall_s=2.5)
    assert (row.state, row.agents_running) == ("live", 2), row
    for path in st.files:
        os.utime(path, (old, old))  # all silent: stalled
    [row] = st.rows(stall_s=2.5)
    assert row.state == "stalled", row


def test_a_killed_process_is_red(tmp_path: Path) -> None:
    st = Staged("s06_kill_orphan_resume", tmp_path, snapshot="after_kill", ago_s=5)
    st.process(_dead_pid())
    [row] = st.rows()
    assert (row.state, row.process, row.tool, row.turn_open) == ("killed", "gone", None, False)
    assert re.search(r"\x1b\[1;31mkilled", _red(row))


def test_a_process_that_dies_is_seen_at_once_and_a_finished_session_is_not_read_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ccotel.commands.top import rows as top_rows

    st = Staged("s06_kill_orphan_resume", tmp_path, snapshot="after_kill", ago_s=5)
    claude = subprocess.Popen(["sleep", "60"])  # stands for the session's Claude Code process
    try:
        st.process(claude.pid)
        watcher = Watcher(Options(roots=(str(st.root),)), active_ns=10 * MINUTE, window_ns=5 * MINUTE)
        now = time.time_ns()
        assert [(r.state, r.tool) for r in watcher.rows(now)] == [("live", "Bash")]
        claude.kill()
        claude.wait()
        assert [(r.state, r.tool) for r in watcher.rows(now + 10 ** 8)] == [("killed", None)]  # no file changed
    finally:
        if claude.poll() is None:
            claude.kill()
    checks = []
    real = top_rows.check_session
    monkeypatch.setattr(top_rows, "check_session", lambda *a, **kw: checks.append(a) or real(*a, **kw))
    for later in (1, 10, 60):  # its turn closed (killed): nothing left that time could change
        assert [r.state for r in watcher.rows(now + later * 10 ** 9)] == ["killed"]
    assert checks == []


def test_a_session_slow_to_read_is_read_again_at_most_a_fifth_of_the_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ccotel.commands.top import rows as top_rows

    st = Staged("s01_bash_tool", tmp_path)
    st.process(os.getpid())
    lines = st.files[st.main]
    st.write(st.main, _first_tool_use(lines) + 1)
    reads = []
    real = top_rows.collect_spans

    def slow(*a: object, **kw: object) -> object:  # a transcript that takes 0.2 s to read
        reads.append(1)
        time.sleep(0.2)
        return real(*a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(top_rows, "collect_spans", slow)
    watcher = Watcher(Options(roots=(str(st.root),)), active_ns=10 * MINUTE, window_ns=5 * MINUTE)
    now = time.time_ns()
    [before] = watcher.rows(now)
    st.write(st.main, len(lines))  # written again at once
    assert watcher.rows(now + 5 * 10 ** 8) == [before] and len(reads) == 1  # 0.5 s later: not yet
    [after] = watcher.rows(now + 2 * 10 ** 9)  # past 5 x 0.2 s
    assert len(reads) == 2 and after.cost_usd > before.cost_usd


def test_an_orphan_is_red(tmp_path: Path) -> None:
    """No process file to ask, a tool call without a result past the stall timeout: orphaned."""
    st = Staged("s06_kill_orphan_resume", tmp_path, snapshot="after_kill", ago_s=5)
    [row] = st.rows(stall_s=2)
    assert (row.state, row.process) == ("orphaned", "unknown") and row.red
    assert re.search(r"\x1b\[1;31morphaned", _red(row))


def test_sessions_silent_past_active_are_not_shown(tmp_path: Path) -> None:
    st = Staged("s01_bash_tool", tmp_path)
    old = time.time() - 3600
    for path in st.files:
        os.utime(path, (old, old))
    assert st.rows() == []
    st.process(os.getpid())  # a live process: running, however long ago it wrote
    assert [r.session_id for r in st.rows()] == [st.sid]


def test_the_short_id_is_unique_among_every_session_not_only_those_shown(tmp_path: Path) -> None:
    """An old session sharing the first 8 characters: `ccotel trace <short id>` must still name one."""
    st = Staged("s01_bash_tool", tmp_path)
    twin = st.main.with_name(st.sid[:8] + "-0000-4000-8000-000000000000.jsonl")
    shutil.copy(st.main, twin)
    os.utime(twin, (time.time() - 3600,) * 2)  # not running: not shown
    [row] = st.rows()
    assert row.session_id == st.sid and len(row.short_id) > 8 and not twin.stem.startswith(row.short_id)


def test_sort_orders() -> None:
    base = dict(model=None, turns=1, turn_open=False, tool=None, tool_started_ns=None, tools_running=0,
                agents_running=0, state="idle", process="unknown", tokens_per_min=0.0, cost_usd=0.0)
    a = TopRow(session_id="a", short_id="a", project="/z", tokens=5, usd_per_min=0.1, last_ns=1, **base)  # type: ignore[arg-type]
    b = TopRow(session_id="b", short_id="b", project="/a", tokens=9, usd_per_min=0.0, last_ns=3, **base)  # type: ignore[arg-type]
    c = TopRow(session_id="c", short_id="c", project="/m", tokens=1, usd_per_min=0.5, last_ns=2, **base)  # type: ignore[arg-type]
    order = {s: [r.session_id for r in sort_rows([a, b, c], s)] for s in Sort}
    assert order == {Sort.COST_RATE: ["c", "a", "b"], Sort.TOKENS: ["b", "a", "c"], Sort.LAST: ["b", "c", "a"],
                     Sort.PROJECT: ["b", "c", "a"]}
    assert [s := Sort.COST_RATE, s := s.next(), s := s.next(), s := s.next(), s.next()] == \
        [Sort.COST_RATE, Sort.TOKENS, Sort.LAST, Sort.PROJECT, Sort.COST_RATE]


def test_the_selection_follows_its_session_when_the_order_changes() -> None:
    base = dict(model=None, turns=1, turn_open=False, tool=None, tool_started_ns=None, tools_running=0,
                agents_running=0, state="idle", process="unknown", tokens_per_min=0.0, cost_usd=0.0, last_ns=1)
    a = TopRow(session_id="a", short_id="a", project="/a", tokens=1, usd_per_min=0.2, **base)  # type: ignore[arg-type]
    b = TopRow(session_id="b", short_id="b", project="/b", tokens=9, usd_per_min=0.1, **base)  # type: ignore[arg-type]
    view = top._View(Sort.COST_RATE)
    view.set_rows([a, b])
    assert view.key(b"\x1b[B") and view.index == 1  # down: b, the second by $/min
    assert view.key(b"s") and [r.session_id for r in view.rows] == ["b", "a"] and view.index == 0  # still b
    assert view.key(b"t") and view.trace_of == "b"
    assert view.key(b"q") and view.trace_of is None and not view.quit
    view.set_rows([a])  # b is gone: the first row
    assert view.index == 0 and view.key(b"j") and view.index == 0
    assert view.key(b"q") and view.quit


# -- one frame ---------------------------------------------------------------------------------------


def _env(columns: int | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR")}
    env.update(PYTHONPATH=str(REPO), TERM="xterm", CCOTEL_STATE="none", **extra)
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return env


def _ccotel(*argv: str, columns: int | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ccotel", *argv], capture_output=True, text=True,
                          env=_env(columns), timeout=60)


@pytest.mark.parametrize("columns", [80, 120])
def test_one_frame_fits_and_says_what_sessions_and_trace_say(columns: int, tmp_path: Path) -> None:
    st = Staged("s03_parallel_subagents", tmp_path)
    st.process(os.getpid())
    st.write(st.main, 8)  # the two Agent calls sent, no result yet, the subagents at work
    for path, agent_lines in st.files.items():
        if path != st.main:
            st.write(path, len(agent_lines) - 1)
    r = ["--root", str(st.root)]
    out = _ccotel("top", *r, columns=columns)  # into a pipe: one frame, then exit
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("ccotel top · 1 running") and all(len(line) <= columns for line in lines), out.stdout
    header, row = lines[1], lines[2]
    ses = orjson.loads(_ccotel("sessions", *r, "--json").stdout)["sessions"][0]
    trace = orjson.loads(_ccotel("trace", st.sid[:8], *r, "--json").stdout)
    tokens = ses["inputTokens"] + ses["outputTokens"] + ses["cacheReadTokens"] + ses["cacheCreationTokens"]
    assert trace["outcome"] == "open" and trace["turns"] == ses["turns"] == 1
    running = [s for s in _spans(trace["spans"]) if s["open"] and s["name"] == "execute_tool Agent"]
    assert len(running) == 2  # trace shows both Agent calls running
    assert row.startswith(f"{ses['shortId']} ") and f" {ses['turns']}▸ " in row
    assert re.search(r" Agent \d+(\.\d+)?(ms|s) \+1 ", row), row
    # every call ended within the window, the session is younger than a minute: $/min is the cost
    assert row.count(f"${dollars(ses['totalCost'])}") == 2, row  # $/min and cost
    assert re.search(r" 2 +\S+ ago live", row), row
    if columns == 120:
        assert f" {_compact(tokens)} " in row, row
        assert "not shown" not in out.stdout
    else:
        assert lines[3] == "not shown at this width: model, tokens, tok/min", out.stdout
    assert header.split() == [c for c in top._COLUMNS if c in header.split()]
    doc = orjson.loads(_ccotel("top", *r, "--json").stdout)["sessions"][0]
    assert (doc["totalTokens"], doc["totalCost"], doc["turns"], doc["agentsRunning"], doc["toolsRunning"]) == \
        (tokens, ses["totalCost"], ses["turns"], 2, 2)


def _spans(nodes: list[dict[str, object]]) -> list[dict[str, object]]:
    out = []
    for n in nodes:
        out.append(n)
        out += _spans(n["children"])  # type: ignore[arg-type]
    return out


def test_bad_options_exit_2_before_any_work(tmp_path: Path) -> None:
    for bad, says in ((["--interval", "0"], "is not from 0.1 to 3600"), (["--active", "-1"], "is not more than 0"),
                      (["--window", "x"], "not a number of minutes"), (["--active", "inf"], "is not more than 0")):
        out = _ccotel("top", "--root", str(tmp_path), *bad)
        assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr, out.stderr


# -- the live view ---------------------------------------------------------------------------------


def _controlling_terminal() -> None:
    """In the child: its own session, the pty (its stdin) as its controlling terminal, so that
    Ctrl-C there is a SIGINT to it as in a real terminal."""
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """``ccotel top`` on a pseudo-terminal: its keys in, its screen out."""

    def __init__(self, argv: list[str], columns: int, **env: str) -> None:
        self.leader, self.follower = pty.openpty()
        fcntl.ioctl(self.follower, termios.TIOCSWINSZ, struct.pack("HHHH", 30, columns, 0, 0))
        self.modes = termios.tcgetattr(self.follower)
        self.proc = subprocess.Popen([sys.executable, "-m", "ccotel", "top", *argv], stdin=self.follower,
                                     stdout=self.follower, stderr=subprocess.PIPE, env=_env(None, **env),
                                     preexec_fn=_controlling_terminal)
        self.out = bytearray()

    def read_until(self, pattern: str, seconds: float = 30) -> str:
        """The output so far once ``pattern`` (a regex on the text without escapes) is in what came
        since the last call; a failure naming what came if it does not within ``seconds``."""
        start = len(self.out)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", self.out[start:].decode("utf-8", "replace"))
            if re.search(pattern, text):
                return text
            if select.select([self.leader], [], [], 0.1)[0]:
                try:
                    self.out.extend(os.read(self.leader, 65536))
                except OSError:
                    break
        raise AssertionError(f"{pattern!r} not seen in {seconds}s: {self.out[start:][-3000:]!r}")

    def press(self, key: bytes) -> None:
        os.write(self.leader, key)

    def close(self) -> int:
        try:
            return self.proc.wait(timeout=15)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            while select.select([self.leader], [], [], 0.1)[0]:
                try:
                    chunk = os.read(self.leader, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                self.out.extend(chunk)


def test_live_view_refreshes_sorts_shows_a_trace_and_quits_restoring_the_terminal(tmp_path: Path) -> None:
    st = Staged("s01_bash_tool", tmp_path)
    st.process(os.getpid())
    lines = st.files[st.main]
    tool_use = _first_tool_use(lines)
    st.write(st.main, tool_use + 1)
    [during] = st.rows()
    term = Terminal(["--root", str(st.root), "--interval", "0.3"], 80)
    try:
        term.read_until(rf" 1▸ .* \${re.escape(dollars(during.cost_usd))} Bash \d")  # the tool running, its time
        st.write(st.main, len(lines))  # its result and the answer come
        [after] = st.rows()
        assert after.cost_usd > during.cost_usd and after.tool is None
        term.read_until(rf" 1 .* \${re.escape(dollars(after.cost_usd))} +\d+s ago live")  # the row moved on
        term.press(b"s")
        term.read_until(r"sort tokens")
        term.press(b"t")
        seen = term.read_until(r"q back")
        assert "invoke_agent" in seen or "claude-code" in seen, seen  # the turn's waterfall
        term.press(b"q")
        term.read_until(r"sort tokens")
        term.press(b"q")
        status = term.close()
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
    assert status == 0, term.proc.stderr.read().decode() if term.proc.stderr else ""
    raw = bytes(term.out)
    assert raw.count(b"\x1b[?1049h") == 1 and raw.rstrip().endswith(b"\x1b[?1049l"), raw[-200:]  # screen back
    assert b"\x1b[?25h" in raw[raw.rfind(b"\x1b[?1049l") - 20:]  # cursor shown again
    assert termios.tcgetattr(term.follower) == term.modes  # echo and line mode as they were
    os.close(term.leader)
    os.close(term.follower)


def test_ctrl_c_and_sigterm_restore_the_terminal_and_no_color_has_no_colour(tmp_path: Path) -> None:
    st = Staged("s06_kill_orphan_resume", tmp_path, snapshot="after_kill", ago_s=5)
    st.process(_dead_pid())  # killed: red where colour is allowed
    term = Terminal(["--root", str(st.root), "--interval", "0.3"], 120, NO_COLOR="1")
    try:
        text = term.read_until(r"killed")
        term.press(b"\x03")  # Ctrl-C: the terminal's interrupt
        status = term.close()
        again = Terminal(["--root", str(st.root), "--interval", "0.3"], 120)
        again.read_until(r"killed")
        again.proc.terminate()  # SIGTERM: the same
        assert again.close() == 0 and bytes(again.out).rstrip().endswith(b"\x1b[?1049l")
        assert termios.tcgetattr(again.follower) == again.modes
        for fd in (again.leader, again.follower):
            os.close(fd)
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
    assert status == 0 and "Traceback" not in text
    assert not re.search(rb"\x1b\[[0-9;]*3[0-7]m", bytes(term.out)), bytes(term.out)[-500:]  # no foreground colour
    assert bytes(term.out).rstrip().endswith(b"\x1b[?1049l")
    assert termios.tcgetattr(term.follower) == term.modes
    os.close(term.leader)
    os.close(term.follower)
