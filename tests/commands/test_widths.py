"""Every reading command as a user sees it (issue 28): in a real pseudo-terminal of 80, 100, 120 and
200 columns, into a pipe, and into a pipe closed at once. A number in a table is never cut and is
the number --json gives (no digit lost); no line wraps; in a pipe nothing gives way; a closed pipe
ends the command quietly (status 0) instead of keeping it waiting.

On a part of shared/realdata (two small projects: dated model names, several models in a session,
errors, millions of tokens) and a committed fixture with nested subagents (a deep tree)."""

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
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest

from ccotel.commands.sessions import _compact
from ccotel.commands.terminal import PIPE_WIDTH, dollars, short_model
from tests.harness.fixtures import load_fixture
from tests.run.test_status_line import screen
from tests.support.fixtures import realdata_config_dir  # noqa: F401

PROJECTS = ("chiphuyen__sniffly", "theogbrand__napoli-matcha")
WIDTHS = (80, 100, 120, 200)
DEEP = "s05_nested_subagent"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def root(realdata_config_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    dest = tmp_path_factory.mktemp("widths") / "claude"
    for project in PROJECTS:
        shutil.copytree(realdata_config_dir / "projects" / project, dest / "projects" / project)
    shutil.copytree(load_fixture(DEEP).config_dir / "projects", dest / "projects", dirs_exist_ok=True)
    return dest


def _env(columns: int | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR")
           and not k.startswith("OTEL_")}
    env.update(PYTHONPATH=str(REPO), TERM="xterm", CCOTEL_STATE="none")
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return env


def in_terminal(argv: list[str], columns: int) -> str:
    """The command's output on a pseudo-terminal of ``columns`` (COLUMNS unset: the terminal's size)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "ccotel", *argv], stdin=subprocess.DEVNULL, stdout=follower,
                            stderr=subprocess.PIPE, env=_env(None), close_fds=True)
    os.close(follower)
    out = bytearray()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the process closed the terminal
                break
            if not chunk:
                break
            out.extend(chunk)
        elif proc.poll() is not None:
            break
    os.close(leader)
    assert proc.wait(timeout=10) in (0, 1), proc.stderr.read().decode() if proc.stderr else ""
    return out.decode().replace("\r\n", "\n")


def in_pipe(argv: list[str], columns: int | None = None) -> str:
    proc = subprocess.run([sys.executable, "-m", "ccotel", *argv], capture_output=True, env=_env(columns),
                          timeout=60)
    assert proc.returncode in (0, 1), proc.stderr.decode()
    return proc.stdout.decode()


def _plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)


# A figure as a table prints it: 1,561 / 0.52 / 0.0047 / 13.92M / 229k / 66.6k (a date, a time, a
# duration like 7.40s or a version like 2.1.237 is not one: letters or dots follow).
FIGURE = re.compile(r"(?<![\w.:/-])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d+[kM]?|\d+[kM])(?![\w.,:/-]|\.\d)")


def renderings(doc: Any) -> set[str]:
    """Every way a table may print a number of the JSON document: grouped, to the cent, compact."""
    out: set[str] = set()

    def walk(v: Any) -> None:
        if isinstance(v, bool):
            return
        if isinstance(v, int):
            out.update({f"{v:,}", str(v), _compact(v), dollars(v)})  # a cost of nothing is JSON's 0
        elif isinstance(v, float):
            out.update({dollars(v), f"{v:,.2f}"})
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
            # sessions' `in`: input with cache read and cache write, as the trace's `in`; a model's total
            for keys in (("inputTokens", "cacheReadTokens", "cacheCreationTokens"),
                         ("inputTokens", "outputTokens", "cacheReadTokens", "cacheCreationTokens")):
                if set(keys) <= set(v):
                    walk(sum(int(v[k]) for k in keys))
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(doc)
    return out


def commands(root: Path) -> Iterator[tuple[str, list[str], list[str] | None]]:
    """(name, argv, argv of its --json or None) of each reading command."""
    r = ["--root", str(root)]
    report = [*r, "--state-dir", "none", "--timezone", "UTC"]
    for view in ("daily", "session", "project", "monthly"):
        yield f"report {view}", ["report", view, *report], ["report", view, *report, "--json"]
    yield "report daily -b", ["report", "daily", "--breakdown", *report], ["report", "daily", *report, "--json"]
    yield "sessions", ["sessions", *r, "--limit", "0"], ["sessions", *r, "--limit", "0", "--json"]
    big, deep = "4873c9a2", load_fixture(DEEP).session_ids[0][:8]  # 37 calls, 5 tool errors; a deep tree
    for sid in (big, deep):
        yield f"trace {sid}", ["trace", sid, *r], ["trace", sid, *r, "--json"]
    yield "trace --list", ["trace", big, "--list", *r], ["trace", big, "--list", *r, "--json"]
    yield "check", ["check", big, *r], ["check", big, *r, "--json"]
    yield "doctor", ["doctor", *r, "--state-dir", "none", "--metrics-addr", "none"], None


def test_every_command_at_every_width_in_a_terminal_and_a_pipe(root: Path) -> None:
    started = time.monotonic()
    jobs = list(commands(root))
    with ThreadPoolExecutor(max_workers=4) as pool:  # each waits on its process: run them side by side
        docs = {name: pool.submit(in_pipe, j) for name, _, j in jobs if j}
        seen = {(name, columns): pool.submit(in_terminal, argv, columns) for name, argv, _ in jobs
                for columns in WIDTHS}
        piped = {name: pool.submit(in_pipe, argv) for name, argv, _ in jobs}
        narrow = pool.submit(in_pipe, jobs[0][1], 90)
    for name, _, json_argv in jobs:
        doc = orjson.loads(docs[name].result()) if json_argv else None
        figures = renderings(doc) if doc is not None else None
        for columns in WIDTHS:
            raw = seen[name, columns].result()
            lines, wraps = screen(raw, columns)
            text = "\n".join(lines)
            if name == "check":  # plain lines: only one naming a path (it cannot be cut) may wrap
                long = [line for line in _plain(raw).splitlines() if len(line) > columns]
                assert all("/" in line for line in long), (columns, long)
            else:
                assert wraps == 0, (name, columns, text[-2000:])  # nothing wraps
            assert not re.search(r"\d…", text), (name, columns, text)  # no figure cut
            if figures is not None:
                shown = FIGURE.findall(_plain(text))
                assert shown or name == "check", (name, columns)
                lost = sorted({f for f in shown if f not in figures})
                assert not lost, (name, columns, lost, text[:3000])  # every figure is --json's
            if name == "report daily -b":  # a model's name is whole on its line (issue 28: sonnet-4-2 / 0250514)
                models = {short_model(m["modelName"]) for d in doc["daily"] for m in d["modelBreakdowns"]}
                assert all(f"└ {m} " in text for m in models), (models, text)
        # into a pipe without COLUMNS: wide, nothing given way, no wrap
        out = piped[name].result()
        assert max(len(line) for line in out.splitlines()) <= PIPE_WIDTH, name
        assert "not shown at this width" not in out, (name, out[-500:])
    assert max(len(line) for line in narrow.result().splitlines()) <= 90  # COLUMNS, when set, is the width
    assert time.monotonic() - started < 120  # the whole surface in well under the suite's budget


@pytest.mark.parametrize("argv", [["report", "--state-dir", "none"], ["sessions"], ["trace", "4873c9a2"],
                                  ["trace", "4873c9a2", "--list"], ["check", "4873c9a2"],
                                  ["doctor", "--state-dir", "none", "--metrics-addr", "none"]])
def test_a_closed_pipe_ends_the_command_quietly(argv: list[str], root: Path) -> None:
    """`ccotel … | head` with head gone before the first line: status 0, nothing on stderr, no wait."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written
    proc = subprocess.Popen([sys.executable, "-m", "ccotel", *argv, "--root", str(root)], stdout=write,
                            stderr=subprocess.PIPE, env=_env(None))
    os.close(write)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode in (0, 1) and b"Traceback" not in err and b"Broken pipe" not in err, err.decode()
    if argv[0] != "check":  # check's status is its verdict (1: do not resume)
        assert proc.returncode == 0, err.decode()
