"""Is the Claude Code process writing a session still running?

While a CLI process runs, Claude Code keeps ``<config>/sessions/<pid>.json`` with the session id
and the process start time (``procStart``, /proc/<pid>/stat field 22). A clean exit removes it;
a SIGKILLed process leaves it behind. A pid that is gone, or reused by another process (other
start time), means the turn it was writing was killed, not slow.
"""

from __future__ import annotations

import os

import orjson

__all__ = ["read_session_pids", "pid_alive"]


def read_session_pids(roots: tuple[str, ...]) -> dict[str, tuple[int, str | None]]:
    """sessionId -> (pid, procStart) from <root>/sessions/<pid>.json (Claude Code keeps one per live process)."""
    out: dict[str, tuple[int, str | None]] = {}
    for root in roots:
        d = os.path.join(root, "sessions")
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for name in names:
            if not name.endswith(".json"):
                continue
            try:
                with open(os.path.join(d, name), "rb") as f:
                    doc = orjson.loads(f.read(1 << 16))
            except (OSError, orjson.JSONDecodeError):
                continue
            if isinstance(doc, dict) and isinstance(doc.get("pid"), int) and isinstance(doc.get("sessionId"), str):
                start = doc.get("procStart")
                out[doc["sessionId"]] = (doc["pid"], str(start) if start is not None else None)
    return out


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
