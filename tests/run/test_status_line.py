"""`ccotel run` on an 80-column terminal: the status line fits (never wraps), is redrawn in place,
and the log records (the backend warning) go above it, never into it (issue 28)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from tests.test_cli import free_port
from tests.transcript import Transcript, text

COLUMNS = 80
SID = "abababab-1111-4222-8333-444444444444"


def screen(output: str, columns: int = COLUMNS) -> tuple[list[str], int]:
    """The lines a terminal of ``columns`` shows for ``output`` (CR, LF, erase to the end of the
    line, autowrap), and how often a line wrapped."""
    lines, line, col, wraps = [], [], 0, 0
    for token in re.findall(r"\x1b\[[0-9;]*[A-Za-z]|.", output, re.S):
        if token == "\r":
            col = 0
        elif token == "\n":
            lines.append("".join(line).rstrip())
            line, col = [], 0
        elif token.startswith("\x1b["):
            if token == "\x1b[K" or token == "\x1b[0K":
                del line[col:]
        elif token.isprintable():
            if col >= columns:  # the terminal wraps: a new line
                lines.append("".join(line).rstrip())
                line, col, wraps = [], 0, wraps + 1
            line[col:col + 1] = [token]
            col += 1
    lines.append("".join(line).rstrip())
    return lines, wraps


def test_the_screen_model_wraps_and_erases() -> None:
    assert screen("x" * 82) == (["x" * 80, "xx"], 1)
    assert screen("abc\rx\x1b[K") == (["x"], 0)


def test_run_status_line_fits_80_columns_and_logs_go_above_it(tmp_path: Path) -> None:
    root = tmp_path / "claude"
    (root / "projects" / "-p").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{free_port()}",  # no backend: a warning
               COLUMNS=str(COLUMNS), TERM="xterm")
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, COLUMNS, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "ccotel", "run", "--root", str(root), "--state-dir",
                             str(tmp_path / "st"), "--metrics-addr", "none"],
                            stdin=follower, stdout=follower, stderr=follower, env=env, close_fds=True)
    os.close(follower)
    out = bytearray()

    def read_for(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            ready, _, _ = select.select([leader], [], [], 0.1)
            if ready:
                try:
                    out.extend(os.read(leader, 65536))
                except OSError:  # the process is gone
                    return

    try:
        read_for(3.5)  # caught up; the live line is drawn every second
        t = Transcript(SID, t_ms=int(time.time() * 1000))
        t.prompt("hello", parent=None)
        t.response("msg_1", [text("hi")], stop_reason="end_turn")
        t.write(str(root / "projects" / "-p" / f"{SID}.jsonl"))  # its export fails: the warning, while live
        read_for(4.0)
        proc.send_signal(signal.SIGTERM)
        read_for(3.0)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(leader)
    shown = out.decode(errors="replace")
    lines, _wraps = screen(shown)  # long log records wrap, as they do in any terminal
    assert "live:" in shown and "not reachable" in shown, shown
    drawn = re.findall(r"(?:live:|catching up)[^\r\n\x1b]*", shown)
    assert drawn and all(len(d) < COLUMNS for d in drawn), drawn  # the status line never wraps
    warnings = [line for line in lines if "not reachable" in line]
    assert len(warnings) == 1 and re.match(r"^\d{4}-\d\d-\d\d ", warnings[0]), lines  # a line of its own
    assert sum("live:" in line for line in lines) <= 1, lines  # redrawn in place, not a line a second


def test_a_log_record_goes_above_the_bar_which_is_drawn_again_below_it() -> None:
    import logging

    from ccotel.run.status import StatusLine

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, COLUMNS, 0, 0))
    stream = os.fdopen(follower, "w")
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger()
    logger.addHandler(handler)
    try:
        line = StatusLine(stream).attach()
        line.show("catching up [" + "#" * 200 + "]")
        logging.getLogger("ccotel").warning("the backend is away")
        line.show("catching up [##]")
        line.detach()
        logging.getLogger("ccotel").warning("after")
        stream.flush()
        got = bytearray()
        while select.select([leader], [], [], 0.3)[0]:
            got.extend(os.read(leader, 65536))
        shown = got.decode()
    finally:
        logger.removeHandler(handler)
        stream.close()
        os.close(leader)
    assert screen(shown) == (["the backend is away", "catching up [##]", "after", ""], 0)
