"""Parse stage: the whole decode of one transcript object (a dict) -> an Entry, and its errors.

This is the checked path: every field is read for what it is, and whatever is not what Claude
Code writes becomes a named error reason (records.BadInput) while the rest of the line is still
read. It is the reference the fast path (parse_fast.py) is held equal to, and the fast path takes
its readings of the parts both share (usage, tool inputs, system and progress lines) from here.
"""

from __future__ import annotations

from typing import Any

from ccotel.hashing import blake2b
from ccotel.read.parse_time import _MAX_INT64, parse_timestamp
from ccotel.records import AdvisorCall, BadInput, Block, Entry, Usage
from ccotel.records import fast_constructor as _fast_constructor
from ccotel.rules import transcript as rules

__all__ = ["text_key", "to_entry"]

# How much of a user text is kept to classify it when content capture is off.
_CLASSIFY_PREFIX = 80
_TASK_TOOLS = rules.TASK_TOOLS
# The subagent-related fields of a toolUseResult, the only ones kept (the rest can be megabytes).
_TOOL_USE_RESULT_KEYS = ("agentId", "agentType", "status", "isAsync", "totalDurationMs", "totalTokens", "interrupted")
_STR_OR_NONE = frozenset((str, type(None)))
_BOOL_OR_NONE = frozenset((bool, type(None)))


def text_key(text: str) -> str:
    """A short stable digest of a text, used to link inline sidechains to their Task prompt."""
    return blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def _str(obj: dict[str, Any], key: str, errors: list[BadInput]) -> str | None:
    v = obj.get(key)
    if v is None or isinstance(v, str):
        return v
    errors.append(BadInput.BAD_FIELD)
    return None


def _str_value(v: Any, errors: list[BadInput]) -> str | None:
    if v is None or isinstance(v, str):
        return v
    errors.append(BadInput.BAD_FIELD)
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


def _bool(obj: dict[str, Any], key: str, errors: list[BadInput]) -> bool:
    v = obj.get(key)
    if v is None or v is False:
        return False
    if v is True:
        return True
    errors.append(BadInput.BAD_FIELD)
    return False


_NO_USAGE: tuple[Usage | None, tuple[AdvisorCall, ...]] = (None, ())


def _usage(v: Any, errors: list[BadInput]) -> tuple[Usage | None, tuple[AdvisorCall, ...]]:
    if v is None:
        return _NO_USAGE
    if not isinstance(v, dict):
        errors.append(BadInput.BAD_FIELD)
        return _NO_USAGE
    get = v.get
    vals: list[Any] = [get("input_tokens"), get("output_tokens"), get("cache_read_input_tokens"),
                       get("cache_creation_input_tokens")]  # raw JSON values: all ints once checked below
    if not (type(vals[0]) is int and type(vals[1]) is int and type(vals[2]) is int and type(vals[3]) is int
            and 0 <= vals[0] < _MAX_INT64 and 0 <= vals[1] < _MAX_INT64 and 0 <= vals[2] < _MAX_INT64
            and 0 <= vals[3] < _MAX_INT64):
        vals = [_usage_count(raw, errors) for raw in vals]
    c5 = c1 = 0
    cc = get("cache_creation")
    if type(cc) is dict and type(c5 := cc.get("ephemeral_5m_input_tokens", 0)) is int \
            and type(c1 := cc.get("ephemeral_1h_input_tokens", 0)) is int and 0 <= c5 < _MAX_INT64 \
            and 0 <= c1 < _MAX_INT64:
        pass  # the usual shape: both plain counts (None and odd values take the checked path)
    elif isinstance(cc, dict):
        c5 = _usage_count(cc.get("ephemeral_5m_input_tokens"), errors)
        c1 = _usage_count(cc.get("ephemeral_1h_input_tokens"), errors)
    elif cc is not None:
        errors.append(BadInput.BAD_FIELD)
    details = get("output_tokens_details")
    thinking = _int(details.get("thinking_tokens")) if type(details) is dict else None
    iterations = get("iterations")
    iters = [_iteration(i, errors) for i in iterations] if type(iterations) is list else []
    return _usage_record(vals[0], vals[1], vals[2], vals[3], c5, c1, thinking or 0,
                         [i for i in iters if i is not None])


def _usage_count(raw: Any, errors: list[BadInput]) -> int:
    """A count of a call's usage: absent or null is 0; anything else that is not a count is 0 and an error."""
    n = _int(raw) if raw is not None else 0
    if n is None:
        errors.append(BadInput.BAD_FIELD)
        return 0
    return n


_Iteration = tuple[str | None, str | None, int, int, int, int, int, int]


def _iteration(v: Any, errors: list[BadInput]) -> _Iteration | None:
    """One ``usage.iterations`` entry: (type, model, input, output, cache read, cache creation, 5m, 1h)."""
    if not isinstance(v, dict):
        errors.append(BadInput.BAD_FIELD)
        return None
    counts = []
    for key in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
        n = _int(v.get(key, 0))
        if n is None:
            errors.append(BadInput.BAD_FIELD)
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
    are rules/transcript.py's); the iterations are read once for both."""
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


