"""Following live, the state and the usage ledger are written together at most every
``go_live`` interval (not per small read): nothing is written between two commits, the ledger
holds a span's rows whenever the state holds its acknowledgement, and a process killed between
two commits loses nothing and counts nothing twice. The watcher tells deletions apart."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from ccotel.metrics.counters import Metrics
from ccotel.read.watch import Watcher
from ccotel.records import SpanRecord
from ccotel.run.pipeline import Options, Pipeline
from ccotel.store.ledger import Ledger
from ccotel.store.sqlite import SqliteState as State
from tests.assemble.test_assemble import one_tool_turn, proj
from tests.transcript import Transcript

SID = "eeeeeeee-1111-4222-8333-444444444444"


def start(root: str, state_dir: str, delivered: list[SpanRecord]) -> Pipeline:
    """A pipeline whose backend takes every span at once (acknowledged as on the export thread)."""
    holder: list[Pipeline] = []

    def emit(spans: list[SpanRecord]) -> None:
        delivered.extend(spans)
        holder[0].acknowledge(spans)

    p = Pipeline(Options(roots=(root,)), emit=emit, state=State(state_dir), metrics=Metrics(),
                 ledger=Ledger.in_state_dir(state_dir, (root,)))
    holder.append(p)
    return p


def written(state_dir: str) -> tuple[set[int], int, int, float]:
    """What another process would find: acknowledged ids, the file's offset, ledger calls, API calls counted."""
    st = State(state_dir)
    try:
        offsets = [offset for _ident, offset, _read_to, _marker in st.files().values()]
        counted = sum(v for k, v in st.counters().items() if k.partition(":")[2].startswith("ccotel_api_calls"))
        acked = st.acked()
    finally:
        st.close()
    ledger = Ledger.in_state_dir(state_dir)
    try:
        calls = ledger.coverage().calls
    finally:
        ledger.close()
    return acked, max(offsets, default=0), calls, counted


def two_turns(tmp_path: Path) -> tuple[str, str, bytes]:
    root = str(tmp_path / "claude")
    path = os.path.join(proj(root), f"{SID}.jsonl")
    os.makedirs(os.path.dirname(path))
    Path(path).touch()
    t = Transcript(SID, t_ms=int(time.time() * 1000) - 5_000)
    one_tool_turn(t, "1")
    one_tool_turn(t, "2")
    return root, path, t.bytes()


@dataclass
class Live:
    """A pipeline following live with commits an hour apart, after its two turns were appended."""

    root: str
    path: str
    lines: bytes
    state_dir: str
    delivered: list[SpanRecord]
    pipeline: Pipeline


@pytest.fixture
def live(tmp_path: Path) -> Live:
    root, path, lines = two_turns(tmp_path)
    state_dir = str(tmp_path / "st")
    delivered: list[SpanRecord] = []
    p = start(root, state_dir, delivered)
    p.backfill()
    p.go_live(3600.0)
    p.process_acks()  # a commit now: the next one from tick is an hour away
    with open(path, "ab") as f:
        f.write(lines)
    p.poll([path])
    p.tick()
    return Live(root, path, lines, state_dir, delivered, p)


def test_live_commits_wait_for_the_interval_and_write_the_ledger_with_the_state(live: Live) -> None:
    p, delivered, state_dir, lines = live.pipeline, live.delivered, live.state_dir, live.lines
    assert delivered, "spans go out at once; only the commit waits"
    assert written(state_dir) == (set(), 0, 0, 0.0)  # nothing acknowledged, checkpointed, recorded or counted yet
    p.process_acks()  # forced (a stop): everything at once
    acked, offset, calls, counted = written(state_dir)
    assert (calls, counted) == (3, 3.0)  # the last answer waits for its turn's quiet second
    # turn 1 is done (the offset moves past it); turn 2 is open (quiet for less than a second):
    # its spans' ids are kept and the offset waits at its prompt
    assert acked and acked < {s.span_id for s in delivered} and 0 < offset < len(lines)


