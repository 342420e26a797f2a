"""What the status line reads of one session's transcript (its main file and its subagents'
files), incrementally: each run reads only the bytes written since the last one, kept with the
calls found so far in a small cache file under ccotel's state (``statusline/<session>.json``).

The standard library only (plus ccotel's pricing, imported only when a call new to the cache has
to be priced): the status line runs after every message. The rules are the report's (held equal
by tests on the real-CLI fixtures): one call per (message.id, requestId) across the session's
files, its largest usage snapshot (larger output, then larger total), ``<synthetic>`` lines and
API errors are no billed call. Advisor iterations are not split out (the report prices them as
calls of the advisor's model: there the two can differ)."""

from __future__ import annotations

import json
import os
import re
from typing import Any

from ccotel.read.parse_time import parse_timestamp
from ccotel.rules.model_name import reported_model

__all__ = ["SessionRead", "read_session"]

_TOOL_RESULT_ID = re.compile(rb'"tool_use_id":\s*"([^"]+)"')
_MAX_READ = 64 << 20  # bytes read per file and run at most (a first run on a huge session reads it in parts)
_CACHE_VERSION = 2
# A call in the cache: [time ns, input, output, cache read, cache write, 5m, 1h, reasoning, model,
# cost or None, priced (0/1)]
_Call = list[Any]


class SessionRead:
    """The session's calls (by key) and tool calls still waiting for a result (id -> [name, ns])."""

    def __init__(self, calls: dict[str, _Call], pending: dict[str, list[Any]]) -> None:
        self.calls = calls
        self.pending = pending


def _session_files(transcript: str, session_id: str) -> list[str]:
    """The main transcript and its subagents' files (``<dir>/<session>/subagents/*.jsonl``)."""
    out = [transcript]
    sub = os.path.join(os.path.dirname(transcript), session_id, "subagents")
    try:
        with os.scandir(sub) as it:
            out += sorted(e.path for e in it if e.name.endswith(".jsonl") and e.is_file(follow_symlinks=False))
    except OSError:
        pass
    return out


def _load_cache(path: str | None) -> dict[str, Any]:
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
            if isinstance(doc, dict) and doc.get("v") == _CACHE_VERSION:
                return doc
        except (OSError, ValueError):
            pass
    return {"v": _CACHE_VERSION, "files": {}, "calls": {}, "pending": {}}


def _save_cache(path: str | None, doc: dict[str, Any]) -> None:
    if not path:
        return
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, separators=(",", ":"))
        os.replace(tmp, path)
    except OSError:
        pass  # no cache: the next run reads the files again, never wrong


def _usage(u: dict[str, Any]) -> tuple[int, int, int, int, int, int, int] | None:
    try:
        cc = u.get("cache_creation") or {}
        details = u.get("output_tokens_details") or {}
        return (int(u.get("input_tokens") or 0), int(u.get("output_tokens") or 0),
                int(u.get("cache_read_input_tokens") or 0), int(u.get("cache_creation_input_tokens") or 0),
                int(cc.get("ephemeral_5m_input_tokens") or 0) if isinstance(cc, dict) else 0,
                int(cc.get("ephemeral_1h_input_tokens") or 0) if isinstance(cc, dict) else 0,
                int(details.get("reasoning_tokens") or 0) if isinstance(details, dict) else 0)
    except (TypeError, ValueError, AttributeError):
        return None


def _take_assistant(obj: dict[str, Any], calls: dict[str, _Call], pending: dict[str, list[Any]],
                    last: list[Any]) -> None:
    """An assistant line: its call (merged by key) and its tool calls. ``last``: the file's last
    response line's [message id, key] (a line that lost its requestId belongs to it)."""
    msg = obj.get("message")
    if not isinstance(msg, dict):
        return
    ts = parse_timestamp(obj.get("timestamp")) or 0
    for item in msg.get("content") or ():
        if isinstance(item, dict) and item.get("type") == "tool_use" and isinstance(item.get("id"), str):
            pending.setdefault(item["id"], [str(item.get("name") or "?"), ts])
    model, mid, u = msg.get("model"), msg.get("id"), msg.get("usage")
    if obj.get("isApiErrorMessage") is True or not reported_model(model) or not isinstance(mid, str) \
            or not isinstance(u, dict):
        return
    usage = _usage(u)
    if usage is None:
        return
    rid = obj.get("requestId")
    if isinstance(rid, str) and rid:
        key = f"{mid}:{rid}"  # rules.transcript.call_key
    else:
        key = last[1] if last[0] == mid else mid  # the response just before, with the same message id
    last[0], last[1] = mid, key
    have = calls.get(key)
    if have is not None and (usage[1], sum(usage[:4])) <= (have[2], sum(have[1:5])):
        return  # an earlier, smaller snapshot of a call already counted (or the same)
    calls[key] = [ts or (have[0] if have else 0), *usage, model, None, 0]


def _read_file(path: str, state: list[Any] | None, calls: dict[str, _Call], pending: dict[str, list[Any]]
               ) -> list[Any] | None:
    """Read ``path`` from where the last run stopped; its new [inode, offset, last message id,
    last key] (None: unreadable)."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            same = bool(state) and state[0] == st.st_ino and state[1] <= st.st_size  # type: ignore[index]
            offset = state[1] if same else 0  # type: ignore[index]
            last: list[Any] = list(state[2:4]) if same else [None, ""]  # type: ignore[index]
            f.seek(offset)
            data = f.read(min(_MAX_READ, st.st_size - offset))
    except OSError:
        return None
    end = data.rfind(b"\n") + 1
    lines = data[:end].split(b"\n")
    tail = data[end:]
    if tail.strip() and _whole(tail):  # a last line without its newline, but whole (as the report reads it)
        lines.append(tail)
        end = len(data)
    for line in lines:
        if b'"tool_result"' in line:
            for m in _TOOL_RESULT_ID.finditer(line):
                pending.pop(m.group(1).decode("utf-8", "replace"), None)
        if b'"assistant"' not in line:
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("type") == "assistant":
            _take_assistant(obj, calls, pending, last)
    return [st.st_ino, offset + end, *last]


def _whole(line: bytes) -> bool:
    """Is this a whole JSON value (not a line still being written)?"""
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


def read_session(transcript: str, session_id: str, cache_path: str | None) -> SessionRead:
    """The session's calls and waiting tool calls, read since the cached run (new calls priced)."""
    doc = _load_cache(cache_path)
    files: dict[str, list[Any]] = doc["files"]
    calls: dict[str, _Call] = doc["calls"]
    pending: dict[str, list[Any]] = doc["pending"]
    changed = False
    for path in _session_files(transcript, session_id):
        new = _read_file(path, files.get(path), calls, pending)
        if new is not None and new != files.get(path):
            files[path] = new
            changed = True
    unpriced = [c for c in calls.values() if not c[10]]
    if unpriced:
        from ccotel.spans.pricing import DEFAULT_PRICING  # only for calls this cache has not priced yet

        for c in unpriced:
            c[9] = DEFAULT_PRICING.cost_of(c[8], tuple(c[1:8]), c[0] or None)
            c[10] = 1
    if changed or unpriced:
        _save_cache(cache_path, doc)
    return SessionRead(calls, pending)
