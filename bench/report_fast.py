"""Prototype, for bench/NOTES.md: how fast could ``ccotel report`` be with a usage-only path?

    python -m bench.report_fast --root DIR      # prints per-session totals as JSON, and the time

Not used by ccotel. ``ccotel report`` runs the whole pipeline (every line parsed, turns, tool
calls, spans built) and keeps only the chat spans' usage. Token totals need only the assistant
lines: this reads the same files in the same order (``Pipeline.discover`` + ``_session_groups``),
hands to ccotel's own ``parse_line`` only the lines that contain ``"assistant"`` (a byte search;
tool results, the bulk of the bytes, are never decoded) and applies the assembler's usage rules:
once per (message.id, requestId) across all files, first file wins, the largest usage snapshot,
``<synthetic>`` skipped unless an API error, API errors not billed. Simplification: the assembler
continues a call only while it is its owner's current one; this keeps the largest snapshot of a
key wherever it appears, which is the same for every transcript shape in FORMAT.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import orjson

from ccotel import ids
from ccotel.parse import parse_line
from ccotel.pipeline import Options, Pipeline, _session_groups
from ccotel.records import Usage

_NEEDLE = b'"assistant"'


def _bigger(a: Usage, b: Usage) -> bool:
    return (a.output_tokens, a.total) > (b.output_tokens, b.total)


class _Lite:
    """The fields of an assistant Entry the usage rules read."""

    __slots__ = ("type", "message_id", "request_id", "uuid", "session_id", "model", "is_api_error", "usage")

    def __init__(self, *values: Any) -> None:
        for name, v in zip(self.__slots__, values):
            setattr(self, name, v)


def _quick(line: bytes) -> _Lite | None:
    """The usual compact, well-typed assistant line read without building an Entry; None: let
    parse_line decide (glued objects, odd types, anything unusual)."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if type(obj) is not dict or obj.get("type") != "assistant":
        return _Lite("other", None, None, None, None, None, False, None) if type(obj) is dict else None
    msg = obj.get("message")
    if type(msg) is not dict:
        return None
    u = msg.get("usage")
    mid, rid, uuid, sid, model = msg.get("id"), obj.get("requestId"), obj.get("uuid"), obj.get("sessionId"), msg.get("model")
    if not all(v is None or type(v) is str for v in (mid, rid, uuid, sid, model)):
        return None
    usage = None
    if u is not None:
        if type(u) is not dict:
            return None
        vals = (u.get("input_tokens"), u.get("output_tokens"), u.get("cache_read_input_tokens"),
                u.get("cache_creation_input_tokens"))
        if not all(type(v) is int and v >= 0 for v in vals):
            return None
        usage = Usage(*vals)
    return _Lite("assistant", mid, rid, uuid, sid, model, obj.get("isApiErrorMessage") is True, usage)


def fast_report(roots: list[str]) -> dict[str, dict[str, int]]:
    pipeline = Pipeline(Options(roots=tuple(roots)), emit=lambda spans: None)
    calls: dict[str, list[Any]] = {}  # key -> [session, usage, is_api_error]
    for group in _session_groups(pipeline.discover()):
        for _root, tf in group:
            with open(tf.path, "rb") as f:
                data = f.read()
            offset = 0
            for line in data.split(b"\n"):
                start = offset
                offset += len(line) + 1
                if _NEEDLE not in line:
                    continue
                quick = _quick(line)
                for e in (quick,) if quick is not None else parse_line(line, start).entries:
                    if e.type != "assistant" or e.message_id is None or e.uuid is None:
                        continue
                    sid = e.session_id or tf.session_id
                    if sid is None or (e.model == "<synthetic>" and not e.is_api_error):
                        continue
                    key = ids.call_key(e.message_id, e.request_id)
                    call = calls.get(key)
                    if call is None:
                        calls[key] = [sid, e.usage, e.is_api_error]
                        continue
                    if e.usage is not None and (call[1] is None or _bigger(e.usage, call[1])):
                        call[1] = e.usage
                    call[2] = call[2] or e.is_api_error
    out: dict[str, dict[str, int]] = {}
    for sid, u, api_error in calls.values():
        if u is None or api_error:
            continue
        s = out.setdefault(sid, {"inputTokens": 0, "outputTokens": 0, "cacheCreationTokens": 0,
                                 "cacheReadTokens": 0, "apiCalls": 0})
        s["inputTokens"] += u.input_tokens
        s["outputTokens"] += u.output_tokens
        s["cacheCreationTokens"] += u.cache_creation_input_tokens
        s["cacheReadTokens"] += u.cache_read_input_tokens
        s["apiCalls"] += 1
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.report_fast")
    ap.add_argument("--root", action="append", required=True)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    sessions = fast_report(args.root)
    sys.stdout.write(orjson.dumps({"sessions": sessions, "seconds": time.perf_counter() - t0}).decode() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
