"""What /proc and ``<config>/sessions/<pid>.json`` say, read in one place: above all, is the Claude Code
process writing a session still running; also who holds a lock (doctor) and how much memory this
process peaked at (catch-up workers).

While a CLI process runs, Claude Code keeps ``<config>/sessions/<pid>.json`` with the session id
and the process start time (``procStart``, /proc/<pid>/stat field 22). A clean exit removes it;
a SIGKILLed process leaves it behind. A pid that is gone, or reused by another process (other
start time), means the turn it was writing was killed, not slow.
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from ccotel.read.discover import OutsideRoot, readable_under
from ccotel.read.regular import open_regular

__all__ = ["PROC_LOCKS", "Proc", "any_alive", "below", "cmdline", "flock_holders", "peak_rss_kb", "pid_alive",
           "proc_start", "read_session_pids", "session_files", "start_wall_ns"]


Proc = tuple[int, "str | None"]  # (pid, procStart)
PROC_LOCKS = "/proc/locks"  # the kernel's table of file locks and their holders


def session_files(roots: tuple[str, ...], outside: OutsideRoot | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(root, document) of every ``<root>/sessions/<pid>.json`` that names a pid and a session;
    ``outside`` is told of one that leads out of its root."""
    out = []
    for root in roots:
        d = os.path.join(root, "sessions")
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for name in sorted(names):
            path = os.path.join(d, name)
            if not name.endswith(".json") or not readable_under(root, path, outside):  # a link out of the root
                continue
            try:
                with open_regular(path) as f:
                    doc = orjson.loads(f.read(1 << 16))
            except (OSError, orjson.JSONDecodeError):
                continue
            if isinstance(doc, dict) and isinstance(doc.get("pid"), int) and isinstance(doc.get("sessionId"), str):
                out.append((root, doc))
    return out


def read_session_pids(roots: tuple[str, ...], outside: OutsideRoot | None = None) -> dict[str, tuple[Proc, ...]]:
    """sessionId -> every (pid, procStart) of <root>/sessions/<pid>.json naming it. Claude Code keeps
    one per live process; 2.1.3xx no longer deletes a killed process's file when the session is
    resumed, so a session can have a stale file beside its live one."""
    out: dict[str, list[Proc]] = {}
    for _root, doc in session_files(roots, outside):
        start = doc.get("procStart")
        out.setdefault(doc["sessionId"], []).append((doc["pid"], str(start) if start is not None else None))
    return {sid: tuple(procs) for sid, procs in out.items()}


def any_alive(procs: tuple[Proc, ...]) -> bool:
    """Does any process that wrote a sessions file for the session still run?"""
    return any(pid_alive(pid, start) for pid, start in procs)


def pid_alive(pid: int, proc_start: str | None) -> bool:
    """The pid runs and is the same process (its start time matches: pids are reused)."""
    fields = _stat_fields(pid)
    if fields is None:
        return False
    state = fields[0] if fields else "X"
    if state in ("Z", "X"):
        return False
    if proc_start is not None and proc_start.isdigit() and len(fields) > 19:
        return fields[19] == proc_start
    return True


def proc_start(pid: int) -> str | None:
    """/proc/<pid>/stat field 22 (start time in clock ticks since boot), as Claude Code's
    ``procStart`` writes it; None if the pid does not run."""
    fields = _stat_fields(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None


def start_wall_ns(start_ticks: str) -> int | None:
    """A process start time (clock ticks since boot) as Unix ns."""
    try:
        with open("/proc/stat", "rb") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
        return int((btime + int(start_ticks) / os.sysconf("SC_CLK_TCK")) * 1e9)
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def below(pid: int, ancestor: int, depth: int = 8) -> bool:
    """Is ``pid`` ``ancestor`` or a process started under it (a wrapper's child)?"""
    for _ in range(depth):
        if pid == ancestor:
            return True
        parent = _parent_pid(pid)
        if parent is None or parent <= 1:
            return False
        pid = parent
    return False


def _parent_pid(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields is not None and len(fields) > 1 and fields[1].isdigit() else None


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (field 3 on); None if the pid does not run."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()


def cmdline(pid: int) -> str:
    """A process's command line, cut to 100 characters ("" when it cannot be read)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read(4096).split(b"\0")
    except OSError:
        return ""
    text = " ".join(a.decode("utf-8", "replace") for a in args if a)
    return text if len(text) <= 100 else text[:99] + "…"


def flock_holders(proc_locks: str, dev: int, ino: int) -> list[int] | None:
    """Pids holding a FLOCK on (dev, ino) per /proc/locks ("1: FLOCK ADVISORY WRITE <pid> <maj>:<min>:<ino>
    0 EOF", major and minor in hex; waiters are "1: -> FLOCK ..."). None when it cannot be read."""
    try:
        with open(proc_locks, encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    want = (os.major(dev), os.minor(dev), ino)
    pids = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 6 or parts[1] != "FLOCK":
            continue
        try:
            major, minor, inode = parts[5].split(":")
            if (int(major, 16), int(minor, 16), int(inode)) == want:
                pids.append(int(parts[4]))
        except ValueError:
            continue
    return pids


def peak_rss_kb() -> int | None:
    """This process's RSS high-water mark (VmHWM), KiB; None where /proc cannot say."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None
