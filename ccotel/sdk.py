"""ccotel for users of the Claude Agent SDK for Python (``claude-agent-sdk``), in their own process.

    from ccotel.sdk import Observer, raw_of

    async with Observer(options) as obs:                      # options: the SDK's ClaudeAgentOptions
        async for message in obs.wrap(query(prompt="...", options=options)):
            message.raw                                        # its transcript line (a dict), or None

    async with ClaudeSDKClient(options) as client, Observer(options) as obs:
        await client.query("...")
        async for message in obs.wrap(client.receive_response()):
            print(raw_of(message)["parentUuid"])

or, shorter, ``async for message in ccotel.sdk.query(prompt=..., options=options)``.

Two things, both read from the session's transcript files as the CLI writes them:

1. Each message the wrapper yields is the SDK's own object (its dataclasses are neither frozen
   nor slotted, so an attribute can be added) with ``.raw`` set: the transcript line it came
   from (``parentUuid``, ``uuid``, ``timestamp``, ``isSidechain``, ``agentId``,
   ``message.usage`` with the final figures where the stream carries a start-of-stream
   snapshot, ``toolUseResult``, ...), or None for messages no line stands for (init, task
   events, results). How a message finds its line is in sdk_match.py. The CLI writes its
   transcript in batches, well under a second after the message reached the SDK (seen with
   2.1.330 and 2.1.332): a message waits for its line at most ``raw_timeout_s`` (1 s), polled every
   ``retry_step_s``. Messages behind it wait in the SDK's buffer meanwhile, so the delay does
   not add up. ``pairs()`` yields ``(message, raw)`` for code that wants it typed.
2. Live spans: the real pipeline (ccotel.pipeline.Pipeline, no state) follows the session's
   files in a thread of its own and exports what it builds (``traces``: "otlp" with the
   standard OTEL_EXPORTER_OTLP_* variables, "console", "memory", "none", a sink object, or None
   for no spans). The ids are the ones ``ccotel run`` gives the same transcripts, so a backend
   that gets both keeps one copy. Turns that started before the observer (a resumed session's
   history) are not exported again.

The config dir is found as the CLI finds it: ``CLAUDE_CONFIG_DIR`` from ``options.env``, else
from the environment, else ``~/.claude`` (``roots=`` to say otherwise).
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from ccotel.export.sinks import ExportQueue, SpanSink, make_sink
from ccotel.read.discover import classify
from ccotel.read.layout import default_roots
from ccotel.records import SpanRecord
from ccotel.run.pipeline import Options, Pipeline
from ccotel.sources.sdk_match import (
    Matcher,
    MatchStats,
    RawEntry,
    SessionFiles,
    Wanted,
    block_signature,
    content_signature,
)

__all__ = ["LiveSpans", "MatchStats", "Observer", "RawEntry", "query", "raw_of", "wanted_of"]

log = logging.getLogger("ccotel.sdk")

M = TypeVar("M")

RAW_TIMEOUT_S = 1.0
RETRY_STEP_S = 0.02
POLL_INTERVAL_S = 0.2


def raw_of(message: object) -> RawEntry | None:
    """The transcript line an observed message came from (``message.raw``, typed)."""
    raw = getattr(message, "raw", None)
    return raw if isinstance(raw, dict) else None


# -- what an SDK message says about its line ------------------------------------------------


def _block_signature(block: object) -> str | None:
    """A content block of the SDK (TextBlock, ThinkingBlock, ToolUseBlock, ToolResultBlock and
    the server-tool ones), by its fields: the SDK's classes are read, not imported."""
    if isinstance(block, dict):
        return content_signature([block])
    thinking = getattr(block, "thinking", None)
    if isinstance(thinking, str):
        return block_signature("thinking", None, thinking)
    tool_use_id = getattr(block, "tool_use_id", None)
    if isinstance(tool_use_id, str):
        return block_signature("tool_result", tool_use_id, None)
    block_id = getattr(block, "id", None)
    if isinstance(block_id, str) and hasattr(block, "input"):
        return block_signature("tool_use", block_id, None)
    text = getattr(block, "text", None)
    return block_signature("text", None, text) if isinstance(text, str) else None


def _signature(content: object) -> str | None:
    if isinstance(content, str):
        return block_signature("text", None, content)
    if isinstance(content, list) and content:
        return _block_signature(content[0])
    return None


def wanted_of(message: object) -> Wanted | None:
    """What to look for in the transcript for this SDK message; None when no line stands for it
    (system init, task events, results, stream events)."""
    name = type(message).__name__
    uuid = getattr(message, "uuid", None)
    uuid = uuid if isinstance(uuid, str) else None
    parent = getattr(message, "parent_tool_use_id", None)
    parent = parent if isinstance(parent, str) else None
    if name == "AssistantMessage":
        return Wanted("assistant", uuid, _signature(getattr(message, "content", None)), parent)
    if name == "UserMessage":
        return Wanted("user", uuid, _signature(getattr(message, "content", None)), parent)
    if name == "SystemMessage" and getattr(message, "subtype", None) == "compact_boundary":
        data = getattr(message, "data", None)
        line_uuid = data.get("uuid") if isinstance(data, dict) else None
        return Wanted("system", line_uuid if isinstance(line_uuid, str) else None, None, None)
    return None


