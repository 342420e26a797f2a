"""What the status line reads of one session's transcript (its main file and its subagents'
files), incrementally: each run reads only the bytes written since the last one, kept with the
calls found so far in a small cache file under ccotel's state (``statusline/<session>.json``).

No ``json`` (statusline_json.py), and ccotel's pricing only when a call new to the cache is of a
model and UTC day not priced before (price.py): the status line runs after every
message. The rules are the report's (held equal by tests on the real-CLI fixtures): one call per
(message.id, requestId) across the session's files, its largest usage snapshot (larger output,
then larger total), ``<synthetic>`` lines and API errors are no billed call. Advisor iterations
are not split out (the report prices them as calls of the advisor's model: there the two can
differ)."""

from __future__ import annotations

import os

from ccotel.commands.statusline.fastjson import loads, save
from ccotel.read.regular import open_regular
from ccotel.rules.model_name import reported_model

TYPE_CHECKING = False  # typing is not loaded for the status line: mypy reads this block, Python does not
if TYPE_CHECKING:
    from typing import Any

    # A call in the cache: [time ns, input, output, cache read, cache write, 5m, 1h, reasoning,
    # model, cost or None, priced (0/1)]
    _Call = list[Any]

__all__ = ["SessionRead", "read_session", "stamp_ns", "PRICES_FILE"]

PRICES_FILE = "prices.memo.json"  # beside the sessions' caches (a session's name has no dot): price.py

_TOOL_USE_ID = b'"tool_use_id":'
_MAX_READ = 64 << 20  # bytes read per file and run at most (a first run on a huge session reads it in parts)
_CACHE_VERSION = 3  # 3: a file that shrank or was replaced drops the calls found in it (2 kept them)
_DIGITS = frozenset(b"0123456789")


def stamp_ns(value: object) -> int:
    """A transcript timestamp as Claude Code writes it (2026-01-10T21:35:24.654Z) -> Unix ns,
    computed here (read.parse_time loads calendar and datetime: more than the whole line costs);
    any other shape goes to parse_timestamp, the rule (tests hold the two equal). 0: none."""
    if not isinstance(value, str) or len(value) != 24 or value[23] != "Z" or value[10] != "T" \
            or not all(ord(value[i]) in _DIGITS for i in (0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 22)):
        from ccotel.read.parse_time import parse_timestamp

        return parse_timestamp(value) or 0
    y, m, d = int(value[0:4]), int(value[5:7]), int(value[8:10])
    if y < 1970 or not 1 <= m <= 12 or not 1 <= d <= 28 or value[11:13] > "23" or value[14:16] > "59" \
            or value[17:19] > "59":  # the parser's checks (days past the 28th too: month lengths)
        from ccotel.read.parse_time import parse_timestamp

        return parse_timestamp(value) or 0
    # days from 1970-01-01 of a proleptic Gregorian date (the usual "days from civil" arithmetic)
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    days = era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468
    seconds = days * 86400 + int(value[11:13]) * 3600 + int(value[14:16]) * 60 + int(value[17:19])
    return seconds * 1_000_000_000 + int(value[20:23]) * 1_000_000


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


def _fresh() -> dict[str, Any]:
    return {"v": _CACHE_VERSION, "files": {}, "calls": {}, "pending": {}}


def _load_cache(path: str | None) -> dict[str, Any]:
    """The cache at ``path``, or an empty one if there is none or it is not of the cache's shape."""
    if path:
        try:
            with open(path, "rb") as f:
                doc = loads(f.read())
            if _well_formed(doc):
                return doc  # type: ignore[no-any-return]
        except (OSError, ValueError):
            pass
    return _fresh()


def _well_formed(doc: Any) -> bool:
    """The cache's shape: files [inode, offset, message id, key], calls of 11 fields, tool calls
    [name, ns]. (A value of the wrong type inside fails in read_session: read from the start.)"""
    if not isinstance(doc, dict) or doc.get("v") != _CACHE_VERSION:
        return False
    files, calls, pending = doc.get("files"), doc.get("calls"), doc.get("pending")
    return isinstance(files, dict) and isinstance(calls, dict) and isinstance(pending, dict) \
        and all(type(f) is list and len(f) == 4 and type(f[0]) is int and type(f[1]) is int for f in files.values()) \
        and all(type(c) is list and len(c) == 11 for c in calls.values()) \
        and all(type(t) is list and len(t) == 2 for t in pending.values())


def _started_over(files: dict[str, list[Any]], paths: list[str]) -> bool:
    """Has a file the cache read shrunk, been replaced (another inode) or gone? Then calls the cache
    found in it may be gone too: the session is read from the start."""
    for path, state in files.items():
        try:
            st = os.stat(path)
        except OSError:
            return True
        if path not in paths or st.st_ino != state[0] or st.st_size < state[1]:
            return True
    return False


def _save_cache(path: str | None, doc: dict[str, Any]) -> None:
    if path:
        save(path, doc)  # none kept: the next run reads the files again


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
    ts = stamp_ns(obj.get("timestamp"))
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
        with open_regular(path) as f:
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
            _results(line, pending)
        if b'"assistant"' not in line:
            continue
        try:
            obj = loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("type") == "assistant":
            _take_assistant(obj, calls, pending, last)
    return [st.st_ino, offset + end, *last]


def _results(line: bytes, pending: dict[str, list[Any]]) -> None:
    """Drop the tool calls a line holds results of (found by their ids, the line not decoded)."""
    at = line.find(_TOOL_USE_ID)
    while at >= 0:
        start = line.find(b'"', at + len(_TOOL_USE_ID)) + 1
        end = line.find(b'"', start)
        if start <= 0 or end < 0:
            return
        pending.pop(line[start:end].decode("utf-8", "replace"), None)
        at = line.find(_TOOL_USE_ID, end)


def _whole(line: bytes) -> bool:
    """Is this a whole JSON value (not a line still being written)?"""
    try:
        loads(line)
    except ValueError:
        return False
    return True


def read_session(transcript: str, session_id: str, cache_path: str | None) -> SessionRead:
    """The session's calls and waiting tool calls, read since the cached run (new calls priced)."""
    paths = _session_files(transcript, session_id)
    doc = _load_cache(cache_path)
    if doc["files"] and _started_over(doc["files"], paths):
        doc = _fresh()
    try:
        return _read(doc, paths, cache_path)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError):
        return _read(_fresh(), paths, cache_path)  # a cache entry of the wrong type: read from the start


def _read(doc: dict[str, Any], paths: list[str], cache_path: str | None) -> SessionRead:
    files: dict[str, list[Any]] = doc["files"]
    calls: dict[str, _Call] = doc["calls"]
    pending: dict[str, list[Any]] = doc["pending"]
    changed = False
    for path in paths:
        new = _read_file(path, files.get(path), calls, pending)
        if new is not None and new != files.get(path):
            files[path] = new
            changed = True
    unpriced = [c for c in calls.values() if not c[10]]
    if unpriced:
        from ccotel.commands.statusline.price import PriceMemo  # only for calls this cache has not priced yet

        memo = PriceMemo(os.path.join(os.path.dirname(cache_path), PRICES_FILE) if cache_path else None)
        for c in unpriced:
            c[9] = memo.cost_of(c[8], c[1:8], c[0] or None)
            c[10] = 1
        memo.save()
    if changed or unpriced:
        _save_cache(cache_path, doc)
    return SessionRead(calls, pending)
