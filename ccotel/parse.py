"""Parse stage: one physical transcript line -> zero or more typed Entries.

Unknown line types and fields are normal (Claude Code adds them between versions).
Anything that cannot be read becomes a named error reason, counted by the caller;
the rest of the line and the file are still processed.
"""

from __future__ import annotations

import calendar
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import orjson

from .records import Block, Entry, Usage

__all__ = ["ParseResult", "parse_line", "parse_timestamp", "text_key", "ERROR_REASONS"]

# Every reason a line or a field can be rejected for; the metric label set is this tuple.
ERROR_REASONS = (
    "invalid_utf8",
    "malformed_json",
    "not_an_object",
    "line_too_long",
    "bad_field",
    "bad_timestamp",
    "nul_bytes",
)

# How much of a user text is kept to classify it when content capture is off.
_CLASSIFY_PREFIX = 80
_TASK_TOOLS = frozenset({"Task", "Agent"})
_decoder = json.JSONDecoder()


@dataclass
class ParseResult:
    entries: list[Entry] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def text_key(text: str) -> str:
    """A short stable digest of a text, used to link inline sidechains to their Task prompt."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def parse_line(data: bytes, offset: int, capture_content: bool = False) -> ParseResult:
    result = ParseResult()
    if not data.strip():
        return result
    try:
        objs: list[Any] = [orjson.loads(data)]
    except orjson.JSONDecodeError:
        objs = _decode_glued(data, result)
    for obj in objs:
        if not isinstance(obj, dict):
            result.errors.append("not_an_object")
            continue
        entry = to_entry(obj, offset, capture_content, result.errors)
        if entry is not None:
            result.entries.append(entry)
    return result


def _decode_glued(data: bytes, result: ParseResult) -> list[Any]:
    """Slow path: objects glued on one line (a summary appended without a newline), or garbage.

    Keeps every object that decodes; whatever does not is one counted error.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        result.errors.append("invalid_utf8")
        text = data.decode("utf-8", "replace")
    if "\x00" in text:
        result.errors.append("nul_bytes")
        text = text.replace("\x00", "")
    objs: list[Any] = []
    pos, n = 0, len(text)
    while pos < n:
        while pos < n and text[pos] in " \t\r":
            pos += 1
        if pos >= n:
            break
        try:
            obj, pos = _decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            result.errors.append("malformed_json")
            # Resynchronise on the next object start so a later glued object is still kept.
            nxt = text.find('{"', pos + 1)
            if nxt < 0:
                break
            pos = nxt
            continue
        objs.append(obj)
    return objs


def parse_timestamp(value: Any) -> int | None:
    """ISO-8601 as Claude Code writes it (2025-06-01T12:34:56.789Z) -> Unix ns."""
    if not isinstance(value, str) or len(value) < 19:
        return None
    try:
        if value[4] != "-" or value[10] not in "T ":
            return None
        secs = calendar.timegm(
            (int(value[0:4]), int(value[5:7]), int(value[8:10]),
             int(value[11:13]), int(value[14:16]), int(value[17:19]), 0, 0, 0)
        )
        frac_ns = 0
        rest = value[19:]
        if rest.startswith("."):
            digits = ""
            for ch in rest[1:]:
                if not ch.isdigit():
                    break
                digits += ch
            rest = rest[1 + len(digits):]
            frac_ns = int((digits + "000000000")[:9]) if digits else 0
        if rest and rest not in ("Z", "z"):
            sign = 1 if rest[0] == "+" else -1 if rest[0] == "-" else 0
            if sign == 0 or len(rest) < 6:
                return None
            secs -= sign * (int(rest[1:3]) * 3600 + int(rest[4:6]) * 60)
        return secs * 1_000_000_000 + frac_ns
    except (ValueError, IndexError):
        return None


def _str(obj: dict[str, Any], key: str, errors: list[str]) -> str | None:
    v = obj.get(key)
    if v is None or isinstance(v, str):
        return v
    errors.append("bad_field")
    return None


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


