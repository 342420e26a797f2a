"""Bad input, one test per case: every bad file or line is a counted reason (``Pipeline.stats.errors``,
the ``ccotel_parse_errors_total{reason}`` metric, logged once), the valid lines around it still give
exactly their spans, nothing crashes or hangs, and nothing already read is lost or sent twice.

Line cases compare the spans of a transcript holding the bad line with the spans of the same
transcript without it (span id -> trace, parent, name, times, status, usage attributes).
"""

from __future__ import annotations

import builtins
import contextlib
import copy
import json
import logging
import os
import random
import resource
import signal
import time
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from ccotel.assemble import ids
from ccotel.export.otlp import encode_span
from ccotel.metrics.counters import Metrics
from ccotel.read.parse import parse_line
from ccotel.records import SpanRecord
from ccotel.run.pipeline import Options, Pipeline
from ccotel.store.sqlite import SqliteState as State
from tests.transcript import Transcript, text, thinking, tool_use

SID = "bad00000-1111-4222-8333-444444444444"
SID2 = "bad00000-2222-4222-8333-444444444444"
USAGE_KEYS = ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.usage.cache_read.input_tokens",
              "gen_ai.usage.cache_creation.input_tokens", "claude_code.usage.input_tokens")


# -- helpers ---------------------------------------------------------------------------------


def proj(root: str, name: str = "-tmp-proj") -> str:
    return os.path.join(root, "projects", name)


def main_path(root: str, sid: str = SID, project: str = "-tmp-proj") -> str:
    return os.path.join(proj(root, project), f"{sid}.jsonl")


def tool_turn(t: Transcript, n: str) -> None:
    """prompt, a 3-line response ending in a tool_use, its result, a final answer: 6 lines, 4 spans."""
    t.prompt(f"list files {n}", parent=t.last)
    t.response(f"msg_a{n}", [thinking(), text("let me look"), tool_use(f"toolu_{n}")], stop_reason="tool_use")
    t.tool_result(f"toolu_{n}", "a b c", source=t.last)
    t.response(f"msg_b{n}", [text("done")], stop_reason="end_turn",
               usage={"input_tokens": 7, "cache_creation_input_tokens": 11, "cache_read_input_tokens": 13,
                      "output_tokens": 17})


def session(sid: str = SID, turns: int = 2, t_ms: int | None = None, tag: str = "") -> Transcript:
    t = Transcript(sid, **({"t_ms": t_ms} if t_ms is not None else {}))
    for i in range(turns):
        tool_turn(t, f"{tag}{i + 1}")
    return t


def dump(objs: list[dict[str, Any]]) -> list[bytes]:
    return [orjson.dumps(o) + b"\n" for o in objs]


def write(path: str, data: bytes | list[bytes], mode: str = "wb") -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, mode) as f:
        f.write(data if isinstance(data, bytes) else b"".join(data))
    return path


def backfill(root: str, **opts: Any) -> tuple[list[SpanRecord], Pipeline]:
    spans: list[SpanRecord] = []
    p = Pipeline(Options(roots=(root,), **opts), emit=spans.extend)
    p.backfill(close_all=True)
    return spans, p


def spans_of_file(base: str, data: bytes | list[bytes], sid: str = SID,
                  **opts: Any) -> tuple[list[SpanRecord], Pipeline]:
    """One clean read of one session file holding ``data``, in a fresh root under ``base``."""
    root = os.path.join(base, f"r{next(_roots)}")
    write(main_path(root, sid), data)
    return backfill(root, **opts)


_roots = iter(range(1 << 30))


def view(spans: list[SpanRecord]) -> dict[int, tuple[Any, ...]]:
    out: dict[int, tuple[Any, ...]] = {}
    for s in spans:
        out[s.span_id] = (s.trace_id, s.parent_span_id, s.name, s.start_ns, s.end_ns, s.status,
                          tuple(s.attributes.get(k) for k in USAGE_KEYS))
    return out


def assert_once(spans: list[SpanRecord]) -> None:
    dup = [(s.name, s.attributes.get("gen_ai.tool.call.id") or s.attributes.get("gen_ai.response.id"))
           for s, n in ((s, Counter(x.span_id for x in spans)[s.span_id]) for s in spans) if n > 1]
    assert not dup, f"spans delivered more than once: {dup}"


def assert_same_spans(got: list[SpanRecord], expected: list[SpanRecord], extra: set[int] = frozenset()) -> None:
    """Every expected span, identical; nothing else except the ``extra`` span ids (the bad line's own)."""
    assert_once(got)
    g, e = view(got), view(expected)
    missing = [e[k][2] for k in e if k not in g]
    assert not missing, f"spans of valid lines lost: {missing}"
    changed = {e[k][2]: (g[k], e[k]) for k in e if g[k] != e[k]}
    assert not changed, f"spans of valid lines changed (got, expected): {changed}"
    unexpected = [g[k][2] for k in g if k not in e and k not in extra]
    assert not unexpected, f"unexpected spans: {unexpected}"