def _blocks(content: Any, capture: bool, errors: list[BadInput]) -> tuple[Block, ...]:
    if not isinstance(content, list):
        errors.append(BadInput.BAD_FIELD)
        return ()
    out: list[Block] = []
    for b in content:
        if not isinstance(b, dict):
            errors.append(BadInput.BAD_FIELD)
            continue
        btype = b.get("type")
        if not isinstance(btype, str):
            errors.append(BadInput.BAD_FIELD)
            continue
        if btype == "tool_use":
            tid, name = b.get("id"), b.get("name")
            if not isinstance(tid, str) or not isinstance(name, str):
                errors.append(BadInput.BAD_FIELD)
                continue
            out.append(_new_block({"type": "tool_use", "id": tid, "name": name,
                                   "input": _tool_input(name, b.get("input"), capture)}))
        elif btype == "tool_result":
            tid = b.get("tool_use_id")
            if not isinstance(tid, str):
                errors.append(BadInput.BAD_FIELD)
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
    for key in _TOOL_USE_RESULT_KEYS:
        if key in v:
            keep[key] = v[key]
    u = v.get("usage")
    if isinstance(u, dict):
        keep["usage"] = u
    return keep


def to_entry(obj: dict[str, Any], offset: int, capture: bool, errors: list[BadInput]) -> Entry | None:
    get = obj.get
    etype = get("type")
    if not isinstance(etype, str):
        if etype is not None or not _counts_a_call(get("message")):
            errors.append(BadInput.BAD_FIELD)
            return None
        etype = "assistant"  # no type, but a call to count: read as the assistant line it is
    no_type = etype is not get("type")
    ts_raw = get("timestamp")
    ts = parse_timestamp(ts_raw)
    if ts is None and ts_raw is not None:
        errors.append(BadInput.BAD_TIMESTAMP)
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
    if no_type:
        kw["no_type"] = True
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


def _counts_a_call(msg: Any) -> bool:
    """A message with an id and a usage object: an API call, whatever its line lacks."""
    return isinstance(msg, dict) and isinstance(msg.get("id"), str) and \
        rules.counts_a_call(msg["id"], isinstance(msg.get("usage"), dict))


def _cost_state(obj: dict[str, Any], kw: dict[str, Any], errors: list[BadInput]) -> None:
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
            errors.append(BadInput.BAD_FIELD)
    kw["reported_costs"] = tuple(costs)


def _line_fields(kw: dict[str, Any], made_by: Any, request_ref: Any, requested_model: Any, effort: Any) -> None:
    """2.1.3xx assistant-line fields, read the same way by both paths: strings or nothing."""
    for key, v in (("made_by", made_by), ("request_ref", request_ref), ("requested_model", requested_model),
                   ("effort", effort)):
        if isinstance(v, str):
            kw[key] = v


def _assistant(obj: dict[str, Any], kw: dict[str, Any], capture: bool, errors: list[BadInput]) -> None:
    kw["request_id"] = _str(obj, "requestId", errors)
    kw["is_api_error"] = _bool(obj, "isApiErrorMessage", errors)
    _line_fields(kw, obj.get("madeBy"), obj.get("requestRef"), obj.get("requestedModel"), obj.get("effort"))
    msg = obj.get("message")
    if msg is None:
        return
    if not isinstance(msg, dict):
        errors.append(BadInput.BAD_FIELD)
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
    if kw["message_id"] is None and get("id") is not None:
        kw["usage"], kw["advisors"] = None, ()  # an id it cannot read: not a call without one (bad_field)
    content = msg.get("content")
    if isinstance(content, str):
        kw["blocks"] = (_new_block({"type": "text", "text": _keep_text(content, capture)}),)
    elif content is not None:
        kw["blocks"] = _blocks(content, capture, errors)
    if kw["is_api_error"]:
        kw["error_text"] = _error_text(kw.get("blocks", ()))


def _error_text(blocks: tuple[Block, ...]) -> str | None:
    """An API error line's message: the head of its first non-empty text block."""
    text = next((b.text for b in blocks if b.type == "text" and b.text), None)
    return (text or "")[:200] or None


def _user(obj: dict[str, Any], kw: dict[str, Any], capture: bool, errors: list[BadInput]) -> None:
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
        errors.append(BadInput.BAD_FIELD)
    tur = obj.get("toolUseResult")
    if isinstance(tur, str):
        kw["tool_use_result_error"] = tur[:200]
    else:
        kw["tool_use_result"] = _tool_use_result(tur)
    kw["source_tool_assistant_uuid"] = _str(obj, "sourceToolAssistantUUID", errors)


def _progress(obj: dict[str, Any], kw: dict[str, Any], errors: list[BadInput]) -> None:
    data = obj.get("data")
    if isinstance(data, dict):
        kw["progress_type"] = data.get("type") if isinstance(data.get("type"), str) else None
        kw["progress_agent_id"] = data.get("agentId") if isinstance(data.get("agentId"), str) else None
    kw["parent_tool_use_id"] = _str(obj, "parentToolUseID", errors)


def _system(obj: dict[str, Any], kw: dict[str, Any], errors: list[BadInput]) -> None:
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
_new_block = _fast_constructor(Block, {"type": "tool_use", "id": "t", "name": "n", "input": {"k": [1]}})
_new_usage = _fast_constructor(Usage, {"input_tokens": 1, "output_tokens": 2, "cache_read_input_tokens": 3,
                                       "cache_creation_input_tokens": 4, "cache_creation_5m": 5,
                                       "cache_creation_1h": 6, "reasoning_tokens": 7}, held=True)
