"""Property tests: however a transcript arrives, the spans are those of one clean read.

1. Any sequence of valid and bad lines, any split of the byte stream into reads (appended to a live
   file, polled after each, ticked now and then, a catch-up on the first), gives the same spans as
   one read of the whole file; and the bad lines change nothing: the same spans as the file
   without them.
2. Rule-based: appends of any size, truncations, rescans, ticks, a backend that goes down and comes
   back, crashes and restarts on the same state dir; in the end every span of the transcript is
   delivered exactly once.

Derandomized (the examples are the same on every run) with fixed ``max_examples``; the whole file
runs in well under a minute.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import orjson
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ccotel.assemble.closing import Timeouts
from ccotel.records import SpanRecord
from ccotel.run.pipeline import Options, Pipeline
from ccotel.store.sqlite import SqliteState as State
from tests.transcript import Transcript, text, thinking, tool_use
from tests.whole.test_bad_input import SID, assert_once, main_path, view, write

NEVER = Timeouts(quiet_ns=1 << 62, idle_ns=1 << 62, stall_ns=1 << 62)  # only the data closes a turn
# No shrinking unless asked (CCOTEL_SHRINK=1): a failure is reported at once instead of after minutes.
PHASES = [Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if os.environ.get("CCOTEL_SHRINK") else [])
SETTINGS = dict(deadline=None, derandomize=True, database=None, phases=PHASES, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Texts a model writes: braces and JSON inside strings, non-ASCII, escapes.
TEXTS = ["done", "let me look", r"\frac{a}{b} + \frac{c}{d}", '{"k": 1}{"k": 2}', "ünïcødé ✓ \u2028 ok",
         "tab\tand\nnewline", "}{", "x" * 300]

turn_plan = st.tuples(
    st.integers(0, 2),  # tool calls
    st.integers(1, 3),  # blocks in each tool-calling response
    st.integers(0, len(TEXTS) - 1),  # final text
    st.integers(1, 5000),  # final output tokens
)


def build(plan: list[tuple[int, int, int, int]], sid: str = SID, t_ms: int = 1_750_000_000_000) -> list[bytes]:
    """A Claude Code-shaped session from a plan: one line per element, each ending in a newline."""
    t = Transcript(sid, t_ms=t_ms)
    for i, (tools, blocks, final, out) in enumerate(plan):
        t.prompt(f"prompt {i} {TEXTS[final]}", parent=t.last)
        for j in range(tools):
            body: list[dict[str, Any]] = [thinking(), text(TEXTS[(i + j) % len(TEXTS)])][: blocks - 1]
            t.response(f"msg_{i}_{j}", body + [tool_use(f"toolu_{i}_{j}", command=TEXTS[j])], stop_reason="tool_use",
                       usage={"input_tokens": 3 + j, "cache_creation_input_tokens": 10 * i,
                              "cache_read_input_tokens": 100 + j, "output_tokens": 20 + j})
            t.tool_result(f"toolu_{i}_{j}", TEXTS[(i + 2 * j) % len(TEXTS)], source=t.last)
        t.response(f"msg_{i}_end", [text(TEXTS[final])], stop_reason="end_turn",
                   usage={"input_tokens": 7, "cache_creation_input_tokens": 11, "cache_read_input_tokens": 13,
                          "output_tokens": out})
    return [orjson.dumps(d) + b"\n" for d in t.lines]


# Lines that must change nothing: counted (or ignored, for unknown types) and skipped.
INERT = [
    b"{broken",
    b"not json",
    b"\xff\xfe\xfd garbage \xc3\x28",
    b"\x00" * 64,
    b"[1,2,3]",
    b'"just a string"',
    b'{"type":"summary","summary":"title","leafUuid":"nowhere"}',
    b'{"type":"brand-new-kind","payload":{"a":[1,2]}}',
    b'{"type":"queue-operation","operation":"enqueue","content":"typed ahead"}',
    b'{"type":"user","uuid":5,"message":{"role":"user","content":"wrong uuid type"}}',
    b'{"type":"assistant","message":["not","an","object"]}',
    b"   \t",
    b"",
]


@st.composite
def streams(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """(the file with bad lines, the same file without them)."""
    valid = build(draw(st.lists(turn_plan, min_size=1, max_size=3)))
    out: list[bytes] = []
    for line in valid:
        for _ in range(draw(st.integers(0, 2))):
            kind = draw(st.integers(0, 2))
            if kind < 2:
                out.append(draw(st.sampled_from(INERT)) + b"\n")
            else:  # a line cut short (a writer killed mid-line), then a newline or the next line glued on
                src = draw(st.sampled_from(valid))
                cut = src[: draw(st.integers(1, len(src) - 2))]
                out.append(cut + (b"\n" if draw(st.booleans()) else b""))
        if out and not out[-1].endswith(b"\n") and draw(st.booleans()):
            out[-1] += b"\n"
        out.append(line)
        if draw(st.integers(0, 5)) == 0:  # glue the next line on (a summary appended without a newline)
            out[-1] = out[-1].rstrip(b"\n")
    data = b"".join(out)
    if draw(st.booleans()):
        data = data.rstrip(b"\n")  # no final newline
    clean = b"".join(valid)
    return data, clean


def one_read(data: bytes) -> list[SpanRecord]:
    d = tempfile.mkdtemp(prefix="ccotel-prop-")
    try:
        root = os.path.join(d, "claude")
        write(main_path(root), data)
        spans: list[SpanRecord] = []
        Pipeline(Options(roots=(root,), timeouts=NEVER), emit=spans.extend).backfill(close_all=True)
        return spans
    finally:
        shutil.rmtree(d)


def in_pieces(data: bytes, cuts: list[int], ticks: list[bool], catch_up_first: bool) -> list[SpanRecord]:
    d = tempfile.mkdtemp(prefix="ccotel-prop-")
    try:
        root = os.path.join(d, "claude")
        path = write(main_path(root), b"")
        now = [1_750_000_100_000_000_000]  # a fixed clock: the same run every time
        spans: list[SpanRecord] = []
        p = Pipeline(Options(roots=(root,), timeouts=NEVER), emit=spans.extend, clock=lambda: now[0])
        prev = 0
        bounds = sorted({c for c in cuts if 0 < c < len(data)}) + [len(data)]
        for i, cut in enumerate(bounds):
            write(path, data[prev:cut], "ab")
            prev = cut
            if i == 0 and catch_up_first:
                p.backfill()  # ccotel starts while the file is being written
            else:
                p.poll([path])
            if ticks[i % len(ticks)]:
                now[0] += 3_000_000_000  # quiet longer than the grace for an unterminated line
                p.tick()
            else:
                now[0] += 100_000_000
        now[0] += 3_000_000_000
        p.tick()
        p.backfill(close_all=True)
        return spans
    finally:
        shutil.rmtree(d)


def same(got: list[SpanRecord], expected: list[SpanRecord]) -> None:
    assert_once(got)
    g, e = view(got), view(expected)
    assert set(g) == set(e), (sorted(e[k][2] for k in set(e) - set(g)), sorted(g[k][2] for k in set(g) - set(e)))
    assert g == e


@settings(max_examples=200, **SETTINGS)
@given(stream=streams(), data=st.data())
def test_any_split_of_any_stream_gives_the_spans_of_one_clean_read(stream, data):
    raw, clean = stream
    n = len(raw)
    interesting = [i + 1 for i, b in enumerate(raw) if b in b"}{\n"]  # cut where a reader is most easily fooled
    cut = st.one_of(st.integers(0, n), st.sampled_from(interesting)) if interesting else st.integers(0, n)
    cuts = data.draw(st.lists(cut, max_size=12), label="cuts")
    ticks = data.draw(st.lists(st.booleans(), min_size=1, max_size=6), label="ticks")
    catch_up_first = data.draw(st.booleans(), label="catch_up_first")
    whole = one_read(raw)
    same(in_pieces(raw, cuts, ticks, catch_up_first), whole)
    same(whole, one_read(clean))  # the bad lines changed nothing


# -- rule-based: appends, truncations, restarts, lost batches -----------------------------------------


class Backend:
    """Like the export queue: spans wait while the backend is down and are acknowledged in order when
    it answers; a crash (restart) loses what was waiting."""

    def __init__(self) -> None:
        self.delivered: list[SpanRecord] = []
        self.waiting: list[SpanRecord] = []
        self.down = False
        self.pipeline: Pipeline | None = None

    def emit(self, spans: list[SpanRecord]) -> None:
        self.waiting.extend(spans)
        self.flush()

    def flush(self) -> None:
        if self.down or not self.waiting or self.pipeline is None:
            return
        batch, self.waiting = self.waiting, []
        self.delivered.extend(batch)
        self.pipeline.acknowledge(batch)


class Delivery(RuleBasedStateMachine):
    """A session file written in pieces while the backend goes down and ccotel crashes and restarts."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="ccotel-sm-")
        self.root = os.path.join(self.dir, "claude")
        self.path = main_path(self.root)
        self.backend = Backend()
        self.now = 1_750_000_100_000_000_000  # a fixed clock: the same run every time
        self.script = b""
        self.written = 0
        self.p: Pipeline | None = None
        self.state: State | None = None

    @initialize(plan=st.lists(turn_plan, min_size=2, max_size=4))
    def start(self, plan):
        # timestamps around the test's clock: a restart's catch-up sees a session being written
        self.script = b"".join(build(plan, t_ms=self.now // 1_000_000 - 60_000))
        write(self.path, b"")
        self._start()

    def _start(self) -> None:
        """A (re)start after a crash: what waited for the backend is lost, the checkpoint stays."""
        if self.state is not None:
            self.state.close()
        self.state = State(os.path.join(self.dir, "state"))
        self.backend.waiting = []
        self.p = Pipeline(Options(roots=(self.root,), timeouts=NEVER), emit=self.backend.emit, clock=lambda: self.now,
                          state=self.state)
        self.backend.pipeline = self.p
        self.p.backfill()

    @precondition(lambda self: self.written < len(self.script))
    @rule(n=st.integers(1, 4000))
    def append(self, n):
        chunk = self.script[self.written: self.written + n]
        write(self.path, chunk, "ab")
        self.written += len(chunk)
        self.p.poll([self.path])

    @rule(seconds=st.sampled_from([0.1, 1.0, 3.0]))
    def tick(self, seconds):
        self.now += int(seconds * 1e9)
        self.p.tick()

    @precondition(lambda self: self.written > 0)
    @rule(frac=st.floats(0, 1))
    def truncate(self, frac):
        """The file is cut back to a line boundary; the writer then writes those lines again."""
        ends = [0] + [i + 1 for i in range(self.written) if self.script[i] == 10]
        keep = ends[int(frac * (len(ends) - 1))]
        write(self.path, self.script[:keep])
        self.written = keep
        self.p.poll([self.path])

    @rule()
    def restart(self):
        self._start()

    @rule()
    def rescan(self):
        self.p.rescan()

    @rule(down=st.booleans())
    def backend_state(self, down):
        self.backend.down = down
        self.backend.flush()

    @invariant()
    def nothing_twice(self):
        if self.p is not None:
            assert_once(self.backend.delivered)

    def teardown(self) -> None:
        try:
            if self.p is None:
                return
            write(self.path, self.script[self.written:], "ab")  # the session ends
            self.written = len(self.script)
            self.backend.down = False
            self._start()  # what was lost in the crash is read again from the checkpoint
            self.now += 3_000_000_000
            self.p.tick()
            self.p.backfill(close_all=True)
            assert_once(self.backend.delivered)
            expected = one_read(self.script)
            same(self.backend.delivered, expected)
        finally:
            if self.state is not None:
                self.state.close()
            shutil.rmtree(self.dir, ignore_errors=True)


Delivery.TestCase.settings = settings(max_examples=200, stateful_step_count=30, **SETTINGS)
test_delivery_exactly_once = Delivery.TestCase