def test_killed_between_two_live_commits_sends_again_and_counts_once(live: Live) -> None:
    first = sorted(s.span_id for s in live.delivered)
    state_dir = live.state_dir
    del live.pipeline  # SIGKILL: nothing after the last commit was written
    again: list[SpanRecord] = []
    b = start(live.root, state_dir, again)
    b.backfill(close_all=True)
    b.process_acks()
    assert sorted(s.span_id for s in again if s.span_id in set(first)) == first  # the same spans, same ids
    _acked, offset, calls, counted = written(state_dir)
    assert (offset, calls, counted) == (len(live.lines), 4, 4.0)  # read to the end, recorded and counted once


def test_without_go_live_every_process_acks_writes(tmp_path):
    root, path, lines = two_turns(tmp_path)
    state_dir = str(tmp_path / "st")
    p = start(root, state_dir, [])
    p.backfill()
    with open(path, "ab") as f:
        f.write(lines)
    p.poll([path])
    p.tick()  # process_acks(force=False) with no interval: written now, as during a catch-up
    _acked, _offset, calls, counted = written(state_dir)
    assert (calls, counted) == (3, 3.0)


def test_watcher_reports_deleted_and_moved_paths_apart(tmp_path):
    projects = tmp_path / "claude" / "projects" / "-p"
    projects.mkdir(parents=True)
    kept, deleted, moved = (projects / f"{n}.jsonl" for n in ("kept", "deleted", "moved"))
    for f in (kept, deleted, moved):
        f.write_bytes(b"{}\n")
    w = Watcher((str(tmp_path / "claude"),))
    w.start()
    try:
        time.sleep(0.3)
        w.wait(0.0)
        w.take_gone()
        with open(kept, "ab") as f:
            f.write(b"{}\n")
        deadline = time.monotonic() + 5
        dirty: set[str] = set()
        while str(kept) not in dirty and time.monotonic() < deadline:
            dirty |= w.wait(0.1)
        assert str(kept) in dirty and w.take_gone() == set()  # an append is no deletion
        deleted.unlink()
        moved.rename(projects / "moved.jsonl.bak")
        gone: set[str] = set()
        while time.monotonic() < deadline and not {str(deleted), str(moved)} <= gone:
            w.wait(0.1)
            gone |= w.take_gone()
        assert gone == {str(deleted), str(moved)}
    finally:
        w.stop()


def test_a_backfill_commits_about_once_a_second_not_per_session(tmp_path, monkeypatch):
    """A history of many sessions is committed (ledger, then state) about once a second, as live
    lines are: each session's commit cost ~10 % of a 1 GB backfill. Everything is written by the
    end, and the next live line is committed at once again."""
    root = str(tmp_path / "claude")
    for i in range(30):
        sid = f"eeeeeeee-1111-4222-8333-{i:012d}"
        t = Transcript(sid, t_ms=int(time.time() * 1000) - 50_000)
        one_tool_turn(t, str(i))
        t.write(os.path.join(proj(root), f"{sid}.jsonl"))
    state_dir = str(tmp_path / "st")
    delivered: list[SpanRecord] = []
    p = start(root, state_dir, delivered)
    commits: list[int] = []
    real = State.commit
    monkeypatch.setattr(State, "commit", lambda self, c: (commits.append(len(c.acked)), real(self, c))[1])
    p.backfill(close_all=True)
    assert 1 <= len(commits) <= 3, commits  # not 30 (one per session), however fast the machine
    # Acked ids are folded into call digests once their owners are done; history is traced, not
    # counted: what a backfill committed per session before.
    acked, offset, calls, counted = written(state_dir)
    assert len(delivered) == 30 * 4 and (acked, calls, counted) == (set(), 60, 0.0)
    assert offset == max(os.path.getsize(os.path.join(proj(root), f)) for f in os.listdir(proj(root)))


def test_history_in_flight_when_caught_up_is_committed_is_not_counted_after_a_kill(tmp_path):
    """The first catch-up commits its caught-up mark while the backend has not yet taken the
    last spans of the history (their offsets wait for them). Killed then, the next start reads
    those lines again after the mark: they are still history, never counted (tests/whole/test_crash.py
    saw 242 history API calls counted this way under load)."""
    root = str(tmp_path / "claude")
    t = Transcript(SID, t_ms=int(time.time() * 1000) - 3_600_000)
    one_tool_turn(t, "1")
    one_tool_turn(t, "2")
    t.write(os.path.join(proj(root), f"{SID}.jsonl"))
    state_dir = str(tmp_path / "state")
    os.makedirs(state_dir)
    held: list[SpanRecord] = []
    first = Pipeline(Options(roots=(root,)), emit=held.extend, state=State(state_dir), metrics=Metrics())
    first.backfill()  # the backend never answers: every span is in flight when the mark is committed
    assert held
    # killed here: nothing more is committed. The next start: the backend takes everything.
    delivered: list[SpanRecord] = []
    second = start(root, state_dir, delivered)
    second.backfill()
    second.process_acks()
    assert {s.span_id for s in delivered} == {s.span_id for s in held}  # sent again: nothing lost
    _acked, _offset, _calls, counted = written(state_dir)
    assert counted == 0  # history: traces only



