"""A stream line -> a record, and the blocks of a record's content array not seen before.

Apart from the assembler because relay.py parses each line (to count the bad ones) before the
assembler sees it, and because deduplication is a rule of its own about producers, not about
what the records mean.

Producers that repeat cumulative content arrays (each record holding every block so far) are
deduplicated per agent context by a fingerprint of the first block: a new fingerprint means the
context switched, so the array is processed again from its start; blocks already seen (by id)
are dropped, no block is ever dropped on a switch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = ["MAX_LINE_BYTES",
    "BAD_LINE_REASONS",
    "BlockDedupe",
    "Counter",
    "block_id",
    "fingerprint",
    "parse_record",
]

# A stream line longer than this is skipped and counted (a tool result can hold megabytes).
MAX_LINE_BYTES = 64 << 20

# Why a line was passed through without being understood (ccotel_relay_bad_lines_total{reason}).
BAD_LINE_REASONS = ("malformed_json", "invalid_utf8", "not_an_object", "truncated", "line_too_long")

#: ``count(metric, labels, value)``: relay.py hands it to ccotel.metrics.Metrics.inc.
Counter = Callable[[str, tuple[str, ...], float], None]
#: ``resolve_prompt(session_id, uuid)``: the uuid of the prompt line whose turn holds ``uuid``.


def parse_record(data: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """A stream line -> (record, None), (None, bad-line reason), or (None, None) for a blank line."""
    if not data.strip():
        return None, None
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None, "invalid_utf8"
        return None, "malformed_json"
    if not isinstance(obj, dict):
        return None, "not_an_object"
    return obj, None


def fingerprint(block: object) -> str:
    """The first block of a content array: ``tool_use:{id}``, ``thinking:``/``text:`` plus its
    first 64 characters, otherwise ``{type}:{tool_use_id}``."""
    if not isinstance(block, dict):
        return f"{type(block).__name__}:"
    kind = block.get("type")
    if kind == "tool_use":
        return f"tool_use:{block.get('id')}"
    if kind in ("thinking", "text"):
        return f"{kind}:{str(block.get(kind) or '')[:64]}"
    return f"{kind}:{block.get('tool_use_id')}"


def block_id(block: object, message_id: str | None) -> str:
    """What identifies a block when a producer emits it again: its tool_use id (or the tool_use_id
    it answers), else its message and fingerprint."""
    if isinstance(block, dict):
        if isinstance(block.get("id"), str):
            return f"id:{block['id']}"
        if isinstance(block.get("tool_use_id"), str):
            return f"{block.get('type')}:{block['tool_use_id']}"
    return f"{message_id}|{fingerprint(block)}"


@dataclass
class _DedupeState:
    fingerprint: str | None = None
    message_id: str | None = None
    index: int = 0
    seen: set[str] = field(default_factory=set)


class BlockDedupe:
    """New blocks of content arrays, per agent context (see the module docstring)."""

    def __init__(self, count: Counter | None = None) -> None:
        self._contexts: dict[tuple[str, str], _DedupeState] = {}
        self._count = count or (lambda _name, _labels, _value: None)

    def new_blocks(self, context: tuple[str, str], message_id: str | None, content: list[Any]) -> list[Any]:
        if not content:
            return []
        st = self._contexts.setdefault(context, _DedupeState())
        fp = fingerprint(content[0])
        if st.fingerprint is not None and (fp != st.fingerprint or message_id != st.message_id
                                           or len(content) < st.index):
            st.index = 0  # another array (the context switched): read it again from its start
            self._count("ccotel_relay_context_switches", (), 1.0)
        st.fingerprint, st.message_id = fp, message_id
        out = []
        for block in content[st.index:]:
            key = block_id(block, message_id)
            if key in st.seen:
                self._count("ccotel_relay_repeated_blocks", (), 1.0)
                continue
            st.seen.add(key)
            out.append(block)
        st.index = len(content)
        return out
