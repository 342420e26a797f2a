"""Parse stage: one physical transcript line -> zero or more typed Entries.

Unknown line types and fields are normal (Claude Code adds them between versions).
Anything that cannot be read becomes a named error reason, counted by the caller;
the rest of the line and the file are still processed.

This module is the entry point: a line of the usual shape goes to the fast path
(parse_fast.py); any other is decoded whole (orjson, else the objects glued on it are
taken apart here) and each object read by the checked path (parse_full.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import orjson

from ccotel.read.parse_fast import _repaired_entry, fast_entry
from ccotel.read.parse_full import to_entry
from ccotel.records import BadInput, Entry

__all__ = ["ParseResult", "is_complete_json", "parse_line"]


_decoder = json.JSONDecoder()


@dataclass
class ParseResult:
    entries: list[Entry] = field(default_factory=list)
    errors: list[BadInput] = field(default_factory=list)


def parse_line(data: bytes, offset: int, capture_content: bool = False, fast: bool = True) -> ParseResult:
    """The entries of one physical line and what was wrong with it: at most one error, the first
    reason found (bytes neither UTF-8 nor JSON are one bad line, not an error per fault in them).
    ``fast=False``: always the checked path (the reference the typed fast path is tested against)."""
    result = _parse_line(data, offset, capture_content, fast)
    del result.errors[1:]
    return result


def _parse_line(data: bytes, offset: int, capture_content: bool, fast: bool) -> ParseResult:
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
            result.errors.append(BadInput.INVALID_UTF8)
            result.entries.append(entry)
            return result
        try:
            objs = _decode_glued(data, result)
        except (RecursionError, ValueError):  # nesting deeper than any decoder goes, 4,300-digit ints
            result.errors.append(BadInput.MALFORMED_JSON)
            return result
    for obj in objs:
        if not isinstance(obj, dict):
            result.errors.append(BadInput.NOT_AN_OBJECT)
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
        result.errors.append(BadInput.INVALID_UTF8)
        text = data.decode("utf-8", "replace")
    if "\x00" in text:
        result.errors.append(BadInput.NUL_BYTES)
        text = text.replace("\x00", "")
    objs: list[Any] = []
    pos, n = 0, len(text)
    while (pos := _skip_blank(text, pos)) < n:
        try:
            obj, pos = _decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            # One counted error per broken stretch, then resynchronise on a glued object.
            result.errors.append(BadInput.MALFORMED_JSON)
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