@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Turn a hang into a failure (SIGALRM; pytest runs tests in the main thread)."""
    def on_alarm(_sig, _frame):  # type: ignore[no-untyped-def]
        raise TimeoutError(f"did not finish within {seconds} s")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


class Live:
    """A pipeline following a root with a hand-driven clock; ``finish`` closes everything."""

    def __init__(self, root: str, state: State | None = None, metrics: Metrics | None = None,
                 backend: list[SpanRecord] | None = None, **opts: Any) -> None:
        self.root = root
        self.now = time.time_ns()
        self.spans: list[SpanRecord] = [] if backend is None else backend
        holder: list[Pipeline] = []

        def emit(spans: list[SpanRecord]) -> None:
            self.spans.extend(spans)
            if state is not None:
                holder[0].acknowledge(spans)

        self.p = Pipeline(Options(roots=(root,), **opts), emit=emit, clock=lambda: self.now, state=state,
                          metrics=metrics)
        holder.append(self.p)

    def advance(self, seconds: float) -> None:
        self.now += int(seconds * 1e9)

    def tick(self, seconds: float = 3.0) -> None:
        self.advance(seconds)
        self.p.tick()

    def finish(self) -> list[SpanRecord]:
        self.p.backfill(close_all=True)
        return self.spans


def recent_ms(ago_s: float = 60.0) -> int:
    return int(time.time() * 1000 - ago_s * 1000)


# -- files -----------------------------------------------------------------------------------


def test_truncated_file_is_read_again_nothing_lost_or_doubled(tmp_path):
    root = str(tmp_path / "claude")
    t = session(turns=3)
    lines = t.bytes().splitlines(keepends=True)
    path = write(main_path(root), lines[:12])  # turns 1 and 2
    live = Live(root)
    live.p.backfill()
    assert len(live.spans) == 8
    write(path, lines[:6])  # truncated to turn 1 (shorter than what was read) ...
    live.p.poll([path])
    write(path, lines[12:], "ab")  # ... then turn 3 is written after it
    live.p.poll([path])
    spans = live.finish()
    assert live.p.stats.file_resets == 1
    assert not live.p.stats.errors
    # turn 2 was already read: kept; turn 1 read again: not sent again; turn 3: once
    assert_same_spans(spans, spans_of_file(str(tmp_path), lines)[0])


def test_truncated_during_an_open_turn_sends_nothing_twice(tmp_path):
    root = str(tmp_path / "claude")
    t = session(turns=2, t_ms=recent_ms())
    lines = t.bytes().splitlines(keepends=True)
    path = write(main_path(root), lines[:11])  # turn 2: prompt, response with tool_use, tool result
    live = Live(root)
    live.p.backfill()
    assert live.p.assembler.open_count() == 1
    write(path, lines[:8])  # truncated in the middle of the open turn, then written again
    live.p.poll([path])
    write(path, lines[8:], "ab")
    live.p.poll([path])
    spans = live.finish()
    assert live.p.stats.file_resets == 1
    assert_same_spans(spans, spans_of_file(str(tmp_path), lines)[0])


def test_file_replaced_at_the_same_path(tmp_path):
    root = str(tmp_path / "claude")
    t = session(turns=3, t_ms=recent_ms())
    lines = t.bytes().splitlines(keepends=True)
    path = write(main_path(root), lines[:11])  # turn 2 open
    live = Live(root)
    live.p.backfill()
    ino = os.stat(path).st_ino
    new = write(path + ".tmp", lines)  # the whole session, written to a new file and renamed over it
    os.replace(new, path)
    assert os.stat(path).st_ino != ino
    live.p.poll([path])
    spans = live.finish()
    assert live.p.stats.file_resets == 1
    assert not live.p.stats.errors
    assert_same_spans(spans, spans_of_file(str(tmp_path), lines)[0])


def test_deleted_file_is_forgotten_on_rescan(tmp_path):
    root = str(tmp_path / "claude")
    data = session(SID).bytes()
    a = write(main_path(root, SID), data)
    t2 = session(SID2, turns=1, tag="x")
    b = write(main_path(root, SID2), t2.bytes())
    state = State(str(tmp_path / "st"))
    live = Live(root, state=state)
    live.p.backfill(close_all=True)
    assert set(live.p.files) == {a, b} and set(state.files()) == {a, b}
    os.unlink(a)  # Claude Code's cleanup (cleanupPeriodDays)
    live.p.poll([a])  # a late watcher event for the deleted file
    live.p.rescan()
    assert set(live.p.files) == {b}
    assert set(state.files()) == {b}  # the checkpoint is dropped too
    t2.lines = []
    tool_turn(t2, "x2")
    write(b, t2.bytes(), "ab")
    live.p.poll([b])
    spans = live.finish()
    assert not live.p.stats.errors
    expected = spans_of_file(str(tmp_path), data)[0]
    expected += spans_of_file(str(tmp_path), open(b, "rb").read(), sid=SID2)[0]
    assert_same_spans(spans, expected)


def test_renamed_transcript_within_the_root(tmp_path):
    root = str(tmp_path / "claude")
    t = session(turns=2, t_ms=recent_ms())
    lines = t.bytes().splitlines(keepends=True)
    old = write(main_path(root), lines[:11])  # turn 2 open: its tool call has its result
    live = Live(root)
    live.p.backfill()
    assert live.p.assembler.open_count() == 1
    new = os.path.join(proj(root, "-tmp-other"), f"{SID}.jsonl")
    os.makedirs(os.path.dirname(new))
    os.rename(old, new)
    live.p.poll([old, os.path.dirname(new)])  # moved_from, then the new directory
    live.p.rescan()
    assert set(live.p.files) == {new}
    write(new, lines[11:], "ab")  # the session goes on in the renamed file
    live.p.poll([new])
    spans = live.finish()
    assert not live.p.stats.errors
    assert_same_spans(spans, spans_of_file(str(tmp_path), lines)[0])


def test_directory_created_later_is_read_when_polled(tmp_path):
    root = str(tmp_path / "claude")
    os.makedirs(os.path.join(root, "projects"))
    live = Live(root)
    live.p.backfill()
    assert live.spans == []
    d = proj(root, "-tmp-new")
    t = Transcript(SID)
    t.prompt("delegate", parent=None)
    t.response("msg_1", [tool_use("toolu_t", name="Task", subagent_type="Explore", prompt="sub task")],
               stop_reason="tool_use")
    sub = Transcript(SID, agent_id="a1", t_ms=t.t_ms)
    sub.prompt("sub task", parent=None)
    sub.response("msg_s", [text("found it")], stop_reason="end_turn")
    t.t_ms = sub.t_ms
    t.tool_result("toolu_t", "found it", tool_use_result={"agentId": "a1", "status": "completed"})
    t.response("msg_2", [text("done")], stop_reason="end_turn")
    write(os.path.join(d, f"{SID}.jsonl"), t.bytes())
    live.p.poll([d])  # the watcher reports the new project directory, nothing else
    sub_dir = os.path.join(d, SID, "subagents")
    write(os.path.join(sub_dir, "agent-a1.jsonl"), sub.bytes())
    write(os.path.join(sub_dir, "agent-a1.meta.json"), orjson.dumps({"agentType": "Explore", "toolUseId": "toolu_t"}))
    live.p.poll([os.path.join(d, SID)])  # then the session's directory (subagents/ inside it)
    spans = live.finish()
    assert not live.p.stats.errors
    expected, _ = backfill(root)
    assert len(expected) == 6  # turn, 3 chats, the Task call, the agent
    assert_same_spans(spans, expected)
    agent = next(s for s in spans if s.name == "invoke_agent Explore")
    assert agent.parent_span_id == ids.span_id("tool", SID, "toolu_t")


def test_file_created_before_its_directory_watch_is_found_by_rescan(tmp_path):
    root = str(tmp_path / "claude")
    os.makedirs(os.path.join(root, "projects"))
    live = Live(root)
    live.p.backfill()
    data = session().bytes()
    write(main_path(root, project="-tmp-fast"), data)  # no event: written before any watch existed
    live.p.rescan()
    spans = live.finish()
    assert_same_spans(spans, spans_of_file(str(tmp_path), data)[0])


def test_symlinks_pointing_outside_the_root_are_never_read(tmp_path, monkeypatch):
    root = str(tmp_path / "claude")
    outside = str(tmp_path / "elsewhere")
    secret = write(os.path.join(outside, "-x", f"{SID2}.jsonl"), session(SID2, tag="s").bytes())
    data = session().bytes()
    write(main_path(root), data)
    link_file = os.path.join(proj(root), f"{SID2}.jsonl")
    os.symlink(secret, link_file)  # a symlinked transcript
    link_dir = proj(root, "-linked")
    os.symlink(os.path.join(outside, "-x"), link_dir)  # a symlinked project directory
    opened: list[str] = []
    real_open = builtins.open

    def spy_open(file, *a, **kw):  # type: ignore[no-untyped-def]
        if isinstance(file, (str, bytes, os.PathLike)):
            opened.append(os.path.realpath(file))
        return real_open(file, *a, **kw)

    monkeypatch.setattr(builtins, "open", spy_open)
    live = Live(root)
    live.p.backfill()
    live.p.rescan()
    live.p.poll([link_file, link_dir, os.path.join(link_dir, f"{SID2}.jsonl")])
    live.tick()
    spans = live.finish()
    monkeypatch.setattr(builtins, "open", real_open)
    assert os.path.realpath(secret) not in opened
    assert not any(s.attributes.get("gen_ai.conversation.id") == SID2 for s in spans)
    assert live.p.stats.errors["path_outside_root"] >= 1  # a path handed in is counted; the scan skips
    assert set(live.p.stats.errors) == {"path_outside_root"}
    assert_same_spans(spans, spans_of_file(str(tmp_path), data)[0])


def test_symlink_loops_inside_the_root_do_not_hang(tmp_path):
    root = str(tmp_path / "claude")
    data = session().bytes()
    path = write(main_path(root), data)
    p = proj(root)
    os.symlink("..", os.path.join(p, "up"))  # projects/-tmp-proj/up -> projects
    os.symlink(".", os.path.join(p, "self"))
    os.makedirs(os.path.join(p, SID, "subagents"))
    os.symlink("../..", os.path.join(p, SID, "subagents", "back"))
    os.symlink("agent-b.jsonl", os.path.join(p, SID, "subagents", "agent-a.jsonl"))  # a file loop
    os.symlink("agent-a.jsonl", os.path.join(p, SID, "subagents", "agent-b.jsonl"))
    with time_limit(30):
        live = Live(root)
        live.p.backfill()
        for _ in range(3):
            live.p.rescan()
        live.p.poll([os.path.join(p, "up"), os.path.join(p, "self"), os.path.join(p, SID),
                     os.path.join(p, SID, "subagents", "back"), os.path.join(p, SID, "subagents", "agent-a.jsonl"),
                     path])
        live.tick()
        spans = live.finish()
    assert_same_spans(spans, spans_of_file(str(tmp_path), data)[0])
    # a file loop is unreadable (counted); nothing here points outside the root
    assert set(live.p.stats.errors) <= {"unreadable"}, live.p.stats.errors


def test_permission_denied_is_counted_and_read_once_permission_returns(tmp_path, monkeypatch):
    """chmod 000 on a transcript. Running as root, chmod 000 does not stop reads: then opening that
    path is made to fail with EACCES (builtins.open patched for that one file), as it would for a
    non-root user."""
    root = str(tmp_path / "claude")
    good = write(main_path(root, SID2), session(SID2, tag="g").bytes())
    data = session().bytes()
    locked = write(main_path(root), data)
    os.chmod(locked, 0)
    as_root = False
    try:
        with open(locked, "rb"):
            as_root = True  # root reads anyway
    except PermissionError:
        pass
    real_open = builtins.open

    def denying_open(file, *a, **kw):  # type: ignore[no-untyped-def]
        if isinstance(file, (str, os.PathLike)) and os.path.realpath(file) == os.path.realpath(locked):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *a, **kw)

    if as_root:
        monkeypatch.setattr(builtins, "open", denying_open)
    metrics = Metrics()
    live = Live(root, metrics=metrics)
    live.p.backfill()
    assert live.p.stats.errors == Counter({"unreadable": 1})
    assert {s.attributes["gen_ai.conversation.id"] for s in live.spans} == {SID2}  # the others are read
    for _ in range(3):  # the file stays unreadable for a while: one bad file, one count
        live.tick()
    assert metrics.value("ccotel_parse_errors", "unreadable") == 1
    os.chmod(locked, 0o600)
    monkeypatch.setattr(builtins, "open", real_open)
    live.p.poll([locked])
    spans = live.finish()
    expected = (spans_of_file(str(tmp_path), data)[0]
                + spans_of_file(str(tmp_path), open(good, "rb").read(), sid=SID2)[0])
    assert_same_spans(spans, expected)


def test_directory_where_a_transcript_is_expected(tmp_path):
    root = str(tmp_path / "claude")
    data = session().bytes()
    write(main_path(root), data)
    odd = main_path(root, SID2)
    os.makedirs(os.path.join(odd, "subagents"))  # <session>.jsonl is a directory
    write(os.path.join(odd, "subagents", "agent-x.jsonl"), b"{}\n")
    live = Live(root)
    live.p.backfill()
    live.p.poll([odd])
    live.p.rescan()
    live.tick()
    spans = live.finish()
    assert odd not in live.p.files
    assert_same_spans(spans, spans_of_file(str(tmp_path), data)[0])


def tiny_sessions(root: str, n: int) -> None:
    for i in range(n):
        sid = f"{i:08x}-0000-4000-8000-000000000000"
        t = Transcript(sid, t_ms=1_750_000_000_000 + i * 1000)
        t.prompt(f"hello {i}", parent=None)
        t.response(f"msg_{i}", [text("hi")], stop_reason="end_turn")
        write(main_path(root, sid, project=f"-tmp-p{i % 100}"), t.bytes())


def test_ten_thousand_session_files(tmp_path):
    """Discovery and backfill of 10k tiny sessions: every span once, in time linear in the number
    of files (1k files are timed as the yardstick), with spans not acknowledged yet (a backend that
    is slow or down: the spans wait in the queue)."""
    took = {}
    for n in (1_000, 10_000):
        root = str(tmp_path / f"claude{n}")
        tiny_sessions(root, n)
        t0 = time.monotonic()
        spans, p = backfill(root)
        took[n] = time.monotonic() - t0
        assert p.stats.files == n and not p.stats.errors
        assert len(spans) == 2 * n and len({s.span_id for s in spans}) == 2 * n
        assert Counter(s.name for s in spans) == {"invoke_agent claude-code": n, "chat claude-opus-4-6": n}
        assert {s.attributes["gen_ai.usage.output_tokens"] for s in spans if s.name.startswith("chat")} == {50}
    t0 = time.monotonic()
    p.rescan()
    rescan_took = time.monotonic() - t0
    print(f"backfill: 1k files {took[1_000]:.1f}s, 10k files {took[10_000]:.1f}s; rescan of 10k {rescan_took:.1f}s")
    assert rescan_took < 20
    assert took[10_000] < 60
    assert took[10_000] < 25 * max(took[1_000], 0.2), "backfill time grows faster than the number of files"


# -- lines -------------------------------------------------------------------------------------
#
# The base transcript (two tool turns, 12 lines): index 0 prompt, 1-3 msg_a1 (thinking, text,
# tool_use), 4 tool_result, 5 msg_b1, 6-11 the same for turn 2. A bad line is inserted as a side
# branch of a valid line, with that line's timestamp.


def base() -> Transcript:
    return session(turns=2)


def insert(t: Transcript, at: int, *bad: bytes) -> list[bytes]:
    lines = dump(t.lines)
    return lines[:at] + list(bad) + lines[at:]


def side_line(t: Transcript, of: int, **changes: Any) -> dict[str, Any]:
    """A copy of line ``of`` as a new line hanging under it (new uuid, same timestamp)."""
    d = copy.deepcopy(t.lines[of])
    d["uuid"] = f"side{of:04d}-0000-4000-8000-{len(changes):012d}"
    d["parentUuid"] = t.lines[of]["uuid"]
    d.update(changes)
    return d


def check_line_case(tmp_path, t: Transcript, lines: list[bytes], reasons: Counter[str],
                    extra: set[int] = frozenset()) -> tuple[list[SpanRecord], Pipeline]:
    clean, _ = spans_of_file(str(tmp_path), dump(t.lines))
    got, p = spans_of_file(str(tmp_path), lines)
    assert p.stats.errors == reasons
    assert_same_spans(got, clean, extra)
    return got, p


def test_malformed_json(tmp_path):
    t = base()
    bad = [b'{"type":"assistant","uuid":"x","message":{"id":"msg_a1","content":[{"type":"text"\n',  # cut short
           b"not json at all\n",
           b'{"type":"user"}}\n']  # an object, then a stray brace: the object is kept
    for line in bad:  # one bad line is one count, however many objects it opened
        assert parse_line(line, 0).errors == ["malformed_json"], line
    check_line_case(tmp_path, t, insert(t, 2, *bad), Counter(malformed_json=3))


def test_glued_objects_on_one_line_are_both_kept(tmp_path):
    t = base()
    lines = dump(t.lines)
    glued = lines[:3] + [lines[3].rstrip(b"\n") + lines[4]] + lines[5:]  # tool_use line + its tool_result
    summary = b'{"type":"summary","summary":"Listing files","leafUuid":"%s"}' % t.lines[-1]["uuid"].encode()
    glued[-1] = glued[-1].rstrip(b"\n") + summary + b"\n"  # a summary appended without a newline
    got, p = check_line_case(tmp_path, t, glued, Counter())
    assert p.stats.entries == len(t.lines) + 1


def test_partial_last_line_is_held_until_complete(tmp_path):
    root = str(tmp_path / "claude")
    t = session(turns=2, t_ms=recent_ms(10))  # being written right now
    data = t.bytes()
    cut = len(data) - 40  # in the middle of the last line
    path = write(main_path(root), data[:cut])
    live = Live(root)
    live.p.backfill()  # a catch-up on a file whose writer is in the middle of a line
    live.tick()
    live.tick()
    assert not live.p.stats.errors  # not an error: the rest is on its way
    write(path, data[cut:], "ab")
    live.p.poll([path])
    spans = live.finish()
    assert not live.p.stats.errors
    assert_same_spans(spans, spans_of_file(str(tmp_path), data)[0])


def test_partial_line_with_braces_in_its_text_is_not_taken_early(tmp_path):
    """ccotel starts (a catch-up takes an unterminated last line at once) while Claude Code is in the
    middle of writing a line whose text holds '}{' (LaTeX, code) and the cut falls after a '}': the
    half line does not parse and must wait for the rest, like any other partial line."""
    root = str(tmp_path / "claude")
    t = Transcript(SID, t_ms=recent_ms(10))
    t.prompt("typeset it", parent=None)
    t.response("msg_1", [text(r"\frac{a}{b} + \frac{c}{d}")], stop_reason="end_turn")
    data = t.bytes()
    cut = data.index(b"{c}") + 3
    path = write(main_path(root), data[:cut])
    live = Live(root)
    live.p.backfill()
    write(path, data[cut:], "ab")
    live.p.poll([path])
    spans = live.finish()
    assert not live.p.stats.errors
    assert_same_spans(spans, spans_of_file(str(tmp_path), data)[0])


def test_file_without_final_newline(tmp_path):
    t = base()
    data = t.bytes().rstrip(b"\n")
    check_line_case(tmp_path, t, [data], Counter())  # history: the last line is taken as it is
    root = str(tmp_path / "live")
    os.makedirs(os.path.join(root, "projects"))
    live = Live(root)
    live.p.backfill()
    path = write(main_path(root), data)
    live.p.poll([path])
    before = live.p.stats.lines
    live.tick(0.5)  # live: not yet, the writer may be in the middle of it
    assert live.p.stats.lines == before
    live.tick(3.0)  # quiet long enough: taken
    assert live.p.stats.lines == before + 1
    write(path, b"\n", "ab")  # the newline arrives after all: nothing read twice
    live.p.poll([path])
    spans = live.finish()
    assert live.p.stats.lines == len(t.lines) and not live.p.stats.errors
    assert_same_spans(spans, spans_of_file(str(tmp_path), t.bytes())[0])


def test_unterminated_last_line_after_a_line_cut_short(tmp_path):
    """A writer killed mid-line, resumed: its next line is glued onto the cut one, and it is the last
    line of a file without a final newline (a session that ended so). Once the file is quiet, the
    broken part is counted and the complete object after it is read like any glued object."""
    t = base()
    lines = dump(t.lines)
    last = lines[-2][:150] + lines[-1].rstrip(b"\n")  # the msg_a2... line cut, then msg_b2 glued on
    bad = lines[:-1] + [last]
    got, p = spans_of_file(str(tmp_path), bad)  # a catch-up of history: the file is quiet
    assert p.stats.errors == Counter(malformed_json=1)
    clean, _ = spans_of_file(str(tmp_path), lines)
    assert_same_spans(got, clean)


def test_invalid_utf8(tmp_path):
    t = base()
    lines = dump(t.lines)
    # a byte that is not UTF-8 inside a valid line's text: the line is kept, the reason counted
    lines[4] = lines[4].replace(b'"a b c"', b'"a \xff\xfe c"')
    assert b"\xff" in lines[4]
    bad = insert(t, 2, b"\xff\xfe\xfd\xc3\x28\n")
    bad[5] = lines[4]
    check_line_case(tmp_path, t, bad, Counter(invalid_utf8=2))  # the garbage line: its first reason only


def test_a_bad_line_is_one_error_of_its_first_reason(tmp_path):
    """Bytes that are neither UTF-8 nor JSON are one error (invalid_utf8), not one per fault found;
    a megabyte of binary is at most one error per line it holds."""
    t = base()
    garbage = b"\xff\xfe garbage\n"  # printf '\xff\xfe garbage\n'
    assert parse_line(garbage, 0).errors == ["invalid_utf8"]
    check_line_case(tmp_path, t, insert(t, 2, garbage), Counter(invalid_utf8=1))
    blob = random.Random(27).randbytes(1 << 20)
    n_lines = len([x for x in blob.split(b"\n") if x.strip()])
    _, p = spans_of_file(str(tmp_path), insert(t, 2, blob + b"\n"))
    assert 0 < sum(p.stats.errors.values()) <= n_lines, p.stats.errors


def test_nul_bytes(tmp_path):
    t = base()
    lines = dump(t.lines)
    # a run of NULs where a crash left preallocated space, then the next line glued after NULs
    bad = lines[:6] + [b"\x00" * 4096 + b"\n", b"\x00\x00\x00" + lines[6]] + lines[7:]
    check_line_case(tmp_path, t, bad, Counter(nul_bytes=2))


def test_hundred_megabyte_line_is_skipped_with_bounded_memory(tmp_path):
    """Default options (max_line_bytes 64 MiB): a 100 MB line is skipped and counted, and reading
    it must not hold it (nor the first 64 MiB of it) in memory."""
    t = base()
    lines = dump(t.lines)
    root = str(tmp_path / "claude")
    path = main_path(root)
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.writelines(lines[:2])
        f.write(b'{"type":"user","message":{"content":"')
        block = b"x" * (1 << 20)
        for _ in range(100):
            f.write(block)
        f.write(b'"}}\n')
        f.writelines(lines[2:])
    del block
    spans: list[SpanRecord] = []
    p = Pipeline(Options(roots=(root,)), emit=spans.extend)
    tracemalloc.start()
    try:
        p.backfill(close_all=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert p.stats.errors == Counter(line_too_long=1)
    assert_same_spans(spans, spans_of_file(str(tmp_path), lines)[0])
    print(f"peak traced memory reading a 100 MB line: {peak / 2**20:.1f} MiB "
          f"(maxrss {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB)")
    assert peak < 32 << 20, f"peak {peak / 2**20:.0f} MiB while skipping a 100 MB line"


# Wrong types, field by field: (line to copy, field path, bad value, reasons counted).
# Line 2 is the second line of msg_a1 (a text block), line 4 the tool_result line.
WRONG_TYPES = [
    (4, "uuid", 12345, {"bad_field": 1}),
    (4, "parentUuid", 7, {"bad_field": 1}),
    (4, "sessionId", ["s"], {"bad_field": 1}),
    (4, "timestamp", "garbage", {"bad_timestamp": 1}),
    (4, "timestamp", 1750000000, {"bad_timestamp": 1}),
    (4, "type", 5, {"bad_field": 1}),
    (4, "message", ["role", "user"], {"bad_field": 1}),
    (4, "message", "hello", {"bad_field": 1}),
    (4, "message.content", {"type": "text", "text": "x"}, {"bad_field": 1}),
    (4, "message.content", [5], {"bad_field": 1}),
    (4, "message.content.0.type", 5, {"bad_field": 1}),
    (4, "message.content.0.tool_use_id", 5, {"bad_field": 1}),
    (4, "message.content.0.is_error", "yes", {"bad_field": 1}),
    (4, "sourceToolAssistantUUID", 7, {"bad_field": 1}),
    (4, "isSidechain", "false", {"bad_field": 1}),
    (4, "isMeta", 1, {"bad_field": 1}),
    (4, "isCompactSummary", "yes", {"bad_field": 1}),
    (4, "cwd", 5, {"bad_field": 1}),
    (4, "version", 2.1, {"bad_field": 1}),
    (4, "gitBranch", {"name": "main"}, {"bad_field": 1}),
    (4, "agentId", 5, {"bad_field": 1}),
    (4, "entrypoint", True, {"bad_field": 1}),
    (4, "logicalParentUuid", 5, {"bad_field": 1}),
    (2, "message", [], {"bad_field": 1}),
    (2, "message.id", 5, {"bad_field": 1}),
    (2, "message.model", 4.6, {"bad_field": 1}),
    (2, "message.stop_reason", 5, {"bad_field": 1}),
    (2, "message.usage", "lots", {"bad_field": 1}),
    (2, "message.usage.input_tokens", "3", {"bad_field": 1}),
    (2, "message.usage.output_tokens", -1, {"bad_field": 1}),
    (2, "message.usage.cache_read_input_tokens", 1.5, {"bad_field": 1}),
    (2, "message.usage.cache_creation", "x", {"bad_field": 1}),
    (2, "message.usage.cache_creation", {"ephemeral_5m_input_tokens": "100"}, {"bad_field": 1}),
    (2, "message.content", {"type": "text", "text": "x"}, {"bad_field": 1}),
    (2, "message.content", 5, {"bad_field": 1}),
    (2, "message.content.0", "text", {"bad_field": 1}),
    (2, "message.content.0", {"type": "tool_use", "id": 5, "name": "Bash", "input": {}}, {"bad_field": 1}),
    (2, "message.content.0", {"type": "tool_use", "id": "toolu_z", "name": ["Bash"], "input": {}},
     {"bad_field": 1}),
    (2, "requestId", 5, {"bad_field": 1}),
    (2, "isApiErrorMessage", "true", {"bad_field": 1}),
    (2, "isSidechain", 1, {"bad_field": 1}),
]


def set_path(d: dict[str, Any], path: str, value: Any) -> None:
    keys = path.split(".")
    for k in keys[:-1]:
        d = d[int(k)] if isinstance(d, list) else d[k]
    last = keys[-1]
    if isinstance(d, list):
        d[int(last)] = value
    else:
        d[last] = value


@pytest.mark.parametrize("of,field,value,reasons", WRONG_TYPES,
                         ids=[f"{'user' if of == 4 else 'assistant'}-{f}={v!r}"[:60] for of, f, v, _ in WRONG_TYPES])
def test_wrong_type_in_a_field(tmp_path, of, field, value, reasons):
    t = base()
    bad = side_line(t, of)
    set_path(bad, field, value)
    lines = insert(t, of + 1, orjson.dumps(bad) + b"\n")
    mid = t.lines[of]["message"].get("id") if of == 2 else None
    # the bad line is a block of msg_a1: at most it may have a chat span of its own
    extra = {ids.span_id("chat", k) for k in (f"{mid}:req_{mid}", mid)} if mid else set()
    check_line_case(tmp_path, t, lines, Counter(reasons), extra)


def test_out_of_range_numbers_and_dates_still_make_exportable_spans(tmp_path):
    """Numbers JSON allows but OTLP cannot carry (token counts beyond int64, dates before 1970) are
    bad fields: counted, and every span still encodes to a valid OTLP message."""
    from opentelemetry.proto.trace.v1 import trace_pb2

    t = base()
    huge = side_line(t, 2)
    huge["message"]["usage"] = {"input_tokens": 1e300, "output_tokens": 2**70, "cache_read_input_tokens": 3,
                                "cache_creation_input_tokens": 4}  # orjson cannot even write this: json
    huge["message"]["id"] = "msg_huge"
    huge["requestId"] = "req_huge"
    later = Transcript(SID, t_ms=t.t_ms)
    later.prompt("a prompt from year 1", parent=t.last)
    later.lines[0]["timestamp"] = "0001-01-01T00:00:00.000Z"
    later.response("msg_old", [text("before 1970")], stop_reason="end_turn")
    later.lines[1]["timestamp"] = "1969-12-31T23:59:59.000Z"
    lines = dump(t.lines) + dump(later.lines)
    lines = lines[:3] + [json.dumps(huge, separators=(",", ":")).encode() + b"\n"] + lines[3:]
    extra = {ids.span_id("chat", "msg_huge:req_huge"), ids.span_id("chat", "msg_old:req_msg_old"),
             ids.span_id("turn", SID, later.lines[0]["uuid"])}
    got, p = spans_of_file(str(tmp_path), lines)
    problems = []
    for s in got:
        if not 0 <= s.start_ns <= s.end_ns < 1 << 63:
            problems.append((s.name, "time", s.start_ns, s.end_ns))
        try:
            msg = trace_pb2.Span()
            msg.ParseFromString(encode_span(s))  # what the OTLP exporter sends
        except Exception as e:  # noqa: BLE001
            problems.append((s.name, "encode", repr(e)[:80]))
            continue
        for kv in msg.attributes:
            if kv.value.HasField("int_value") and kv.value.int_value != s.attributes[kv.key]:
                problems.append((s.name, kv.key, s.attributes[kv.key]))
    assert not problems
    assert p.stats.errors == Counter(bad_field=1, bad_timestamp=2)  # the usage line: one line, one error
    assert_same_spans(got, spans_of_file(str(tmp_path), dump(t.lines))[0], extra)


def test_line_cut_short_then_glued_to_the_next_keeps_no_nested_object(tmp_path):
    """A process killed in the middle of writing an agent_progress line, then resumed: the next line is
    appended right after the cut (no newline). The next line is kept; objects nested inside the broken
    one (here the subagent message it copies) are not transcript lines and must not become entries."""
    t = base()
    inner = {"type": "assistant", "uuid": "sub-0001", "timestamp": t.lines[3]["timestamp"], "requestId": "req_inner",
             "message": {"id": "msg_inner", "type": "message", "role": "assistant", "model": "claude-opus-4-6",
                         "content": [{"type": "text", "text": "sub"}],
                         "usage": {"input_tokens": 5, "output_tokens": 9}}}
    progress = {"type": "progress", "uuid": "prog-0001", "parentUuid": t.lines[3]["uuid"], "sessionId": SID,
                "timestamp": t.lines[3]["timestamp"], "parentToolUseID": "toolu_1", "toolUseID": "agent_msg_1",
                "data": {"type": "agent_progress", "agentId": "a1", "message": inner, "normalizedMessages": []}}
    raw = orjson.dumps(progress)
    cut = raw.index(b',"normalizedMessages"')  # cut just after the copied message
    lines = dump(t.lines)
    lines[4] = raw[:cut] + lines[4]
    got, p = spans_of_file(str(tmp_path), lines)
    clean, _ = spans_of_file(str(tmp_path), dump(t.lines))
    assert_same_spans(got, clean)
    assert p.stats.entries == len(t.lines)
    assert p.stats.errors == Counter(malformed_json=1)


def test_absurd_token_count_does_not_crash_the_pipeline(tmp_path):
    """A token count with hundreds of digits (orjson refuses it, the fallback decoder reads it as an
    int): a bad field, not a crash while pricing the call."""
    t = base()
    bad = side_line(t, 2)
    bad["message"]["id"], bad["requestId"] = "msg_absurd", "req_absurd"
    raw = orjson.dumps(bad).replace(b'"output_tokens":1', b'"output_tokens":' + b"9" * 400)
    lines = insert(t, 3, raw + b"\n")
    got, p = spans_of_file(str(tmp_path), lines)
    assert p.stats.errors == Counter(bad_field=1)
    assert_same_spans(got, spans_of_file(str(tmp_path), dump(t.lines))[0],
                      {ids.span_id("chat", "msg_absurd:req_absurd")})


def test_lone_surrogates_are_exported_as_valid_utf8(tmp_path):
    """JSON allows an escaped lone surrogate ("\\ud83d": Node writes one when a string is cut inside
    an emoji, e.g. a truncated tool output). OTLP strings must be UTF-8: with and without content
    capture, nothing raises and every span encodes to a Span protobuf can read."""
    from opentelemetry.proto.trace.v1 import trace_pb2

    from ccotel.spans.content import ContentPolicy

    t = Transcript(SID)
    t.prompt("cut emoji \ud83d", parent=None)
    t.response("msg_1", [tool_use("toolu_1", name="Bash\ud83d", command="echo \ud83d")], stop_reason="tool_use")
    t.tool_result("toolu_1", "output cut at \ud83d")
    t.response("msg_2", [text("done \ud83d")], stop_reason="end_turn")
    t.lines[0]["cwd"] = "/tmp/pro\udc00j"
    data = b"".join(json.dumps(d, separators=(",", ":")).encode() + b"\n" for d in t.lines)
    assert b"\\ud83d" in data
    problems = []
    for content in (None, ContentPolicy()):
        try:
            spans, p = spans_of_file(str(tmp_path), data, content=content)
        except Exception as e:  # noqa: BLE001
            problems.append((content is not None, "raised", repr(e)[:100]))
            continue
        assert len(spans) == 4 and not p.stats.errors
        for s in spans:
            try:
                trace_pb2.Span.FromString(encode_span(s))
            except Exception as e:  # noqa: BLE001
                problems.append((content is not None, s.name, repr(e)[:100]))
    assert not problems


def test_message_replayed_with_a_new_request_id_sends_each_tool_span_once(tmp_path):
    """A side-question (/btw) sidechain replays a parent message with the same message.id and a new
    requestId (docs/format.md section 6): its tool_use blocks carry tool_use ids already traced. A span id
    is sent once."""
    root = str(tmp_path / "claude")
    t = base()
    write(main_path(root), t.bytes())
    side = Transcript(SID, agent_id="btw1", t_ms=t.t_ms)
    side.prompt("side question", parent=None)
    for i in (1, 2, 3):  # msg_a1, its three lines, with a new requestId
        d = copy.deepcopy(t.lines[i])
        d.update(requestId="req_btw", isSidechain=True, agentId="btw1", parentUuid=side.last, uuid=f"btw-{i}")
        side.lines.append(d)
        side.last = d["uuid"]
    side.response("msg_btw", [text("answer")], stop_reason="end_turn")
    write(os.path.join(proj(root), SID, "subagents", "agent-btw1.jsonl"), side.bytes())
    spans, p = backfill(root)
    assert_once(spans)
    assert not p.stats.errors


PATHOLOGICAL = [
    b"[" * 100_000,  # nesting deeper than any recursion limit
    b'{"type":"user","uuid":"deep","x":' + b"[" * 5000 + b"]" * 5000 + b"}",  # deep, but well-formed
    b'{"type":"x","n":' + b"1" * 5000 + b"}",  # an integer beyond Python's int/str conversion limit
    b'{"type":"x","n":1e999999,"m":NaN,"k":-Infinity}',  # not JSON, but Python's json reads it
]


def test_pathological_json_does_not_crash(tmp_path):
    raised = []
    for line in PATHOLOGICAL:
        try:
            parse_line(line, 0)
        except Exception as e:  # noqa: BLE001
            raised.append((line[:40], type(e).__name__))
    assert not raised, raised
    t = base()
    got, p = spans_of_file(str(tmp_path), insert(t, 2, *(line + b"\n" for line in PATHOLOGICAL)))
    # The 5,000-digit integer is valid JSON in a field ccotel ignores: the typed fast path reads
    # that line (Python's json refuses such an int, so the checked path counted it malformed).
    assert sum(p.stats.errors.values()) == 2
    assert set(p.stats.errors) <= {"malformed_json", "bad_field"}
    assert_same_spans(got, spans_of_file(str(tmp_path), dump(t.lines))[0])


def test_duplicate_uuids(tmp_path):
    """The same line written twice (a resume rewrites it): nothing is counted twice."""
    t = base()
    lines = dump(t.lines)
    dup = lines[:3] + [lines[2]] + lines[3:5] + [lines[4]] + lines[5:7] + [lines[0], lines[6]] + lines[7:]
    got, p = spans_of_file(str(tmp_path), dup)
    clean, _ = spans_of_file(str(tmp_path), lines)
    assert_same_spans(got, clean)
    assert not p.stats.errors  # a normal thing (docs/format.md): not an error
    for s in got:  # a line read twice is one line
        assert s.attributes == {k: v for k, v in view_attrs(clean)[s.span_id].items()}, s.name


def view_attrs(spans: list[SpanRecord]) -> dict[int, dict[str, Any]]:
    return {s.span_id: s.attributes for s in spans}


def test_parent_uuid_cycles(tmp_path):
    t = base()
    a, b = side_line(t, 2), side_line(t, 2)
    a["uuid"], b["uuid"] = "cyc-a", "cyc-b"
    a["parentUuid"], b["parentUuid"] = "cyc-b", "cyc-a"  # a -> b -> a
    me = side_line(t, 4)
    me["uuid"] = me["parentUuid"] = "cyc-self"  # a line that is its own parent
    sub = Transcript(SID, agent_id="loop", t_ms=t.t_ms)
    sub.prompt("side", parent="cyc-y")
    sub.lines[0]["uuid"] = "cyc-x"
    sub.response("msg_loop", [text("x")], stop_reason="end_turn", parent="cyc-x")
    sub.lines[1]["uuid"] = "cyc-y"  # x -> y -> x
    lines = insert(t, 3, *dump([a, b]))
    lines = lines[:7] + dump([me]) + lines[7:]
    with time_limit(30):
        got, p = spans_of_file(str(tmp_path), lines)
        root = str(tmp_path / "sub")
        write(main_path(root), lines)
        write(os.path.join(proj(root), SID, "subagents", "agent-loop.jsonl"), sub.bytes())
        got_sub, p2 = backfill(root)
    clean, _ = spans_of_file(str(tmp_path), dump(t.lines))
    assert_same_spans(got, clean)
    assert not p.stats.errors and not p2.stats.errors
    loop = {s.span_id for s in got_sub} - {s.span_id for s in clean}
    assert_same_spans(got_sub, clean, loop)
    assert len(loop) == 2  # the loop's agent and its one API call


def test_subagent_spawn_cycle_loses_no_spans(tmp_path):
    """Agent aa's meta says it was spawned by a Task call in agent bb's file, and bb's by one in aa's:
    a cycle no trace can be found for. Its spans are still delivered, and the session is released."""
    root = str(tmp_path / "claude")
    t = Transcript(SID)
    t.prompt("go", parent=None)
    t.response("msg_1", [text("ok")], stop_reason="end_turn")
    write(main_path(root), t.bytes())
    d = os.path.join(proj(root), SID, "subagents")
    for me, other in (("aa", "bb"), ("bb", "aa")):
        s = Transcript(SID, agent_id=me, t_ms=t.t_ms)
        s.prompt(f"task {me}", parent=None)
        s.response(f"msg_{me}", [tool_use(f"toolu_{me}", name="Task", subagent_type="Explore", prompt=f"task {other}")],
                   stop_reason="tool_use")
        s.tool_result(f"toolu_{me}", "done")
        s.response(f"msg_{me}_end", [text("r")], stop_reason="end_turn")
        write(os.path.join(d, f"agent-{me}.jsonl"), s.bytes())
        write(os.path.join(d, f"agent-{me}.meta.json"),
              orjson.dumps({"agentType": "Explore", "toolUseId": f"toolu_{other}"}))
    with time_limit(30):
        spans, p = backfill(root)
    assert_once(spans)
    names = Counter(s.name for s in spans)
    assert names["invoke_agent Explore"] == 2
    assert names["chat claude-opus-4-6"] == 1 + 4
    assert names["execute_tool Task"] == 2
    assert p.assembler.open_count() == 0 and not p.assembler._sessions  # nothing held forever


def test_missing_parents(tmp_path):
    """Lines whose parentUuid (or logicalParentUuid) names a line that is not in the file: normal after
    a compaction, a checkpoint or a copied session (docs/format.md 2, 7). Not errors; their calls are traced."""
    t = base()
    head = Transcript(SID, t_ms=1_749_999_999_000)
    head.response("msg_orphan", [text("resumed")], stop_reason="end_turn", parent="gone-0001")  # before any prompt
    boundary = side_line(t, 7, type="system", subtype="compact_boundary", parentUuid=None,
                         logicalParentUuid="gone-0000", compactMetadata={"trigger": "auto", "preTokens": 5})
    del boundary["message"], boundary["requestId"]
    lost = side_line(t, 8, parentUuid="gone-0002")  # a block of msg_a2 whose parent line is missing
    lines = dump(head.lines) + insert(t, 8, *dump([boundary, lost]))
    got, p = spans_of_file(str(tmp_path), lines)
    clean, _ = spans_of_file(str(tmp_path), dump(t.lines))
    own = {ids.span_id("chat", "msg_orphan:req_msg_orphan"), ids.span_id("turn", SID, head.lines[0]["uuid"])}
    assert_same_spans(got, clean, own)
    assert own <= {s.span_id for s in got}  # a continuation turn of its own, not lost
    assert not p.stats.errors


def test_unknown_line_types(tmp_path):
    t = base()
    unknown = [
        {"type": "brand-new-kind", "uuid": "new-1", "parentUuid": t.lines[2]["uuid"], "sessionId": SID,
         "timestamp": t.lines[2]["timestamp"], "payload": {"a": [1, 2]}},
        {"type": "queue-operation", "operation": "enqueue", "sessionId": SID, "timestamp": t.lines[2]["timestamp"]},
        {"type": "file-history-snapshot", "messageId": "m", "snapshot": {}, "isSnapshotUpdate": False},
        {"type": "summary", "summary": "t", "leafUuid": t.lines[5]["uuid"]},
    ]
    check_line_case(tmp_path, t, insert(t, 3, *dump(unknown)), Counter())


def test_each_reason_is_logged_once_and_counted_each_time(tmp_path, caplog):
    t = base()
    lines = insert(t, 2, b"{broken\n", b"{also broken\n", b"\xff\n", b"[1]\n", b"[2]\n")
    metrics = Metrics()
    root = str(tmp_path / "claude")
    write(main_path(root), lines)
    p = Pipeline(Options(roots=(root,)), emit=lambda s: None, metrics=metrics)
    with caplog.at_level(logging.WARNING, logger="ccotel.pipeline"):
        p.backfill(close_all=True)
    assert p.stats.errors == Counter(malformed_json=2, invalid_utf8=1, not_an_object=2)  # \xff: its first reason
    for reason, n in p.stats.errors.items():
        assert metrics.value("ccotel_parse_errors", reason) == n
        assert sum(reason in r.getMessage() for r in caplog.records) == 1, reason


def test_bad_lines_in_an_open_turn_are_counted_once_across_a_restart(tmp_path):
    """A restart re-reads an open turn from its first line: its bad lines were counted already."""
    root = str(tmp_path / "claude")
    t = Transcript(SID, t_ms=recent_ms(30))
    tool_turn(t, "1")
    t.prompt("two", parent=t.last)
    t.response("msg_x", [tool_use("toolu_x")], stop_reason="tool_use")  # still running
    lines = dump(t.lines)
    write(main_path(root), lines[:8] + [b"{broken\n", b'{"x":"' + b"a" * 5000 + b'"}\n'] + lines[8:])
    backend: list[SpanRecord] = []
    for _ in range(3):
        metrics = Metrics()
        state = State(str(tmp_path / "st"))
        live = Live(root, state=state, metrics=metrics, backend=backend, max_line_bytes=1000)
        live.p.backfill()
        assert live.p.assembler.open_count() == 1
        live.p.process_acks()
        assert metrics.value("ccotel_parse_errors", "malformed_json") == 1
        assert metrics.value("ccotel_parse_errors", "line_too_long") == 1
        state.close()
    assert_once(backend)


def test_a_session_dir_swapped_for_a_symlink_out_of_the_root_is_refused(tmp_path):
    """within_root reuses a directory's resolution only while the path still names that directory."""
    from ccotel.read.discover import within_root

    root = tmp_path / "claude"
    session_dir = root / "projects" / "-p" / "s1" / "subagents"
    session_dir.mkdir(parents=True)
    (session_dir / "agent-a.jsonl").write_text("{}\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "agent-a.jsonl").write_text("{}\n")
    assert within_root(str(root), str(session_dir / "agent-a.jsonl"))
    session_dir.rename(tmp_path / "moved")
    session_dir.symlink_to(outside)
    assert not within_root(str(root), str(session_dir / "agent-a.jsonl"))


@pytest.mark.parametrize("fast", [True, False])
def test_api_error_line_without_content(fast):
    """An isApiErrorMessage line whose message has no content (found in review: a KeyError)."""
    line = (b'{"type":"assistant","uuid":"u1","sessionId":"s","isApiErrorMessage":true,'
            b'"message":{"id":"m","model":"<synthetic>"}}')
    res = parse_line(line, 0, fast=fast)
    assert res.errors == [] and res.entries[0].is_api_error and res.entries[0].error_text is None


def test_a_directory_above_moved_out_and_symlinked_back_is_refused_once_its_entry_expires(tmp_path, monkeypatch):
    """The moved directory keeps its inode, so the cached resolution holds until it expires
    (found in review); after that, the file is outside the root again."""
    import time as _time

    from ccotel.read import discover

    monkeypatch.setattr(discover, "_DIR_TTL_S", 0.2)
    root = tmp_path / "claude"
    sub = root / "projects" / "-p" / "s1" / "subagents"
    sub.mkdir(parents=True)
    (sub / "agent-a.jsonl").write_text("{}\n")
    assert discover.within_root(str(root), str(sub / "agent-a.jsonl"))
    (root / "projects" / "-p").rename(tmp_path / "moved")
    (root / "projects" / "-p").symlink_to(tmp_path / "moved")
    _time.sleep(0.3)
    assert not discover.within_root(str(root), str(sub / "agent-a.jsonl"))