def _usage(v: Any, errors: list[str]) -> Usage | None:
    if v is None:
        return None
    if not isinstance(v, dict):
        errors.append("bad_field")
        return None
    vals = []
    for key in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
        raw = v.get(key)
        n = _int(raw) if raw is not None else 0
        if n is None or n < 0:
            errors.append("bad_field")
            n = 0
        vals.append(n)
    c5 = c1 = 0
    cc = v.get("cache_creation")
    if isinstance(cc, dict):
        c5 = max(_int(cc.get("ephemeral_5m_input_tokens")) or 0, 0)
        c1 = max(_int(cc.get("ephemeral_1h_input_tokens")) or 0, 0)
    return Usage(vals[0], vals[1], vals[2], vals[3], c5, c1)


def _text_of(content: Any) -> str | None:
    """The text of a tool_result or text block's content (string or list of text blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text") for b in content if isinstance(b, dict) and isinstance(b.get("text"), str)]
        return "\n".join(parts) if parts else None
    return None


def _keep_text(text: str | None, capture: bool) -> str | None:
    if text is None or capture:
        return text
    return text[:_CLASSIFY_PREFIX]


def _blocks(content: Any, capture: bool, errors: list[str]) -> tuple[Block, ...]:
    if not isinstance(content, list):
        errors.append("bad_field")
        return ()
    out: list[Block] = []
    for b in content:
        if not isinstance(b, dict):
            errors.append("bad_field")
            continue
        btype = b.get("type")
        if not isinstance(btype, str):
            errors.append("bad_field")
            continue
        if btype == "tool_use":
            tid, name = b.get("id"), b.get("name")
            if not isinstance(tid, str) or not isinstance(name, str):
                errors.append("bad_field")
                continue
            out.append(Block("tool_use", id=tid, name=name, input=_tool_input(name, b.get("input"), capture)))
        elif btype == "tool_result":
            tid = b.get("tool_use_id")
            if not isinstance(tid, str):
                errors.append("bad_field")
                continue
            text = _text_of(b.get("content"))
            out.append(Block("tool_result", id=tid, is_error=b.get("is_error") is True, text=_keep_text(text, capture)))
        elif btype == "text":
            text = b.get("text")
            out.append(Block("text", text=_keep_text(text if isinstance(text, str) else None, capture)))
        else:
            out.append(Block(btype))
    return tuple(out)


def _tool_input(name: str, value: Any, capture: bool) -> Any:
    """Keep a tool's input only where assembly needs it (Task linking) or content capture is on."""
    if capture:
        return value
    if name in _TASK_TOOLS and isinstance(value, dict):
        prompt = value.get("prompt")
        return {
            "subagent_type": value.get("subagent_type") if isinstance(value.get("subagent_type"), str) else None,
            "run_in_background": value.get("run_in_background") is True,
            "prompt_key": text_key(prompt) if isinstance(prompt, str) else None,
        }
    return None


def _tool_use_result(v: Any) -> dict[str, Any] | None:
    """Only the subagent-related fields of toolUseResult are kept; the rest can be megabytes."""
    if not isinstance(v, dict):
        return None
    keep = {}
    for key in ("agentId", "agentType", "status", "isAsync", "totalDurationMs", "totalTokens", "interrupted"):
        if key in v:
            keep[key] = v[key]
    u = v.get("usage")
    if isinstance(u, dict):
        keep["usage"] = u
    return keep