def _session_of(message: object) -> str | None:
    sid = getattr(message, "session_id", None)
    if not isinstance(sid, str):
        data = getattr(message, "data", None)
        sid = data.get("session_id") if isinstance(data, dict) else None
    return sid if isinstance(sid, str) and sid else None


# -- live spans ------------------------------------------------------------------------------


class LiveSpans:
    """The pipeline on the watched sessions' files, polled from a thread of its own (the
    Pipeline is used by that thread only, and by ``close`` once it ended)."""

    def __init__(self, roots: Sequence[str], since_ns: int, sink: SpanSink,
                 interval_s: float = POLL_INTERVAL_S) -> None:
        self.roots = tuple(roots)
        self.interval_s = interval_s
        self.queue = ExportQueue(sink, notify=lambda msg: log.warning("%s", msg))
        self.pipeline = Pipeline(Options(roots=self.roots, since_ns=since_ns), emit=self._emit, state=None)
        self.queue.on_ack = self.pipeline.acknowledge
        self.errors = 0
        self._sessions: dict[str, SessionFiles] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def sink(self) -> SpanSink:
        return self.queue.sink

    def watch(self, session_id: str) -> None:
        with self._lock:
            if self._closed or session_id in self._sessions:
                return
            self._sessions[session_id] = SessionFiles(self.roots, session_id)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="ccotel-sdk-spans", daemon=True)
                self._thread.start()

    def _emit(self, spans: list[SpanRecord]) -> bool:
        # a backend away for long fills the queue: this thread waits a little, then lets the
        # pipeline know they were not sent (nothing to checkpoint here: no state)
        return self.queue.submit(spans, block_s=1.0)

    def _paths(self) -> list[str]:
        with self._lock:
            sessions = list(self._sessions.values())
        return [p for files in sessions for p in files.paths()]

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._step()

    def _step(self) -> None:
        try:
            paths = self._paths()
            if paths:
                self.pipeline.poll(paths)
            self.pipeline.tick()
        except Exception:  # noqa: BLE001 - tracing must never end the user's program
            self.errors += 1
            if self.errors == 1:
                log.exception("ccotel.sdk: reading the transcripts failed; spans may be missing")

    def close(self, timeout_s: float = 5.0) -> bool:
        """Stop following, read what is left, close every open turn (the SDK is done with the
        session), and wait up to ``timeout_s`` for the backend to take the spans."""
        with self._lock:
            self._closed = True
            thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None:
            thread.join(timeout=max(timeout_s, 1.0))
            if thread.is_alive():  # stuck in a read: the pipeline is not this thread's to use
                log.warning("ccotel.sdk: the span thread did not stop; the last spans are not exported")
                self.queue.close(timeout_s=0)
                return False
        try:
            group = [(root, tf) for root in self.roots for path in self._paths()
                     if (tf := classify(root, path)) is not None]
            if group:
                self.pipeline.backfill(close_all=True, groups=[group])
        except Exception:  # noqa: BLE001
            self.errors += 1
            log.exception("ccotel.sdk: reading the transcripts at the end failed; spans may be missing")
        delivered = self.queue.flush(timeout_s=timeout_s)
        if not delivered:
            log.warning("ccotel.sdk: %d spans not taken by the trace backend within %.1f s: dropped",
                        self.queue.pending(), timeout_s)
        self.queue.close(timeout_s=0)
        return delivered


# -- the observer ----------------------------------------------------------------------------


