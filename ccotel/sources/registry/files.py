"""Reading an agent registry's two files: ``.active-pids.json`` (the entries) and the front matter of
``agent-responses/<agentId>.md``. Parsing is pure and lenient: what is wrong comes back as a
reason (counted as ``ccotel_registry_bad_input``), never as an exception.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import orjson

from ccotel.read.parse_time import parse_timestamp

__all__ = ["ACTIVE_PIDS", "HEAD_BYTES", "JSON_BYTES", "RESPONSES", "AgentEntry", "FrontMatter", "dir_sig",
           "file_sig", "parse_active_pids", "parse_front_matter"]

ACTIVE_PIDS = ".active-pids.json"
RESPONSES = "agent-responses"

HEAD_BYTES = 64 << 10  # front matter longer than this is not front matter
JSON_BYTES = 64 << 20  # an .active-pids.json larger than this is not read


@dataclass(frozen=True)
class AgentEntry:
    """One entry of ``.active-pids.json``."""

    agent_id: str
    pid: int | None
    depth: int | None
    parent_id: str | None
    agent_type: str | None


@dataclass(frozen=True)
class FrontMatter:
    """The front matter of ``agent-responses/<agentId>.md``. Instructions are read past, never kept
    (prompt text holds secrets; spans carry no content)."""

    status: str | None  # in-progress | done | failed (lower case); None: not written yet
    task: str | None = None
    started_ns: int | None = None
    ended_ns: int | None = None
    depth: int | None = None
    parent: str | None = None



def parse_active_pids(data: bytes) -> tuple[dict[str, AgentEntry], list[str]]:
    """The entries of ``.active-pids.json`` and what was wrong (reasons). A document that does not
    parse gives no entries and one reason: the caller keeps its last good reading."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return {}, ["malformed_json" if data.strip() else "empty_file"]
    if not isinstance(doc, dict):
        return {}, ["not_an_object"]
    out: dict[str, AgentEntry] = {}
    errors: list[str] = []
    for agent_id, v in doc.items():
        if not isinstance(v, dict) or not agent_id:
            errors.append("bad_entry")
            continue
        pid = v.get("pid")
        if pid is not None and (not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0):
            errors.append("bad_pid")
            pid = None
        out[agent_id] = AgentEntry(agent_id, pid, _int(v.get("depth")), _text(v.get("parentId")),
                                   _text(v.get("agentType")))
    return out, errors


def parse_front_matter(head: bytes) -> FrontMatter | str:
    """The front matter at the start of an agent's ``.md``, or why there is none (a reason):
    ``no_front_matter``, ``partial_front_matter`` (no closing ``---`` yet: mid-write),
    ``front_matter_too_long``, ``invalid_utf8``. Lenient where YAML is strict: ``Key: value`` lines
    at the left margin, anything else continues the value before (multi-line Instructions)."""
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:
            return "invalid_utf8"
        text = head[: exc.start].decode("utf-8")  # a character cut by the read limit or mid-write
    lines = text.split("\n")
    if not lines or lines[0].strip() != "---":
        return "no_front_matter"
    fields: dict[str, str] = {}
    key: str | None = None
    for line in lines[1:-1] if len(lines) > 1 else []:
        if line.strip() == "---":
            return _front_matter(fields)
        name, sep, value = line.partition(":")
        if sep and name and not name[0].isspace() and name.replace("-", "").replace("_", "").isalnum():
            key = name.strip().lower()
            fields[key] = value.strip()
        elif key is not None:
            fields[key] = (fields[key] + "\n" + line.strip()).strip()
    # The last element may be a line still being written: never taken as the closing one.
    return "front_matter_too_long" if len(head) >= HEAD_BYTES else "partial_front_matter"


def _front_matter(fields: dict[str, str]) -> FrontMatter:
    status = _unquote(fields.get("status", "")).lower() or None
    return FrontMatter(
        status=status,
        task=_unquote(fields.get("task", "")) or None,
        started_ns=_time(fields.get("started")),
        ended_ns=_time(fields.get("ended")),
        depth=_int(_unquote(fields.get("depth", ""))),
        parent=_parent(fields.get("parentagent")),
    )


def _unquote(v: str) -> str:
    v = v.strip()
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
        return v[1:-1]
    return v


def _parent(v: str | None) -> str | None:
    v = _unquote(v or "")
    return None if v.lower() in ("", "null", "none", "~", "-") else v


def _time(v: str | None) -> int | None:
    """ISO-8601 (as Claude Code writes it, or with an offset), or Unix seconds / milliseconds."""
    v = _unquote(v or "")
    if not v or v.lower() in ("null", "none", "~"):
        return None
    if v.replace(".", "", 1).isdigit():
        num = float(v)
        return int(num * 1e6) if num > 1e11 else int(num * 1e9)  # milliseconds past 1973, or seconds
    return parse_timestamp(v.replace(" ", "T", 1) if len(v) > 10 and v[10] == " " else v)


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().isdigit():
        return int(v.strip())
    return None


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


def file_sig(path: str) -> tuple[int, int, int] | None:
    """(inode, size, mtime_ns): a file read again only when it changes."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def dir_sig(path: str) -> tuple[int, int] | None:
    """(inode, mtime_ns): a directory listed again only when an entry is added or removed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns
