"""Parse stage: one physical transcript line -> zero or more typed Entries.

Unknown line types and fields are normal (Claude Code adds them between versions).
Anything that cannot be read becomes a named error reason, counted by the caller;
the rest of the line and the file are still processed.
"""

from __future__ import annotations

import calendar
import codecs
import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Annotated, Any

import msgspec
import orjson

from ccotel.records import AdvisorCall, Block, Entry, Usage
from ccotel.records import fast_constructor as _fast_constructor
from ccotel.rules import transcript as rules

__all__ = ["ParseResult", "fast_entry", "parse_line", "parse_timestamp", "text_key", "ERROR_REASONS"]

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
_TASK_TOOLS = rules.TASK_TOOLS
_decoder = json.JSONDecoder()
_STR_OR_NONE = frozenset((str, type(None)))
_BOOL_OR_NONE = frozenset((bool, type(None)))


@dataclass
class ParseResult:
    entries: list[Entry] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def text_key(text: str) -> str:
    """A short stable digest of a text, used to link inline sidechains to their Task prompt."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def parse_line(data: bytes, offset: int, capture_content: bool = False, fast: bool = True) -> ParseResult:
    """The entries of one physical line and what was wrong with it. ``fast=False``: always the
    checked path (the reference the typed fast path is tested against)."""
    result = ParseResult()
    if not data.strip():
        return result
    if fast:
        entry = fast_entry(data, offset, capture_content)
        if entry is not None:
            result.entries.append(entry)
            return result
    try:
        objs: list[Any] = [orjson.loads(data)]
    except orjson.JSONDecodeError:
        entry = _repaired_entry(data, offset, capture_content)
        if entry is not None:
            result.errors.append("invalid_utf8")
            result.entries.append(entry)
            return result
        try:
            objs = _decode_glued(data, result)
        except (RecursionError, ValueError):  # nesting deeper than any decoder goes, 4,300-digit ints
            result.errors.append("malformed_json")
            return result
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
    while (pos := _skip_blank(text, pos)) < n:
        try:
            obj, pos = _decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            # One counted error per broken stretch, then resynchronise on a glued object.
            result.errors.append("malformed_json")
            nxt, tail = _resync(text, pos)
            if tail is not None:
                objs.extend(tail)
                break
            if nxt is None:
                break
            pos = nxt
            continue
        objs.append(obj)
    return [_clean_surrogates(o) for o in objs]


def _resync(text: str, pos: int, limit: int = 256) -> tuple[int | None, list[Any] | None]:
    """Where decoding can go on after a broken stretch that starts at pos.

    A transcript line starts with {"parentUuid"; objects nested in a broken line (a progress
    line's copy of a subagent message) never do. So the first such start that holds a whole
    object wins: (its position, None). Failing that, the first start of any kind from which
    everything up to the end decodes (a summary glued at the end): (None, those objects).
    """
    candidates = []
    start = pos
    for _ in range(limit):
        nxt = text.find('{"', start + 1)
        if nxt < 0:
            break
        candidates.append(nxt)
        start = nxt
    for c in candidates:
        if text.startswith('{"parentUuid"', c):
            try:
                _decoder.raw_decode(text, c)
                return c, None
            except json.JSONDecodeError:
                continue
    for c in candidates:
        found = _decode_all(text, c)
        if found is not None:
            return None, found
    return None, None


def _skip_blank(text: str, pos: int) -> int:
    n = len(text)
    while pos < n and text[pos] in " \t\r":
        pos += 1
    return pos


def _decode_all(text: str, pos: int) -> list[Any] | None:
    """Every JSON value from pos to the end, or None if any part does not decode."""
    out = []
    try:
        while (pos := _skip_blank(text, pos)) < len(text):
            obj, pos = _decoder.raw_decode(text, pos)
            out.append(obj)
    except (json.JSONDecodeError, RecursionError):
        return None
    return out


def is_complete_json(data: bytes) -> bool:
    """The bytes are whole JSON values from first to last byte (one object, or several glued)."""
    try:
        orjson.loads(data)
        return True
    except orjson.JSONDecodeError:
        pass
    try:
        return _decode_all(data.decode("utf-8"), 0) is not None
    except (UnicodeDecodeError, ValueError):
        return False


def _clean_surrogates(v: Any) -> Any:
    """Lone surrogates (Node cutting a string inside an emoji) become U+FFFD: valid UTF-8 downstream."""
    if isinstance(v, str):
        return v.encode("utf-8", "replace").decode("utf-8") if _has_surrogate(v) else v
    if isinstance(v, dict):
        return {_clean_surrogates(k): _clean_surrogates(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_clean_surrogates(x) for x in v]
    return v


def _has_surrogate(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


_MAX_INT64 = 1 << 63

# Unix ns at the start of a 'YYYY-MM-DDTHH:MM' (a timestamp's first 16 characters), for the
# prefixes of timestamps the general parser accepted in Claude Code's shape; bounded.
_MINUTE_NS: dict[str, int] = {}
_MINUTE_NS_MAX = 4096
_LAST_MINUTE_NS = _MAX_INT64 - 100_000_000_000  # a minute's start plus 99.999 s still fits


def parse_timestamp(value: Any) -> int | None:
    """ISO-8601 as Claude Code writes it (2025-06-01T12:34:56.789Z) -> Unix ns.

    The usual shape costs a dict lookup and one int(): the minute's start is cached the first
    time the general parser reads a timestamp of that minute, and the seconds and milliseconds
    are added (timegm is linear in them). Only ASCII digits take this path (int() also reads
    '+5', ' 5' and other scripts' digits): anything else goes to the general parser, so both
    give the same value for every string (tests/test_parse_timestamp_fast.py)."""
    if type(value) is str and len(value) == 24:
        minute = _MINUTE_NS.get(value[:16])
        if minute is not None and value[19] == "." and value[23] in "Zz":
            frac = value[17:19] + value[20:23]  # seconds and milliseconds
            if frac.isdigit() and frac.isascii():
                return minute + int(frac) * 1_000_000
    ns = _parse_timestamp(value)
    if ns is not None and type(value) is str and len(value) == 24:
        _remember_minute(value, ns)
    return ns


def _remember_minute(value: str, ns: int) -> None:
    """Cache the start of the minute of a 24-character timestamp the general parser accepted."""
    frac = value[17:19] + value[20:23]
    if not (value[19] == "." and value[23] in "Zz" and frac.isdigit() and frac.isascii()):
        return
    minute = ns - int(frac) * 1_000_000
    if 0 <= minute <= _LAST_MINUTE_NS:
        if len(_MINUTE_NS) >= _MINUTE_NS_MAX:
            _MINUTE_NS.clear()
        _MINUTE_NS[value[:16]] = minute


def _parse_timestamp(value: Any) -> int | None:
    """The general parser (no caches): the reference parse_timestamp's fast path is held to."""
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
        ns = secs * 1_000_000_000 + frac_ns
        return ns if 0 <= ns < _MAX_INT64 else None  # before 1970 or past 2262: not a real time
    except (ValueError, IndexError):
        return None


def _str(obj: dict[str, Any], key: str, errors: list[str]) -> str | None:
    v = obj.get(key)
    if v is None or isinstance(v, str):
        return v
    errors.append("bad_field")
    return None


def _str_value(v: Any, errors: list[str]) -> str | None:
    if v is None or isinstance(v, str):
        return v
    errors.append("bad_field")
    return None


def _int(v: Any) -> int | None:
    """A count: a non-negative integer that fits 63 bits (OTLP int64), else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, float) and v.is_integer() and abs(v) < _MAX_INT64:
        v = int(v)
    if isinstance(v, int) and 0 <= v < _MAX_INT64:
        return v
    return None


def _bool(obj: dict[str, Any], key: str, errors: list[str]) -> bool:
    v = obj.get(key)
    if v is None or v is False:
        return False
    if v is True:
        return True
    errors.append("bad_field")
    return False


_NO_USAGE: tuple[Usage | None, tuple[AdvisorCall, ...]] = (None, ())


def _usage(v: Any, errors: list[str]) -> tuple[Usage | None, tuple[AdvisorCall, ...]]:
    if v is None:
        return _NO_USAGE
    if not isinstance(v, dict):
        errors.append("bad_field")
        return _NO_USAGE
    get = v.get
    vals: list[Any] = [get("input_tokens"), get("output_tokens"), get("cache_read_input_tokens"),
                       get("cache_creation_input_tokens")]  # raw JSON values: all ints once checked below
    if not (type(vals[0]) is int and type(vals[1]) is int and type(vals[2]) is int and type(vals[3]) is int
            and 0 <= vals[0] < _MAX_INT64 and 0 <= vals[1] < _MAX_INT64 and 0 <= vals[2] < _MAX_INT64
            and 0 <= vals[3] < _MAX_INT64):
        for i, raw in enumerate(vals):
            n = _int(raw) if raw is not None else 0
            if n is None:
                errors.append("bad_field")
                n = 0
            vals[i] = n
    c5 = c1 = 0
    cc = get("cache_creation")
    if type(cc) is dict and type(c5 := cc.get("ephemeral_5m_input_tokens", 0)) is int \
            and type(c1 := cc.get("ephemeral_1h_input_tokens", 0)) is int and 0 <= c5 < _MAX_INT64 \
            and 0 <= c1 < _MAX_INT64:
        pass  # the usual shape: both plain counts (None and odd values take the checked path)
    elif isinstance(cc, dict):
        split = []
        for key in ("ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens"):
            raw = cc.get(key)
            n = _int(raw) if raw is not None else 0
            if n is None:
                errors.append("bad_field")
                n = 0
            split.append(n)
        c5, c1 = split
    elif cc is not None:
        errors.append("bad_field")
    details = get("output_tokens_details")
    thinking = _int(details.get("thinking_tokens")) if type(details) is dict else None
    iterations = get("iterations")
    iters = [_iteration(i, errors) for i in iterations] if type(iterations) is list else []
    return _usage_record(vals[0], vals[1], vals[2], vals[3], c5, c1, thinking or 0,
                         [i for i in iters if i is not None])


_Iteration = tuple[str | None, str | None, int, int, int, int, int, int]


def _iteration(v: Any, errors: list[str]) -> _Iteration | None:
    """One ``usage.iterations`` entry: (type, model, input, output, cache read, cache creation, 5m, 1h)."""
    if not isinstance(v, dict):
        errors.append("bad_field")
        return None
    counts = []
    for key in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
        n = _int(v.get(key, 0))
        if n is None:
            errors.append("bad_field")
            return None
        counts.append(n)
    cc = v.get("cache_creation")
    split = [_int(cc.get(k, 0)) if isinstance(cc, dict) else 0
             for k in ("ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens")]
    t, model = v.get("type"), v.get("model")
    return (t if isinstance(t, str) else None, model if isinstance(model, str) else None,
            counts[0], counts[1], counts[2], counts[3], split[0] or 0, split[1] or 0)


def _usage_record(inp: int, out: int, cache_read: int, cache_creation: int, c5: int, c1: int,
                  thinking: int, iterations: list[_Iteration]) -> tuple[Usage, tuple[AdvisorCall, ...]]:
    """The one builder of a call's Usage and its advisor calls, for both parse paths (the rules
    are rules.py's); the iterations are read once for both."""
    advisors: tuple[AdvisorCall, ...] = ()
    if iterations:
        c5, c1 = rules.cache_write_split(c5, c1, cache_creation, ((i[0], i[5], i[6], i[7]) for i in iterations))
        advisors = rules.advisor_calls(iterations)
    return _new_usage({"input_tokens": inp, "output_tokens": out, "cache_read_input_tokens": cache_read,
                       "cache_creation_input_tokens": cache_creation, "cache_creation_5m": c5,
                       "cache_creation_1h": c1, "reasoning_tokens": thinking}), advisors


def _text_of(content: Any) -> str | None:
    """The text of a tool_result or text block's content (string or list of text blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [t for b in content if isinstance(b, dict) and isinstance(t := b.get("text"), str)]
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
            out.append(_new_block({"type": "tool_use", "id": tid, "name": name,
                                   "input": _tool_input(name, b.get("input"), capture)}))
        elif btype == "tool_result":
            tid = b.get("tool_use_id")
            if not isinstance(tid, str):
                errors.append("bad_field")
                continue
            text = _text_of(b.get("content"))
            out.append(_new_block({"type": "tool_result", "id": tid, "is_error": _bool(b, "is_error", errors),
                                   "text": _keep_text(text, capture)}))
        elif btype == "text":
            text = b.get("text")
            out.append(_new_block({"type": "text", "text": _keep_text(text if isinstance(text, str) else None,
                                                                       capture)}))
        else:
            out.append(_new_block({"type": btype}))
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
    get = obj.get
    etype = get("type")
    if not isinstance(etype, str):
        errors.append("bad_field")
        return None
    ts_raw = get("timestamp")
    ts = parse_timestamp(ts_raw)
    if ts is None and ts_raw is not None:
        errors.append("bad_timestamp")
    strs: tuple[str | None, ...] = (get("uuid"), get("parentUuid"), get("logicalParentUuid"), get("sessionId"),
                                    get("agentId"), get("version"), get("cwd"), get("gitBranch"), get("entrypoint"),
                                    get("subtype"))
    if not _STR_OR_NONE.issuperset(map(type, strs)):
        strs = tuple(_str_value(v, errors) for v in strs)
    flags = (get("isSidechain"), get("isMeta"), get("isCompactSummary"))
    if not _BOOL_OR_NONE.issuperset(map(type, flags)):
        flags = (_bool(obj, "isSidechain", errors), _bool(obj, "isMeta", errors),
                 _bool(obj, "isCompactSummary", errors))
    kw: dict[str, Any] = {
        "is_sidechain": flags[0] is True,
        "is_meta": flags[1] is True,
        "is_compact_summary": flags[2] is True,
        "type": etype,
        "offset": offset,
        "uuid": strs[0],
        "parent_uuid": strs[1],
        "logical_parent_uuid": strs[2],
        "session_id": strs[3],
        "timestamp_ns": ts,
        "agent_id": strs[4],
        "version": strs[5],
        "cwd": strs[6],
        "git_branch": strs[7],
        "entrypoint": strs[8],
        "subtype": strs[9],
    }
    if etype == "assistant":
        _assistant(obj, kw, capture, errors)
    elif etype == "user":
        _user(obj, kw, capture, errors)
    elif etype == "system":
        _system(obj, kw, errors)
    elif etype == "progress":
        _progress(obj, kw, errors)
    elif etype == "api-request":
        kw["api_request_id"] = _str(obj, "id", errors)
    elif etype == "cost-state":
        _cost_state(obj, kw, errors)
    return _new_entry(kw)


def _cost_state(obj: dict[str, Any], kw: dict[str, Any], errors: list[str]) -> None:
    """Claude Code's own running cost per model of one process (cumulative, keyed by startTime)."""
    start = obj.get("startTime")
    if isinstance(start, (int, str)) and not isinstance(start, bool):
        kw["process_start"] = str(start)
    usage = obj.get("modelUsage")
    if not isinstance(usage, dict):
        return
    costs = []
    for model, u in usage.items():
        cost = u.get("costUSD") if isinstance(u, dict) else None
        if isinstance(cost, (int, float)) and not isinstance(cost, bool) and 0 <= cost < 1e9:
            costs.append((str(model)[:128], float(cost)))
        else:
            errors.append("bad_field")
    kw["reported_costs"] = tuple(costs)


def _line_fields(kw: dict[str, Any], made_by: Any, request_ref: Any, requested_model: Any, effort: Any) -> None:
    """2.1.3xx assistant-line fields, read the same way by both paths: strings or nothing."""
    for key, v in (("made_by", made_by), ("request_ref", request_ref), ("requested_model", requested_model),
                   ("effort", effort)):
        if isinstance(v, str):
            kw[key] = v


def _assistant(obj: dict[str, Any], kw: dict[str, Any], capture: bool, errors: list[str]) -> None:
    kw["request_id"] = _str(obj, "requestId", errors)
    kw["is_api_error"] = _bool(obj, "isApiErrorMessage", errors)
    _line_fields(kw, obj.get("madeBy"), obj.get("requestRef"), obj.get("requestedModel"), obj.get("effort"))
    msg = obj.get("message")
    if msg is None:
        return
    if not isinstance(msg, dict):
        errors.append("bad_field")
        return
    get = msg.get
    strs = (get("id"), get("model"), get("stop_reason"))
    if _STR_OR_NONE.issuperset(map(type, strs)):
        kw["message_id"], kw["model"], kw["stop_reason"] = strs
    else:
        kw["message_id"] = _str(msg, "id", errors)
        kw["model"] = _str(msg, "model", errors)
        kw["stop_reason"] = _str(msg, "stop_reason", errors)
    kw["usage"], kw["advisors"] = _usage(get("usage"), errors)
    content = msg.get("content")
    if isinstance(content, str):
        kw["blocks"] = (_new_block({"type": "text", "text": _keep_text(content, capture)}),)
    elif content is not None:
        kw["blocks"] = _blocks(content, capture, errors)
    if kw["is_api_error"]:
        text = next((b.text for b in kw.get("blocks", ()) if b.type == "text" and b.text), None)
        kw["error_text"] = (text or "")[:200] or None


def _user(obj: dict[str, Any], kw: dict[str, Any], capture: bool, errors: list[str]) -> None:
    msg = obj.get("message")
    if isinstance(msg, dict):
        content = msg.get("content")
        if isinstance(content, str):
            kw["content_is_string"] = True
            kw["blocks"] = (_new_block({"type": "text", "id": text_key(content),
                                        "text": _keep_text(content, capture)}),)
        elif content is not None:
            blocks = _blocks(content, capture, errors)
            # A sidechain root's prompt may be written as text blocks; key it for Task linking.
            first = content[0] if isinstance(content, list) and content else None
            if blocks and blocks[0].type == "text" and isinstance(first, dict) and isinstance(first.get("text"), str):
                blocks = ((_new_block({"type": "text", "id": text_key(first["text"]), "text": blocks[0].text}),)
                          + blocks[1:])
            kw["blocks"] = blocks
    elif msg is not None:
        errors.append("bad_field")
    tur = obj.get("toolUseResult")
    if isinstance(tur, str):
        kw["tool_use_result_error"] = tur[:200]
    else:
        kw["tool_use_result"] = _tool_use_result(tur)
    kw["source_tool_assistant_uuid"] = _str(obj, "sourceToolAssistantUUID", errors)


def _progress(obj: dict[str, Any], kw: dict[str, Any], errors: list[str]) -> None:
    data = obj.get("data")
    if isinstance(data, dict):
        kw["progress_type"] = data.get("type") if isinstance(data.get("type"), str) else None
        kw["progress_agent_id"] = data.get("agentId") if isinstance(data.get("agentId"), str) else None
    kw["parent_tool_use_id"] = _str(obj, "parentToolUseID", errors)


def _system(obj: dict[str, Any], kw: dict[str, Any], errors: list[str]) -> None:
    meta = obj.get("compactMetadata")
    if isinstance(meta, dict):
        kw["compact_trigger"] = meta.get("trigger") if isinstance(meta.get("trigger"), str) else None
        kw["compact_pre_tokens"] = _int(meta.get("preTokens"))
    kw["retry_attempt"] = _int(obj.get("retryAttempt"))
    err = obj.get("error")
    if isinstance(err, dict):
        kw["error_status"] = _int(err.get("status"))


_new_entry = _fast_constructor(Entry, {"type": "user", "offset": 1, "uuid": "u", "usage": None,
                                       "blocks": (Block("text", text="x"),), "tool_use_result": {"a": 1}})
# The fast path fills an Entry's __dict__ itself when _new_entry may bypass __init__ (checked on
# a probe at import); else it calls Entry(**kw) with the same keys.
_ENTRY_IN_PLACE = _new_entry.__name__ == "make"
# (type and offset have no default: None here, always set; listed so the keys keep the fields' order)
_ENTRY_DEFAULTS: dict[str, Any] = {f.name: None if f.default is dataclasses.MISSING else f.default
                                   for f in dataclasses.fields(Entry)}
_new_object = object.__new__
_new_block = _fast_constructor(Block, {"type": "tool_use", "id": "t", "name": "n", "input": {"k": [1]}})
_new_usage = _fast_constructor(Usage, {"input_tokens": 1, "output_tokens": 2, "cache_read_input_tokens": 3,
                                       "cache_creation_input_tokens": 4, "cache_creation_5m": 5,
                                       "cache_creation_1h": 6, "reasoning_tokens": 7})


# -- the typed fast path -------------------------------------------------------------
#
# Most lines have the usual shape: the fields to_entry reads, each of its usual type. msgspec
# decodes such a line straight into the structs below, skipping what ccotel never reads (tool
# output in toolUseResult, tool inputs, thinking text) without building Python objects for it:
# a line costs 40 % less than orjson.loads + to_entry. A line of any other shape (a field of an
# odd type, a count out of range, glued objects, bad UTF-8...) fails to decode and takes the
# checked path above, which stays the reference: the tests hold both equal on every real line
# and on mutated ones. The fast path never reports an error; anything to_entry would complain
# about makes it step aside. One known difference, in the fast path's favour: an integer of more
# than 4,300 digits in a field ccotel ignores is skipped, where Python's json (the checked path's
# last resort after orjson) refuses the whole line.

_Count = Annotated[int, msgspec.Meta(ge=0, le=_MAX_INT64 - 1)]
_OptStr = str | None
_Kept = str | None | msgspec.UnsetType  # a toolUseResult value kept as is, if present


class _JText(msgspec.Struct):
    text: _OptStr = None


class _JBlock(msgspec.Struct):
    type: str
    id: _OptStr = None
    name: _OptStr = None
    input: msgspec.Raw = msgspec.Raw(b"null")
    tool_use_id: _OptStr = None
    is_error: bool | None = None
    text: Any = None  # a text block's text: only a str is kept (non-str is None, no error)
    content: msgspec.Raw = msgspec.Raw(b"null")  # a tool_result's: decoded by _result_text, often in part


class _JCacheCreation(msgspec.Struct):
    ephemeral_5m_input_tokens: _Count | None = None
    ephemeral_1h_input_tokens: _Count | None = None


class _JIteration(msgspec.Struct):
    type: Any = None
    model: Any = None
    input_tokens: _Count = 0
    output_tokens: _Count = 0
    cache_read_input_tokens: _Count = 0
    cache_creation_input_tokens: _Count = 0
    cache_creation: _JCacheCreation | None = None

    def row(self) -> _Iteration:
        cc = self.cache_creation
        return (self.type if isinstance(self.type, str) else None, self.model if isinstance(self.model, str) else None,
                self.input_tokens, self.output_tokens, self.cache_read_input_tokens,
                self.cache_creation_input_tokens, (cc.ephemeral_5m_input_tokens or 0) if cc else 0,
                (cc.ephemeral_1h_input_tokens or 0) if cc else 0)


class _JUsage(msgspec.Struct):
    input_tokens: _Count | None = None
    output_tokens: _Count | None = None
    cache_read_input_tokens: _Count | None = None
    cache_creation_input_tokens: _Count | None = None
    cache_creation: _JCacheCreation | None = None
    output_tokens_details: Any = None
    iterations: list[_JIteration] | None = None

    def counts(self) -> tuple[int, int, int, int, int, int]:
        """input, output, cache read, cache creation, its 5m and 1h parts, as written (absent: 0).
        With no iterations and no thinking details these are the call's usage (``record``)."""
        cc = self.cache_creation
        return (self.input_tokens or 0, self.output_tokens or 0, self.cache_read_input_tokens or 0,
                self.cache_creation_input_tokens or 0, (cc.ephemeral_5m_input_tokens or 0) if cc is not None else 0,
                (cc.ephemeral_1h_input_tokens or 0) if cc is not None else 0)

    def record(self) -> tuple[Usage, tuple[AdvisorCall, ...]]:
        details = self.output_tokens_details
        thinking = _int(details.get("thinking_tokens")) if type(details) is dict else None
        return _usage_record(*self.counts(), thinking or 0,
                             [i.row() for i in self.iterations] if self.iterations else [])


class _JMessage(msgspec.Struct):
    id: _OptStr = None
    model: _OptStr = None
    stop_reason: _OptStr = None
    usage: _JUsage | None = None
    content: str | list[_JBlock] | None = None


class _JToolUseResult(msgspec.Struct):
    agentId: _Kept = msgspec.UNSET
    agentType: _Kept = msgspec.UNSET
    status: _Kept = msgspec.UNSET
    isAsync: bool | None | msgspec.UnsetType = msgspec.UNSET
    totalDurationMs: _Count | None | msgspec.UnsetType = msgspec.UNSET
    totalTokens: _Count | None | msgspec.UnsetType = msgspec.UNSET
    interrupted: bool | None | msgspec.UnsetType = msgspec.UNSET
    usage: msgspec.Raw = msgspec.Raw(b"null")


class _JLine(msgspec.Struct):
    type: str
    uuid: _OptStr = None
    parentUuid: _OptStr = None
    logicalParentUuid: _OptStr = None
    sessionId: _OptStr = None
    agentId: _OptStr = None
    version: _OptStr = None
    cwd: _OptStr = None
    gitBranch: _OptStr = None
    entrypoint: _OptStr = None
    subtype: _OptStr = None
    timestamp: _OptStr = None
    isSidechain: bool | None = None
    isMeta: bool | None = None
    isCompactSummary: bool | None = None
    requestId: _OptStr = None
    isApiErrorMessage: bool | None = None
    sourceToolAssistantUUID: _OptStr = None
    parentToolUseID: _OptStr = None
    madeBy: Any = None
    requestRef: Any = None
    requestedModel: Any = None
    effort: Any = None
    id: Any = None  # api-request lines
    message: _JMessage | None = None
    toolUseResult: msgspec.Raw = msgspec.Raw(b"null")
    # small objects to_entry reads loosely: decoded by orjson, exactly as the checked path does
    data: msgspec.Raw = msgspec.Raw(b"null")
    compactMetadata: msgspec.Raw = msgspec.Raw(b"null")
    retryAttempt: msgspec.Raw = msgspec.Raw(b"null")
    error: msgspec.Raw = msgspec.Raw(b"null")


_line_decoder = msgspec.json.Decoder(_JLine)
_tool_use_result_decoder = msgspec.json.Decoder(_JToolUseResult)
_str_decoder = msgspec.json.Decoder(str)
_content_decoder = msgspec.json.Decoder(str | list[_JText] | None)
# A character of a JSON string takes at most 12 bytes (an escaped surrogate pair), so the first
# _CLASSIFY_PREFIX characters of a string lie in its first _HEAD_BYTES - 16 bytes (the quote
# included); 16 more leave room to step back from a cut inside an escape or a UTF-8 sequence.
_HEAD_BYTES = 1 + 12 * _CLASSIFY_PREFIX + 16


class _StepAside(Exception):
    """This line is not of the usual shape: the checked path reads it."""


def fast_entry(data: bytes | bytearray, offset: int, capture: bool = False) -> Entry | None:
    """The entry of a line of the usual shape, else None: then ``parse_line(..., fast=False)``
    gives exactly what ``parse_line`` would (the fast path reports no errors, and a blank line
    never decodes). The reader's per-line call: no ParseResult and its lists for most lines."""
    try:
        if not data.isascii():
            _check_utf8(data)  # msgspec does not check the UTF-8 of fields it skips; the checked path counts it
        line = _line_decoder.decode(data)
        return _entry_of(line, offset, capture)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, orjson.JSONDecodeError,
            _StepAside, RecursionError, ValueError):
        return None


_fast_entry = fast_entry  # the name tests/test_parse_fastpath.py knows
_UTF8_PIECE = 256 << 10


def _check_utf8(data: bytes | bytearray) -> None:
    """Raise UnicodeDecodeError unless ``data`` is UTF-8. A long line is decoded a piece at a
    time: a 4 MB line of tool output with one CJK character is a str of 8 MB decoded whole,
    held for nothing."""
    if len(data) <= _UTF8_PIECE:
        data.decode("utf-8")
        return
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(data)
    for start in range(0, len(data), _UTF8_PIECE):
        decoder.decode(view[start:start + _UTF8_PIECE])
    decoder.decode(b"", True)


def _repaired_entry(data: bytes, offset: int, capture: bool) -> Entry | None:
    """The entry of a line whose one fault is invalid UTF-8 (a tool's output cut inside a
    character): what ``_decode_glued`` makes of it (each bad byte U+FFFD, then the line decoded)
    by way of the fast path, so that a 4 MB tool output is neither a Python str (8 MB with one
    U+FFFD in it) nor decoded objects (a worker's peak RSS, issue 15). None: anything else."""
    if data.isascii():
        return None
    repaired = _replace_invalid_utf8(data)
    if repaired == data:
        return None  # valid UTF-8: the line is wrong in some other way
    return fast_entry(repaired, offset, capture)


def _replace_invalid_utf8(data: bytes) -> bytearray:
    """``data.decode("utf-8", "replace").encode()``, a piece at a time (as _check_utf8)."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    view = memoryview(data)
    out = bytearray()
    for start in range(0, len(data), _UTF8_PIECE):
        out += decoder.decode(view[start:start + _UTF8_PIECE]).encode("utf-8")
    out += decoder.decode(b"", True).encode("utf-8")
    return out


def _entry_of(o: _JLine, offset: int, capture: bool) -> Entry:
    ts = parse_timestamp(o.timestamp)
    if ts is None and o.timestamp is not None:
        raise _StepAside  # bad_timestamp
    # The Entry's own __dict__ filled in place (a dict of its 16 common fields, copied into a
    # copy of the defaults, cost twice as much): see _ENTRY_IN_PLACE.
    entry: Entry | None = _new_object(Entry) if _ENTRY_IN_PLACE else None
    kw: dict[str, Any] = entry.__dict__ if entry is not None else {}
    kw.update(_ENTRY_DEFAULTS)
    kw["is_sidechain"] = o.isSidechain is True
    kw["is_meta"] = o.isMeta is True
    kw["is_compact_summary"] = o.isCompactSummary is True
    kw["type"] = o.type
    kw["offset"] = offset
    kw["uuid"] = o.uuid
    kw["parent_uuid"] = o.parentUuid
    kw["logical_parent_uuid"] = o.logicalParentUuid
    kw["session_id"] = o.sessionId
    kw["timestamp_ns"] = ts
    kw["agent_id"] = o.agentId
    kw["version"] = o.version
    kw["cwd"] = o.cwd
    kw["git_branch"] = o.gitBranch
    kw["entrypoint"] = o.entrypoint
    kw["subtype"] = o.subtype
    etype = o.type
    msg = o.message
    if etype == "assistant":
        kw["request_id"] = o.requestId
        kw["is_api_error"] = o.isApiErrorMessage is True
        if o.madeBy is not None or o.requestRef is not None or o.requestedModel is not None or o.effort is not None:
            _line_fields(kw, o.madeBy, o.requestRef, o.requestedModel, o.effort)  # sets only strings: None is a no-op
        if msg is not None:
            kw["message_id"], kw["model"], kw["stop_reason"] = msg.id, msg.model, msg.stop_reason
            u = msg.usage
            if u is not None:
                kw["usage"], kw["advisors"] = u.record()
            content = msg.content
            if isinstance(content, str):
                kw["blocks"] = (_new_block({"type": "text", "text": _keep_text(content, capture)}),)
            elif content is not None:
                kw["blocks"] = _fast_blocks(content, capture)
            if kw["is_api_error"]:
                text = next((b.text for b in kw.get("blocks", ()) if b.type == "text" and b.text), None)
                kw["error_text"] = (text or "")[:200] or None
    elif etype == "user":
        if msg is not None:
            content = msg.content
            if isinstance(content, str):
                kw["content_is_string"] = True
                kw["blocks"] = (_new_block({"type": "text", "id": text_key(content),
                                            "text": _keep_text(content, capture)}),)
            elif content is not None:
                blocks = _fast_blocks(content, capture)
                first = content[0] if content else None
                if blocks and blocks[0].type == "text" and first is not None and isinstance(first.text, str):
                    blocks = (_new_block({"type": "text", "id": text_key(first.text), "text": blocks[0].text}),) \
                        + blocks[1:]
                kw["blocks"] = blocks
        raw = o.toolUseResult
        head = memoryview(raw)[:1].tobytes()
        if head == b'"':
            kw["tool_use_result_error"] = _str_decoder.decode(raw)[:200]
        elif head == b"{":
            kw["tool_use_result"] = _fast_tool_use_result(_tool_use_result_decoder.decode(raw))
        kw["source_tool_assistant_uuid"] = o.sourceToolAssistantUUID
    elif etype == "system":  # small objects: the checked path's reading, on orjson's values
        _system({"compactMetadata": orjson.loads(memoryview(o.compactMetadata)),
                 "retryAttempt": orjson.loads(memoryview(o.retryAttempt)),
                 "error": orjson.loads(memoryview(o.error))}, kw, [])
    elif etype == "progress":
        _progress({"data": orjson.loads(memoryview(o.data)), "parentToolUseID": o.parentToolUseID}, kw, [])
    elif etype == "api-request":
        if o.id is not None and not isinstance(o.id, str):
            raise _StepAside  # bad_field
        kw["api_request_id"] = o.id
    elif etype == "cost-state":
        raise _StepAside  # one line a run: the checked path reads it
    return entry if entry is not None else Entry(**kw)


def _fast_blocks(content: list[_JBlock], capture: bool) -> tuple[Block, ...]:
    out: list[Block] = []
    for b in content:
        btype = b.type
        if btype == "tool_use":
            if b.id is None or b.name is None:
                raise _StepAside  # bad_field
            out.append(_new_block({"type": "tool_use", "id": b.id, "name": b.name,
                                   "input": _tool_input(b.name, orjson.loads(memoryview(b.input)), capture)
                                   if capture or b.name in _TASK_TOOLS else None}))
        elif btype == "tool_result":
            if b.tool_use_id is None:
                raise _StepAside  # bad_field
            out.append(_new_block({"type": "tool_result", "id": b.tool_use_id, "is_error": b.is_error is True,
                                   "text": _result_text(b.content, capture)}))
        elif btype == "text":
            out.append(_new_block({"type": "text", "text": _keep_text(b.text if isinstance(b.text, str) else None,
                                                                       capture)}))
        else:
            out.append(_new_block({"type": btype}))
    return tuple(out)


def _result_text(raw: msgspec.Raw, capture: bool) -> str | None:
    """A tool_result's text as _keep_text(_text_of(content)) gives it. With content capture off
    only the head of a long string is kept, and only its head is decoded: tool output is most of
    a transcript's bytes (the line decoder has checked the whole string's JSON, and the reader
    its UTF-8)."""
    if not capture and len(raw) > _HEAD_BYTES and memoryview(raw)[0] == 0x22:  # '"'
        return _string_head(raw)
    c = _content_decoder.decode(raw)
    text = c if isinstance(c, str) else None
    if isinstance(c, list):
        parts = [t.text for t in c if t.text is not None]
        text = "\n".join(parts) if parts else None
    return _keep_text(text, capture)


def _string_head(raw: msgspec.Raw) -> str:
    """The first _CLASSIFY_PREFIX characters of a JSON string longer than _HEAD_BYTES: its first
    bytes, closed with a quote. A cut inside an escape or a UTF-8 sequence does not decode; a
    cut a few bytes earlier does, and changes nothing before it."""
    view = memoryview(raw)
    for cut in range(_HEAD_BYTES, _HEAD_BYTES - 16, -1):
        try:
            return _str_decoder.decode(view[:cut].tobytes() + b'"')[:_CLASSIFY_PREFIX]
        except msgspec.DecodeError:
            continue
    raise _StepAside  # not reached for a valid string (an escape is at most 12 bytes): the checked path


def _fast_tool_use_result(t: _JToolUseResult) -> dict[str, Any]:
    keep: dict[str, Any] = {}
    for key in ("agentId", "agentType", "status", "isAsync", "totalDurationMs", "totalTokens", "interrupted"):
        v = getattr(t, key)
        if v is not msgspec.UNSET:
            keep[key] = v
    u = orjson.loads(memoryview(t.usage))
    if isinstance(u, dict):
        keep["usage"] = u
    return keep