class Observer:
    """Gives SDK messages their transcript line and exports the session's spans live.

    ``options``: the ClaudeAgentOptions the query runs with (its ``env`` may name
    CLAUDE_CONFIG_DIR; its ``resume`` marks that session's current files as history). One
    observer may watch several queries; ``close`` (or leaving ``async with``) ends the spans.
    """

    def __init__(self, options: object = None, *, roots: Sequence[str] | None = None,
                 traces: str | SpanSink | None = "otlp", raw_timeout_s: float = RAW_TIMEOUT_S,
                 retry_step_s: float = RETRY_STEP_S, max_unmatched: int = 4096,
                 max_unmatched_bytes: int = 64 << 20,
                 poll_interval_s: float = POLL_INTERVAL_S,
                 sleep: Callable[[float], Awaitable[None]] | None = None,
                 clock: Callable[[], int] = time.time_ns) -> None:
        env = getattr(options, "env", None)
        self.roots = tuple(roots) if roots is not None else tuple(
            default_roots({**os.environ, **(env if isinstance(env, dict) else {})}))
        self.start_ns = clock()
        resumed = [r for r in (getattr(options, "resume", None),) if isinstance(r, str)]
        self.matcher = Matcher(self.roots, self.start_ns, resumed, max_unmatched,
                               max_unmatched_bytes=max_unmatched_bytes)
        self.raw_timeout_s = raw_timeout_s
        self.retry_step_s = retry_step_s
        self._sleep = sleep if sleep is not None else anyio.sleep
        self._waited_in_vain = False  # a full wait found no transcript at all (not persisted)
        self._one_at_a_time = anyio.Lock()  # two queries wrapped by one observer in parallel tasks
        self._told_frozen = False
        self.spans: LiveSpans | None = None
        self._closed = False
        if traces is not None:
            sink = make_sink(traces) if isinstance(traces, str) else traces
            self.spans = LiveSpans(self.roots, self.start_ns, sink, poll_interval_s)

    @property
    def stats(self) -> MatchStats:
        return self.matcher.stats

    @property
    def sink(self) -> SpanSink | None:
        return self.spans.sink if self.spans is not None else None

    # -- messages ------------------------------------------------------------------------------

    async def attach(self, message: object) -> RawEntry | None:
        """Find this message's transcript line (waiting a bounded time for it to be flushed),
        set it as ``message.raw`` and return it."""
        sid = _session_of(message)
        if sid is not None and self.matcher.watch(sid) and self.spans is not None:
            self.spans.watch(sid)
        wanted = wanted_of(message)
        raw = None
        if wanted is not None:
            async with self._one_at_a_time:
                raw = await self._find(wanted)
        self._set_raw(message, raw)
        return raw

    async def _refresh(self) -> None:
        # in a worker thread: a long transcript read from its start must not hold up the event
        # loop (the matcher is used by one call at a time: _find runs under a lock)
        await anyio.to_thread.run_sync(self.matcher.refresh)

    async def _find(self, wanted: Wanted) -> RawEntry | None:
        await self._refresh()
        raw = self.matcher.take(wanted)
        if raw is not None:
            return raw
        if self._waited_in_vain and not self.matcher.any_persisted():
            self.matcher.stats.unmatched += 1
            return None  # --no-session-persistence, or another config dir: no line will come
        deadline = time.monotonic() + self.raw_timeout_s
        while raw is None:
            final = time.monotonic() + self.retry_step_s >= deadline
            await self._sleep(self.retry_step_s)
            await self._refresh()
            raw = self.matcher.take(wanted, final=final)
            if final:
                break
        if raw is None:
            self.matcher.stats.unmatched += 1
            self._waited_in_vain = not self.matcher.any_persisted()
        else:
            self.matcher.stats.after_retry += 1
        return raw

    def _set_raw(self, message: object, raw: RawEntry | None) -> None:
        try:
            # object.__setattr__: also on a frozen dataclass; only __slots__ refuse it
            object.__setattr__(message, "raw", raw)
        except (AttributeError, TypeError):
            if not self._told_frozen:
                self._told_frozen = True
                log.warning("ccotel.sdk: %s takes no new attribute; use Observer.pairs() for the raw lines",
                            type(message).__name__)

    async def wrap(self, messages: AsyncIterable[M]) -> AsyncIterator[M]:
        """The SDK's messages, each with ``.raw`` set."""
        async for message in messages:
            await self.attach(message)
            yield message

    async def pairs(self, messages: AsyncIterable[M]) -> AsyncIterator[tuple[M, RawEntry | None]]:
        """``(message, raw)`` for each of the SDK's messages."""
        async for message in messages:
            yield message, await self.attach(message)

    # -- the end ---------------------------------------------------------------------------------

    def close(self, timeout_s: float = 5.0) -> bool:
        """Read what is left, export the last spans (waiting up to ``timeout_s`` for the
        backend). True when every span was delivered (or there are no spans)."""
        if self.spans is None or self._closed:
            return True
        self._closed = True
        return self.spans.close(timeout_s)

    async def aclose(self, timeout_s: float = 5.0) -> bool:
        return await anyio.to_thread.run_sync(self.close, timeout_s)

    async def __aenter__(self) -> Observer:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    def __enter__(self) -> Observer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


async def query(*, prompt: Any, options: Any = None, **observer: Any) -> AsyncIterator[Any]:
    """``claude_agent_sdk.query`` with every message's ``.raw`` set and the session's spans
    exported (``observer``: keyword arguments of :class:`Observer`)."""
    sdk = importlib.import_module("claude_agent_sdk")  # an optional extra: ccotel[sdk]
    async with Observer(options, **observer) as obs:
        async for message in obs.wrap(sdk.query(prompt=prompt, options=options)):
            yield message