@pytest.mark.parametrize("step", ["take_acked", "finish_owners"])
def test_an_acknowledgement_landing_mid_commit_is_not_lost_by_a_kill(tmp_path, monkeypatch, step):
    """The export thread acknowledges a turn's last span while the pipeline thread builds a
    commit, after either of its two steps (take the acknowledgements kept back, decide the done
    owners). A turn made done must not be committed without that span's id and count: the
    offset moves past its lines then, so a kill before the next commit would lose the count."""
    root, path, lines = two_turns(tmp_path)
    state_dir = str(tmp_path / "st")
    sent: list[SpanRecord] = []
    p = Pipeline(Options(roots=(root,)), emit=sent.extend, state=State(state_dir), metrics=Metrics(),
                 ledger=Ledger.in_state_dir(state_dir, (root,)))
    p.backfill()
    p.go_live(3600.0)
    p.process_acks()
    with open(path, "ab") as f:
        f.write(lines)
    p.poll([path])
    p.tick()
    last = next(s for s in sent if s.attributes.get("gen_ai.operation.name") == "chat")  # turn 1's first call
    p.acknowledge([s for s in sent if s is not last])
    real = getattr(p.delivery, step)

    def then_acknowledged(*args):
        out = real(*args)
        p.acknowledge([last])  # on the export thread, just after this step
        return out

    monkeypatch.setattr(p.delivery, step, then_acknowledged)
    p.process_acks()
    # SIGKILL before the next commit: p writes nothing more
    b = start(root, state_dir, [])
    b.backfill(close_all=True)
    b.process_acks()
    _acked, offset, _calls, counted = written(state_dir)
    assert (offset, counted) == (len(lines), 4.0)  # read to the end; each API call counted once


def test_an_acknowledgement_kept_back_after_a_catch_ups_last_commit_is_not_counted_twice(tmp_path, monkeypatch):
    """A catch-up keeps acknowledgements back for its next commit. One that lands after its last
    commit must be written with the first commit that writes the counters it settled: once the
    catch-up is over the export thread commits on its own, and a commit of the counters without
    that span's id made a restart after a kill send the span again and count it a second time."""
    root, path, lines = two_turns(tmp_path)
    state_dir = str(tmp_path / "st")
    first = start(root, state_dir, [])
    first.backfill()  # the first catch-up (of an empty file): from now on, and after a restart, calls count
    first.process_acks()
    with open(path, "ab") as f:  # written while ccotel was not running: counted by the next catch-up
        f.write(lines)
    sent: list[SpanRecord] = []
    p = Pipeline(Options(roots=(root,)), emit=sent.extend, state=State(state_dir), metrics=Metrics(),
                 ledger=Ledger.in_state_dir(state_dir, (root,)))
    real = p.process_acks
    held: list[SpanRecord] = []

    def then_acknowledged(force: bool = True) -> None:
        real(force)
        if force and not held:  # the catch-up's last commit: turn 1's spans are acknowledged just after it
            held.extend(s for s in sent if s.trace_id == sent[0].trace_id)
            p.acknowledge(held)

    monkeypatch.setattr(p, "process_acks", then_acknowledged)
    p.backfill(close_all=True)
    assert held and len(held) < len(sent)
    p.acknowledge([s for s in sent if s not in held])  # on the export thread, the catch-up over
    # SIGKILL: p writes nothing more
    b = start(root, state_dir, [])
    b.backfill(close_all=True)
    b.process_acks()
    _acked, offset, _calls, counted = written(state_dir)
    assert (offset, counted) == (len(lines), 4.0)  # read to the end; each API call counted once
