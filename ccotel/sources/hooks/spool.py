"""The hook spool: one JSON line per hook event, in ``<state dir>/hooks/spool-YYYYMMDD.jsonl`` (UTC day).

Written by ``ccotel hook`` (commands/hook.py), one ``O_APPEND`` write per event, and read by ``ccotel run``
(follower.py). Bounded: a day's file takes at most ``MAX_FILE_BYTES`` (later events of that day are
dropped), and the writer deletes the files older than ``KEEP_DAYS`` days, so the spool never grows
without a bound, whether or not ``ccotel run`` follows it. A line keeps only what ccotel uses: ids,
times, names and reasons, never a prompt, a message or a tool's input (a digest of the input pairs a
permission request with its tool call).

This module is on the hook's path: it imports ``os`` and ``time`` only (``json`` and ``hashlib`` when an
event is written), so a hook costs little more than Python's own start.
"""

from __future__ import annotations

import os
import time
from typing import Any

__all__ = ["SUBDIR", "PREFIX", "MAX_FILE_BYTES", "MAX_INPUT_BYTES", "KEEP_DAYS", "EVENTS", "spool_dir", "spool_name",
           "record_of", "append", "prune"]

SUBDIR = "hooks"
PREFIX = "spool-"
MAX_FILE_BYTES = 16 << 20  # a day's events past this are dropped (tens of thousands of events)
MAX_INPUT_BYTES = 4 << 20  # a hook input larger than this is not read (a Write of a large file)
KEEP_DAYS = 7

# The events ccotel asks for (plugin/hooks/hooks.json) and the fields of each it keeps, as spooled.
EVENTS: dict[str, tuple[str, ...]] = {
    "SessionEnd": ("reason",),
    "Notification": ("notification_type",),
    "PermissionRequest": ("tool_name",),
    "PermissionDenied": ("tool_name", "tool_use_id", "reason"),
    "PostToolUse": ("tool_name", "tool_use_id", "duration_ms"),
    "PostToolUseFailure": ("tool_name", "tool_use_id", "duration_ms"),
    "PreCompact": ("trigger",),
    "SessionStart": ("source",),
}
_COMMON = ("session_id", "agent_id", "agent_type")
_DIGESTED = ("PermissionRequest", "PermissionDenied", "PostToolUse", "PostToolUseFailure")
_TEXT_MAX = 200  # a kept string longer than this is cut (they are ids, names and reasons)


def spool_dir(state_dir: str) -> str:
    return os.path.join(state_dir, SUBDIR)


def spool_name(t_ns: int) -> str:
    return PREFIX + time.strftime("%Y%m%d", time.gmtime(t_ns / 1e9)) + ".jsonl"


def record_of(doc: Any, t_ns: int) -> dict[str, Any] | None:
    """The spool line of one hook input (None: not an event ccotel keeps)."""
    if not isinstance(doc, dict):
        return None
    event = doc.get("hook_event_name")
    if not isinstance(event, str) or event not in EVENTS:
        return None
    rec: dict[str, Any] = {"t": t_ns, "event": event}
    for key in _COMMON + EVENTS[event]:
        value = doc.get(key)
        if isinstance(value, str):
            rec[key] = value[:_TEXT_MAX]
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            rec[key] = value
    if event in _DIGESTED and "tool_input" in doc:
        rec["input_digest"] = input_digest(doc["tool_input"])
    return rec


def input_digest(tool_input: Any) -> str:
    """A digest of a tool's input: pairs a permission request with its tool call without keeping the input."""
    import hashlib
    import json

    text = json.dumps(tool_input, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:32]


def append(directory: str, rec: dict[str, Any]) -> bool:
    """One line, one write, appended (``O_APPEND``: lines of concurrent hooks never interleave). False: the
    day's file is full, the event dropped."""
    import json

    os.makedirs(directory, mode=0o700, exist_ok=True)
    path = os.path.join(directory, spool_name(int(rec["t"])))
    line = (json.dumps(rec, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8", "replace")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        size = os.fstat(fd).st_size
        if size + len(line) > MAX_FILE_BYTES:
            return False
        os.write(fd, line)
    finally:
        os.close(fd)
    if size == 0:  # a new day's file: the days past KEEP_DAYS go (once a day, not at every event)
        prune(directory, int(rec["t"]))
    return True


def prune(directory: str, now_ns: int, keep_days: int = KEEP_DAYS) -> None:
    """Delete the spool files of days older than ``keep_days`` (their names say the day)."""
    oldest = spool_name(now_ns - keep_days * 86_400_000_000_000)
    for name in os.listdir(directory):
        if name.startswith(PREFIX) and name.endswith(".jsonl") and name < oldest:
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass
