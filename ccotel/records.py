"""Typed records passed between the stages of the data flow.

discover -> tail (RawLine) -> parse (Entry) -> assemble -> spans (SpanRecord) -> export
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "AdvisorCall",
    "BadInput",
    "Block",
    "Entry",
    "FileKind",
    "RawLine",
    "SpanKind",
    "SpanRecord",
    "SpanEvent",
    "StatusCode",
    "TranscriptFile",
    "Usage",
    "fast_constructor",
]


class BadInput(str, Enum):
    """Why input was skipped and counted: the ``reason`` of ccotel_parse_errors_total, every name in
    this one place (docs/generate.py lists them from here). A member behaves as its string does:
    the same str, format and hash, so it is the same label value, Counter key and log word."""

    INVALID_UTF8 = "invalid_utf8"
    MALFORMED_JSON = "malformed_json"
    NOT_AN_OBJECT = "not_an_object"
    NUL_BYTES = "nul_bytes"
    LINE_TOO_LONG = "line_too_long"
    BAD_FIELD = "bad_field"
    BAD_TIMESTAMP = "bad_timestamp"
    UNREADABLE = "unreadable"  # a file
    UNREADABLE_DIR = "unreadable_dir"
    PATH_NOT_UTF8 = "path_not_utf8"
    PATH_OUTSIDE_ROOT = "path_outside_root"
    BAD_META_JSON = "bad_meta_json"
    HOOK_MALFORMED_JSON = "hook_malformed_json"  # the hook spool's lines
    HOOK_NOT_AN_OBJECT = "hook_not_an_object"
    HOOK_BAD_FIELD = "hook_bad_field"

    __str__ = str.__str__
    __format__ = str.__format__  # type: ignore[assignment]  # (typeshed's Enum.__format__ takes the same str)
    __hash__ = str.__hash__


class FileKind(str, Enum):
    MAIN = "main"  # projects/<proj>/<session>.jsonl
    SUBAGENT = "subagent"  # projects/<proj>/<session>/subagents/agent-<id>.jsonl (2.1.x)
    FLAT_AGENT = "flat_agent"  # projects/<proj>/agent-<id>.jsonl (2.0.x)


@dataclass(frozen=True, slots=True)
class TranscriptFile:
    """A transcript file found under a root, classified by its path."""

    path: str
    kind: FileKind
    project: str
    # From the path; None for flat 2.0.x agent files (the lines carry it).
    session_id: str | None
    agent_id: str | None = None
    meta_path: str | None = None  # agent-<id>.meta.json beside a subagent file


class RawLine(NamedTuple):
    """One complete physical line of a file, without its newline. (A NamedTuple, not a frozen
    dataclass: one is made per line read, and a tuple is much cheaper to make.)"""

    offset: int  # byte offset of the line's first byte
    end: int  # byte offset just past the newline (or EOF for a final unterminated line)
    data: bytes


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_creation_5m: int = 0
    cache_creation_1h: int = 0
    reasoning_tokens: int = 0  # output_tokens_details.thinking_tokens (part of output_tokens)

    @property
    def total_input(self) -> int:
        """Input as the GenAI conventions count it for Anthropic: fresh + cache read + cache write."""
        return self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens

    @property
    def total(self) -> int:
        return self.total_input + self.output_tokens


@dataclass(frozen=True)
class AdvisorCall:
    """An advisor model consulted during a response (a ``usage.iterations`` entry of type
    ``advisor_message``): billed on its own, not part of the response's top-level usage."""

    model: str
    usage: Usage


@dataclass(frozen=True)
class Block:
    """A content block reduced to what assembly needs.

    ``text`` holds prompt/tool text only when content capture is on, or the first
    characters needed to classify a user line (see parse.py).
    """

    type: str
    id: str | None = None  # tool_use id, or tool_use_id of a tool_result
    name: str | None = None  # tool name
    is_error: bool = False
    text: str | None = None
    input: Any = None  # tool_use input (dict) when needed for linking or capture


@dataclass(frozen=True)
class Entry:
    """One JSON object of a transcript, normalised. Unknown fields are dropped, never an error."""

    type: str
    offset: int
    uuid: str | None = None
    parent_uuid: str | None = None
    logical_parent_uuid: str | None = None
    session_id: str | None = None
    timestamp_ns: int | None = None
    is_sidechain: bool = False
    is_meta: bool = False
    is_compact_summary: bool = False
    agent_id: str | None = None
    version: str | None = None
    cwd: str | None = None
    git_branch: str | None = None
    entrypoint: str | None = None
    subtype: str | None = None
    # assistant
    message_id: str | None = None
    request_id: str | None = None
    model: str | None = None
    stop_reason: str | None = None
    usage: Usage | None = None
    is_api_error: bool = False
    error_text: str | None = None
    advisors: tuple[AdvisorCall, ...] = ()
    made_by: str | None = None  # 2.1.3xx: "model" (API output) or "other" (Claude Code wrote it)
    request_ref: str | None = None  # 2.1.3xx: the id of the api-request line this answers
    requested_model: str | None = None  # 2.1.3xx: the model asked for (a fallback answers with another)
    effort: str | None = None
    # api-request lines (2.1.3xx): the id assistant lines name in requestRef; timestamp = sent
    api_request_id: str | None = None
    # cost-state lines (2.1.3xx): Claude Code's own running cost of one process (startTime), per model
    process_start: str | None = None
    reported_costs: tuple[tuple[str, float], ...] = ()
    # user
    content_is_string: bool = False
    blocks: tuple[Block, ...] = ()
    tool_use_result: dict[str, Any] | None = None
    tool_use_result_error: str | None = None  # toolUseResult given as a string: an error text
    source_tool_assistant_uuid: str | None = None
    # system
    compact_trigger: str | None = None
    compact_pre_tokens: int | None = None
    retry_attempt: int | None = None
    error_status: int | None = None
    # progress (agent_progress copies are recognised but not used as a source)
    progress_type: str | None = None
    progress_agent_id: str | None = None
    parent_tool_use_id: str | None = None
    no_type: bool = False  # a line with no "type" read as the assistant line its message says it is


class SpanKind(int, Enum):
    # Values of the OTLP protobuf enum.
    INTERNAL = 1
    SERVER = 2
    CLIENT = 3


class StatusCode(int, Enum):
    UNSET = 0
    OK = 1
    ERROR = 2


@dataclass(frozen=True)
class SpanEvent:
    name: str
    time_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SpanRecord:
    """A finished span, independent of any SDK. Ids are ints (trace 128 bit, span 64 bit)."""

    trace_id: int
    span_id: int
    parent_span_id: int | None
    name: str
    kind: SpanKind
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status: StatusCode = StatusCode.UNSET
    status_message: str | None = None
    events: tuple[SpanEvent, ...] = ()


_T = TypeVar("_T", bound="DataclassInstance")


def fast_constructor(cls: type[_T], probe: dict[str, Any], held: bool = False) -> Callable[[dict[str, Any]], _T]:
    """``make(kw)`` equal to ``cls(**kw)`` for a frozen dataclass, without the generated
    ``__init__`` (one ``object.__setattr__`` per field: 40 of them for an Entry, a large share of the
    parse time). Only used where that is exactly equivalent: plain defaults, no ``__post_init__``,
    no slots; checked on a probe at import, else the class itself is called. ``held``: records kept
    a while (spans, usages) get the compact ``__dict__`` that ``__init__`` makes (~0.1 us more each).
    """
    def slow(kw: dict[str, Any]) -> _T:
        return cls(**kw)

    try:
        fields = dataclasses.fields(cls)
    except TypeError:
        return slow
    if "__slots__" in cls.__dict__ or hasattr(cls, "__post_init__"):
        return slow
    if any(not f.init or f.default_factory is not dataclasses.MISSING for f in fields):
        return slow
    defaults = {f.name: f.default for f in fields}
    required = {f.name for f in fields if f.default is dataclasses.MISSING}
    new = object.__new__

    def make(kw: dict[str, Any]) -> _T:
        # filled in place: object.__setattr__(obj, "__dict__", a copy) costs more than the copy
        obj: _T = new(cls)
        d = obj.__dict__
        d.update(defaults)
        d.update(kw)
        return obj

    first = fields[0].name if fields else ""
    later = {f.name: f.default for f in fields[1:]}

    def make_held(kw: dict[str, Any]) -> _T:
        # The first field set alone: an update of the empty dict makes it a copy of the defaults'
        # table (a dict of its own keys, 464 bytes for a span), not the compact dict sharing the
        # class's keys that __init__ makes (160), which the fields set in their order keep.
        obj: _T = new(cls)
        d = obj.__dict__
        d[first] = kw.get(first, dataclasses.MISSING)
        d.update(later)
        d.update(kw)
        return obj

    chosen = make_held if held and fields else make
    try:
        a, b = chosen(probe), cls(**probe)
    except Exception:  # noqa: BLE001
        return slow
    if not required <= probe.keys() or type(a) is not type(b) or a != b or vars(a) != vars(b):
        return slow
    return chosen
