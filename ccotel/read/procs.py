"""Is the Claude Code process writing a session still running?

While a CLI process runs, Claude Code keeps ``<config>/sessions/<pid>.json`` with the session id
and the process start time (``procStart``, /proc/<pid>/stat field 22). A clean exit removes it;
a SIGKILLed process leaves it behind. A pid that is gone, or reused by another process (other
start time), means the turn it was writing was killed, not slow.
"""

from __future__ import annotations

import os

import orjson

__all__ = ["Proc", "any_alive", "read_session_pids", "pid_alive"]


Proc = tuple[int, "str | None"]  # (pid, procStart)


def read_session_pids(roots: tuple[str, ...]) -> dict[str, tuple[Proc, ...]]:
    """sessionId -> every (pid, procStart) of <root>/sessions/<pid>.json naming it. Claude Code keeps
    one per live process; 2.1.3xx no longer deletes a killed process's file when the session is
    resumed, so a session can have a stale file beside its live one."""
    out: dict[str, list[Proc]] = {}
    for root in roots:
        d = os.path.join(root, "sessions")
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for name in sorted(names):
            if not name.endswith(".json"):
                continue
            try:
                with open(os.path.join(d, name), "rb") as f:
                    doc = orjson.loads(f.read(1 << 16))
            except (OSError, orjson.JSONDecodeError):
                continue
            if isinstance(doc, dict) and isinstance(doc.get("pid"), int) and isinstance(doc.get("sessionId"), str):
                start = doc.get("procStart")
                out.setdefault(doc["sessionId"], []).append((doc["pid"], str(start) if start is not None else None))
    return {sid: tuple(procs) for sid, procs in out.items()}


def any_alive(procs: tuple[Proc, ...]) -> bool:
    """Does any process that wrote a sessions file for the session still run?"""
    return any(pid_alive(pid, start) for pid, start in procs)


def pid_alive(pid: int, proc_start: str | None) -> bool:
    """The pid runs and is the same process (its start time matches: pids are reused)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return False
    fields = stat[stat.rfind(")") + 2:].split()
    state = fields[0] if fields else "X"
    if state in ("Z", "X"):
        return False
    if proc_start is not None and proc_start.isdigit() and len(fields) > 19:
        return fields[19] == proc_start
    return True