def to_entry(obj: dict[str, Any], offset: int, capture: bool, errors: list[str]) -> Entry | None:
    etype = obj.get("type")
    if not isinstance(etype, str):
        errors.append("bad_field")
        return None
    ts_raw = obj.get("timestamp")
    ts = parse_timestamp(ts_raw)
    if ts is None and ts_raw is not None:
        errors.append("bad_timestamp")
    kw: dict[str, Any] = dict(
        type=etype,
        offset=offset,
        uuid=_str(obj, "uuid", errors),
        parent_uuid=_str(obj, "parentUuid", errors),
        logical_parent_uuid=_str(obj, "logicalParentUuid", errors),
        session_id=_str(obj, "sessionId", errors),
        timestamp_ns=ts,
        is_sidechain=obj.get("isSidechain") is True,
        is_meta=obj.get("isMeta") is True,
        is_compact_summary=obj.get("isCompactSummary") is True,
        agent_id=_str(obj, "agentId", errors),
        version=_str(obj, "version", errors),
        cwd=_str(obj, "cwd", errors),
        git_branch=_str(obj, "gitBranch", errors),
        entrypoint=_str(obj, "entrypoint", errors),
        subtype=_str(obj, "subtype", errors),
    )
    if etype == "assistant":
        _assistant(obj, kw, capture, errors)
    elif etype == "user":
        _user(obj, kw, capture, errors)
    elif etype == "system":
        _system(obj, kw, errors)
    elif etype == "progress":
        data = obj.get("data")
        if isinstance(data, dict):
            kw["progress_type"] = data.get("type") if isinstance(data.get("type"), str) else None
            kw["progress_agent_id"] = data.get("agentId") if isinstance(data.get("agentId"), str) else None
        kw["parent_tool_use_id"] = _str(obj, "parentToolUseID", errors)
    return Entry(**kw)


def _assistant(obj: dict[str, Any], kw: dict[str, Any], capture: bool, errors: list[str]) -> None:
    kw["request_id"] = _str(obj, "requestId", errors)
    kw["is_api_error"] = obj.get("isApiErrorMessage") is True
    msg = obj.get("message")
    if msg is None:
        return
    if not isinstance(msg, dict):
        errors.append("bad_field")
        return
    kw["message_id"] = _str(msg, "id", errors)
    kw["model"] = _str(msg, "model", errors)
    kw["stop_reason"] = _str(msg, "stop_reason", errors)
    kw["usage"] = _usage(msg.get("usage"), errors)
    content = msg.get("content")
    if isinstance(content, str):
        kw["blocks"] = (Block("text", text=_keep_text(content, capture)),)
    elif content is not None:
        kw["blocks"] = _blocks(content, capture, errors)
    if kw["is_api_error"]:
        text = next((b.text for b in kw["blocks"] if b.type == "text" and b.text), None)
        kw["error_text"] = (text or "")[:200] or None


def _user(obj: dict[str, Any], kw: dict[str, Any], capture: bool, errors: list[str]) -> None:
    msg = obj.get("message")
    if isinstance(msg, dict):
        content = msg.get("content")
        if isinstance(content, str):
            kw["content_is_string"] = True
            kw["blocks"] = (Block("text", text=_keep_text(content, capture), id=text_key(content)),)
        elif content is not None:
            blocks = _blocks(content, capture, errors)
            # A sidechain root's prompt may be written as text blocks; key it for Task linking.
            first = content[0] if isinstance(content, list) and content else None
            if blocks and blocks[0].type == "text" and isinstance(first, dict) and isinstance(first.get("text"), str):
                blocks = (Block("text", text=blocks[0].text, id=text_key(first["text"])),) + blocks[1:]
            kw["blocks"] = blocks
    elif msg is not None:
        errors.append("bad_field")
    tur = obj.get("toolUseResult")
    if isinstance(tur, str):
        kw["tool_use_result_error"] = tur[:200]
    else:
        kw["tool_use_result"] = _tool_use_result(tur)
    kw["source_tool_assistant_uuid"] = _str(obj, "sourceToolAssistantUUID", errors)


def _system(obj: dict[str, Any], kw: dict[str, Any], errors: list[str]) -> None:
    meta = obj.get("compactMetadata")
    if isinstance(meta, dict):
        kw["compact_trigger"] = meta.get("trigger") if isinstance(meta.get("trigger"), str) else None
        kw["compact_pre_tokens"] = _int(meta.get("preTokens"))
    kw["retry_attempt"] = _int(obj.get("retryAttempt"))
    err = obj.get("error")
    if isinstance(err, dict):
        kw["error_status"] = _int(err.get("status"))
