"""Counting through kills, as a model: random interleavings of what the pipeline thread does
(read appended lines, tick, commit, a catch-up at each start, going live) and of what the export
thread does (acknowledge any spans in flight, in any order, at every point where it can run),
with the process killed at random points (after which nothing is written, finally blocks
included). Whatever the interleaving, the counters after a last clean pass must equal what the
transcript holds, and every span must have been delivered.

test_crash does this with real processes and SIGKILL and meets a window only when the timing
does. Here the windows come from the random choices: the code before the eighth session's two
counting fixes failed in 3 of 600 examples (test_live_commits holds each of them exactly).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccotel.ledger import Ledger
from ccotel.metrics import Metrics
from ccotel.pipeline import Options, Pipeline
from ccotel.records import SpanRecord
from ccotel.state import State
from tests.test_assemble import one_tool_turn, proj
from tests.transcript import Transcript

SID = "cccccccc-1111-4222-8333-444444444444"
T0_MS = 1_800_000_000_000
TURNS = 4  # 2 API calls each


def _lines() -> list[bytes]:
    t = Transcript(SID, t_ms=T0_MS)
    for n in range(TURNS):
        one_tool_turn(t, str(n))
    return t.bytes().splitlines(keepends=True)


class World:
    """One transcript written line by line, a state dir, and the spans the backend has."""

    def __init__(self, tmp: Path) -> None:
        self.root = str(tmp / "claude")
        self.path = os.path.join(proj(self.root), f"{SID}.jsonl")
        os.makedirs(os.path.dirname(self.path))
        Path(self.path).touch()
        self.state_dir = str(tmp / "st")
        self.lines = _lines()
        self.written = 0
        self.ticked = 0  # ns the clock moved past the last line written (ticks)
        self.delivered: set[int] = set()

    def append(self, n: int) -> None:
        with open(self.path, "ab") as f:
            f.write(b"".join(self.lines[self.written:self.written + n]))
        self.written = min(self.written + n, len(self.lines))
        self.ticked = 0

    def clock(self) -> int:
        """Just after the last line written (its timestamp: 100 ms a line), plus the ticks since."""
        return (T0_MS + 100 * self.written) * 1_000_000 + 50_000_000 + self.ticked

    def pipeline(self, emit: object) -> Pipeline:
        return Pipeline(Options(roots=(self.root,)), emit=emit, clock=self.clock,  # type: ignore[arg-type]
                        state=State(self.state_dir), metrics=Metrics(),
                        ledger=Ledger.in_state_dir(self.state_dir, (self.root,)))

    def counted(self) -> float:
        s = State(self.state_dir)
        try:
            return sum(v for k, v in s.counters().items() if k.partition(":")[2].startswith("ccotel_api_calls"))
        finally:
            s.close()


def one_life(w: World, rng: random.Random, steps: int) -> None:
    """A process: a catch-up (the backend acknowledging some spans as they go), then random steps
    of both threads; then killed (the pipeline is dropped: it writes nothing more)."""
    in_flight: list[SpanRecord] = []

    def ack_some() -> None:
        """The export thread: the backend took some of the spans in flight (each with even odds)."""
        taken = [s for s in in_flight if rng.random() < 0.5]
        if taken:
            in_flight[:] = [s for s in in_flight if s not in taken]
            p.acknowledge(taken)
            w.delivered.update(s.span_id for s in taken)
            if rng.random() < 0.1:  # right after the export thread's commit, wherever the pipeline thread is
                dead[0] = True
                raise Killed

    def emit(spans: list[SpanRecord]) -> None:
        in_flight.extend(spans)
        if rng.random() < 0.5:  # a fast backend: some are acknowledged while the catch-up goes on
            ack_some()

    p = w.pipeline(emit)
    dead = [False]  # a SIGKILL runs no finally block: from then on nothing is written
    assert p.state is not None and p.ledger is not None
    _unless(dead, p.state, "_write")
    _unless(dead, p.ledger, "record")
    # The export thread may run whenever the pipeline thread does not hold the delivery's lock:
    # between the steps of a commit (after the done owners, after the acknowledgements kept
    # back are taken), and after each commit (inside a catch-up too).
    _then(p.delivery, "finish_owners", ack_some)
    _then(p.delivery, "checkpoint_offsets", ack_some, before=True)
    _then(p, "process_acks", ack_some)
    try:
        run_until_killed(w, p, rng, steps, ack_some)
    except Killed:
        pass
    p.state.close()  # type: ignore[union-attr]


class Killed(Exception):
    """SIGKILL: the pipeline is dropped where it is."""


def run_until_killed(w: World, p: Pipeline, rng: random.Random, steps: int, ack_some: Callable[[], None]) -> None:
    """The catch-up, then random steps of both threads, until the process is killed."""
    p.backfill()
    for _ in range(steps):
        op = rng.choice(("append", "ack", "ack", "commit", "tick", "live", "kill"))
        if op == "kill":
            break
        if op == "append":
            w.append(rng.randint(1, 4))
            p.poll([w.path])
        elif op == "ack":
            ack_some()
        elif op == "commit":
            p.process_acks()
        elif op == "tick":
            w.ticked += 2_000_000_000  # past the quiet time: a finished turn closes
            p.tick()
        elif op == "live":
            p.go_live(3600.0)


@settings(max_examples=int(os.environ.get("MODEL_EXAMPLES", "150")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), lives=st.integers(1, 8), steps=st.integers(0, 30))
def test_every_api_call_is_counted_once_whatever_the_kills(tmp_path_factory, seed, lives, steps):
    w = World(tmp_path_factory.mktemp("model"))
    rng = random.Random(seed)
    first = w.pipeline(lambda spans: first.acknowledge(spans))
    first.backfill()  # the first catch-up, of an empty file: from here on calls count
    first.process_acks()
    first.state.close()  # type: ignore[union-attr]
    for _ in range(lives):
        one_life(w, rng, steps)
        if rng.random() < 0.5:
            w.append(rng.randint(1, 6))  # written while ccotel was down
    w.append(len(w.lines))
    last = w.pipeline(lambda spans: (last.acknowledge(spans), w.delivered.update(s.span_id for s in spans)))
    last.backfill(close_all=True)
    last.process_acks()
    expected = {s.span_id for s in _spans_of(w)}
    assert expected <= w.delivered  # nothing lost
    assert w.counted() == 2 * TURNS  # each API call counted once


def _then(obj: object, name: str, step: Callable[[], None], before: bool = False) -> None:
    """``obj.name`` calls ``step`` once it has run, or ``before`` it runs (this instance only)."""
    real = getattr(obj, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if before:
            step()
        out = real(*args, **kwargs)
        if not before:
            step()
        return out

    setattr(obj, name, wrapped)


def _unless(dead: list[bool], obj: object, name: str) -> None:
    """``obj.name`` does nothing once ``dead[0]`` is set."""
    real = getattr(obj, name)
    setattr(obj, name, lambda *args, **kwargs: None if dead[0] else real(*args, **kwargs))


def _spans_of(w: World) -> list[SpanRecord]:
    out: list[SpanRecord] = []
    Pipeline(Options(roots=(w.root,)), emit=out.extend).backfill(close_all=True)
    return out
