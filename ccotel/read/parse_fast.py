"""Parse stage, the fast path: one line of the usual shape, as raw bytes -> its Entry.

Most lines have the usual shape: the fields to_entry reads, each of its usual type. msgspec
decodes such a line straight into the structs below, skipping what ccotel never reads (tool
output in toolUseResult, tool inputs, thinking text) without building Python objects for it,
which costs far less than orjson.loads + to_entry. A line of any other shape (a field of an odd
type, a count out of range, glued objects, bad UTF-8...) fails to decode and takes the checked
path (parse_full.py), which stays the reference: the tests hold both equal on every real line
and on mutated ones. The fast path never reports an error; anything to_entry would complain
about makes it step aside. One known difference, in the fast path's favour: an integer of more
than 4,300 digits in a field ccotel ignores is skipped, where Python's json (the checked path's
last resort after orjson) refuses the whole line. toolUseResult itself is not such a field: it is
decoded with the line, so a number there beyond msgspec's range takes the checked path.

A line whose one fault is invalid UTF-8 is repaired here too, over its bytes (_repaired_entry).
"""

from __future__ import annotations

import codecs
import dataclasses
from typing import Annotated, Any

import msgspec
import orjson

from ccotel.read.parse_full import (
    _CLASSIFY_PREFIX,
    _TASK_TOOLS,
    _TOOL_USE_RESULT_KEYS,
    _error_text,
    _int,
    _Iteration,
    _keep_text,
    _line_fields,
    _new_block,
    _new_entry,
    _progress,
    _system,
    _tool_input,
    _usage_record,
    text_key,
)
from ccotel.read.parse_time import _MAX_INT64, parse_timestamp
from ccotel.records import AdvisorCall, Block, Entry, Usage

__all__ = ["fast_entry"]

# The fast path fills an Entry's __dict__ itself when _new_entry may bypass __init__ (checked on
# a probe at import); else it calls Entry(**kw) with the same keys.
_ENTRY_IN_PLACE = _new_entry.__name__ == "make"
# (type and offset have no default: None here, always set; listed so the keys keep the fields' order)
_ENTRY_DEFAULTS: dict[str, Any] = {f.name: None if f.default is dataclasses.MISSING else f.default
                                   for f in dataclasses.fields(Entry)}
_new_object = object.__new__

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

    def thinking(self) -> int:
        """output_tokens_details.thinking_tokens when it is a count, else 0. With no iterations,
        ``counts`` and this are the call's usage (``record``)."""
        details = self.output_tokens_details
        return (_int(details.get("thinking_tokens")) or 0) if type(details) is dict else 0

    def record(self) -> tuple[Usage, tuple[AdvisorCall, ...]]:
        return _usage_record(*self.counts(), self.thinking(),
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
    # decoded with the line: a string is a failed tool's error, an object the fields kept; anything
    # else is ignored, as the checked path does
    toolUseResult: _JToolUseResult | str | list[msgspec.Raw] | int | float | bool | None = None
    # small objects to_entry reads loosely: decoded by orjson, exactly as the checked path does
    data: msgspec.Raw = msgspec.Raw(b"null")
    compactMetadata: msgspec.Raw = msgspec.Raw(b"null")
    retryAttempt: msgspec.Raw = msgspec.Raw(b"null")
    error: msgspec.Raw = msgspec.Raw(b"null")


_line_decoder = msgspec.json.Decoder(_JLine)
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


_fast_entry = fast_entry  # the name tests/read/test_parse_fastpath.py knows
# A long line is decoded this many bytes at a time (_check_utf8, _replace_invalid_utf8): a piece's
# str (4 bytes a character at most) stays under a catch-up worker's mmap threshold (run/memory.py),
# so it comes from the heap, not from a mapping faulted in page by page. At least 4: a character.
_UTF8_PIECE = 32 << 10
_utf_8_decode = codecs.utf_8_decode


def _check_utf8(data: bytes | bytearray) -> None:
    """Raise UnicodeDecodeError unless ``data`` is UTF-8. A long line is decoded a piece at a
    time: a 4 MB line of tool output with one CJK character is a str of 8 MB decoded whole,
    held for nothing. A piece that ends inside a character is decoded up to it; the next piece
    starts there."""
    size = len(data)
    if size <= _UTF8_PIECE:
        data.decode("utf-8")
        return
    view = memoryview(data)
    start = 0
    while start < size:
        end = start + _UTF8_PIECE
        start += _utf_8_decode(view[start:end], "strict", end >= size)[1]


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
    # copy of the defaults, cost more: a dict built per line only to be copied): see _ENTRY_IN_PLACE.
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
                kw["error_text"] = _error_text(kw.get("blocks", ()))
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
        tur = o.toolUseResult
        if type(tur) is str:
            kw["tool_use_result_error"] = tur[:200]
        elif type(tur) is _JToolUseResult:
            kw["tool_use_result"] = _fast_tool_use_result(tur)
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
        except (msgspec.DecodeError, UnicodeDecodeError):  # msgspec raises the latter for a cut UTF-8 sequence
            continue
    raise _StepAside  # not reached for a valid string (an escape is at most 12 bytes): the checked path


def _fast_tool_use_result(t: _JToolUseResult) -> dict[str, Any]:
    keep: dict[str, Any] = {}
    for key in _TOOL_USE_RESULT_KEYS:
        v = getattr(t, key)
        if v is not msgspec.UNSET:
            keep[key] = v
    u = orjson.loads(memoryview(t.usage))
    if isinstance(u, dict):
        keep["usage"] = u
    return keep
