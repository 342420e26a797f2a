"""Ctrl-C in a command that reads (report, sessions, trace, ...) ends it as an unhandled SIGINT
does, 130 in a shell, with no traceback: not the command's, nor one from each of its forked
readers (shard.run_jobs), which the terminal interrupts too (the whole process group)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# ccotel's entry point with a command that reads in two processes and blocks there, each reader
# saying (a file named for its pid) that it has started
_DRIVER = """
import os, sys, time
import ccotel.cli
from ccotel.__main__ import main
from ccotel.read.shard import run_jobs

def read(job, where):
    open(os.path.join(where, str(os.getpid())), "w").close()
    time.sleep(60)
    return job

where, sys.argv = sys.argv[1], ["ccotel", "a-command"]
ccotel.cli.main = lambda argv: len(run_jobs([1, 2], 2, read, where))
raise SystemExit(main())
"""


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_ctrl_c_ends_a_reading_command_and_its_readers_quietly(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", _DRIVER, str(tmp_path)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        for _ in range(300):  # both readers started (bounded: 30 s)
            if len(os.listdir(tmp_path)) == 2:
                break
            time.sleep(0.1)
        readers = [int(name) for name in os.listdir(tmp_path)]
        assert len(readers) == 2 and proc.pid in readers
        os.killpg(proc.pid, signal.SIGINT)  # as the terminal's Ctrl-C
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == -signal.SIGINT
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    worker = next(pid for pid in readers if pid != proc.pid)
    for _ in range(100):  # the forked reader is ended by its parent, not left behind
        if _gone(worker):
            break
        time.sleep(0.1)
    assert _gone(worker)


def test_a_caller_of_main_gets_the_keyboardinterrupt(monkeypatch):
    """``main(argv)`` from Python (tests, the Agent SDK helper): the interrupt is the caller's."""
    import ccotel.__main__ as entry

    def interrupted(argv: list[str], command: bool) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(entry, "_main", interrupted)
    try:
        entry.main(["report"])
    except KeyboardInterrupt:
        return
    raise AssertionError("the KeyboardInterrupt was not raised to the caller")
