"""A FIFO (or anything but a regular file) with a transcript's, a meta's or a session file's name
under a root is not read: every reader of such a path returns at once instead of waiting for a
writer that never comes (``ccotel report``, ``backfill``, ``sessions`` and ``trace`` hung on one).
Each reader runs in a thread given a few seconds; a FIFO open that blocked is then released by
opening its other end, so a failure never leaves a thread waiting."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ccotel.commands import sessions
from ccotel.commands.doctor import telemetry as doctor_telemetry
from ccotel.commands.statusline import session as statusline_session
from ccotel.read import discover, evidence, procs, shard, tail
from ccotel.read.regular import NotRegularFile, open_regular
from ccotel.run.pipeline import Options, Pipeline
from tests.harness.fixtures import load_fixture

SID = "11111111-2222-3333-4444-555555555555"


def _returns(fifos: list[Path], fn: Callable[..., Any], *args: Any) -> Any:
    out: list[Any] = []

    def call() -> None:
        try:
            out.append(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - raised again in the test's thread
            out.append(exc)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(10.0)
    blocked = thread.is_alive()
    for fifo in fifos:  # a reader still waiting in open() gets its writer, and EOF
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
    thread.join(10.0)
    assert not blocked, f"{getattr(fn, '__name__', fn)} waited on a FIFO"
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A real 2.1.330 session, and beside it a FIFO as a main transcript, a subagent transcript, the
    meta.json of another subagent, a sessions/<pid>.json and the root's settings.json."""
    src = load_fixture("2.1.330-s01_bash_tool").config_dir
    shutil.copytree(src, tmp_path / "c")
    config = tmp_path / "c"
    project = next((config / "projects").iterdir())
    sub = project / SID / "subagents"
    sub.mkdir(parents=True)
    (config / "sessions").mkdir()
    first_line = next(project.glob("*.jsonl")).read_bytes().split(b"\n")[0] + b"\n"
    (sub / "agent-a2.jsonl").write_bytes(first_line)  # a subagent with a line: its meta.json is loaded
    for fifo in (project / f"{SID}.jsonl", sub / "agent-a1.jsonl", sub / "agent-a2.meta.json",
                 config / "sessions" / "4242.json", config / "settings.json"):
        os.mkfifo(fifo)
    return config


def _fifos(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_fifo()]


def test_open_regular_refuses_a_fifo_and_a_directory_as_an_oserror(tmp_path: Path):
    fifo = tmp_path / "a.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFile):
        _returns([fifo], open_regular, str(fifo))
    with pytest.raises(OSError):
        open_regular(str(tmp_path))
    (tmp_path / "b.jsonl").write_bytes(b"{}\n")
    with open_regular(str(tmp_path / "b.jsonl")) as f:
        assert f.read() == b"{}\n"


def test_the_readers_of_a_path_under_a_root_return(root: Path):
    fifos = _fifos(root)
    assert len(fifos) == 5
    main = next(p for p in fifos if p.name == f"{SID}.jsonl")
    meta = next(p for p in fifos if p.name.endswith(".meta.json"))
    assert _returns(fifos, tail.identity_of, str(main)) is None
    assert _returns(fifos, lambda: list(tail.lines_with(str(main), b"x", 1 << 20))) == []
    assert _returns(fifos, discover.time_span, str(main)) == (0, 0)
    assert _returns(fifos, shard.head_keys, str(main)) == [("unknown", "")]
    assert _returns(fifos, evidence._load, str(root), str(meta), None) is None
    assert _returns(fifos, procs.session_files, (str(root),)) == []
    assert _returns(fifos, statusline_session._read_file, str(main), None, {}, {}) is None
    ref = sessions.SessionRef(SID, main.parent.name, (str(main),), (), 0)
    assert _returns(fifos, sessions._last_record_ns, ref) == 0
    assert evidence.retention_of(str(root)) > 0  # settings.json: cleanupPeriodDays
    env, findings = _returns(fifos, doctor_telemetry._settings_env, str(root / "settings.json"), str(root))
    assert env == [] and "not a regular file" in findings[0].message


def test_a_backfill_counts_the_fifo_as_unreadable_and_reads_the_session_beside_it(root: Path):
    spans: list[Any] = []
    pipeline = Pipeline(Options(roots=(str(root),)), emit=spans.extend, state=None)
    _returns(_fifos(root), lambda: pipeline.backfill(close_all=True))
    assert spans, "the real session beside the FIFOs was read"
    assert pipeline.stats.errors["unreadable"] == 2  # the FIFO main and subagent transcripts
    assert pipeline.stats.errors["bad_meta_json"] == 1  # the FIFO meta.json of the subagent with a line
