"""Bounded state: digests and marks live as long as a transcript on disk holds them, so the state
follows what Claude Code keeps, not the history; and nothing is counted twice because of it."""

from __future__ import annotations

import copy
import os
import sqlite3

from ccotel.metrics.counters import Metrics
from ccotel.run.pipeline import Pipeline
from ccotel.store.sqlite import SqliteState as State
from ccotel.store.state import Commit, anchor_of
from tests.assemble.test_assemble import one_tool_turn, proj
from tests.run.test_checkpoint import Backend, start
from tests.transcript import Transcript

A = "aaaaaaaa-1111-4222-8333-444444444444"
B = "bbbbbbbb-1111-4222-8333-444444444444"
C = "cccccccc-1111-4222-8333-444444444444"


def copy_as(t: Transcript, session_id: str) -> Transcript:
    """The whole history copied into a new session file with a new sessionId (docs/format.md: same
    uuid, message.id, requestId and timestamp), as a resume of an older Claude Code does."""
    out = Transcript(session_id, t_ms=t.t_ms)
    out.lines = [dict(copy.deepcopy(line), sessionId=session_id) for line in t.lines]
    out.last = t.last
    return out


def counted_calls(m: Metrics) -> float:
    return m.value("ccotel_api_calls", "claude-opus-4-6")


def caught_up(root: str, state_dir: str, backend: Backend, metrics: Metrics) -> Pipeline:
    """A pipeline that has caught up (events from now on are counted)."""
    p = start(root, state_dir, backend, metrics=metrics)
    p.backfill(close_all=True)
    return p


def test_a_copy_is_counted_once_while_any_file_holding_it_is_on_disk(tmp_path):
    root, st = str(tmp_path / "claude"), str(tmp_path / "st")
    os.makedirs(proj(root))
    m, backend = Metrics(), Backend()
    p = caught_up(root, st, backend, m)
    pa, pb, pc = (os.path.join(proj(root), f"{s}.jsonl") for s in (A, B, C))

    a = Transcript(A)
    one_tool_turn(a, "1")
    a.write(pa)
    p.poll([pa])
    p.backfill(close_all=True)  # closes the turn (as the stall timeout would live)
    assert counted_calls(m) == 2

    b = copy_as(a, B)  # resumed into a new file: the history copied, one new turn
    one_tool_turn(b, "2")
    b.write(pb)
    p.poll([pb])
    p.backfill(close_all=True)
    assert counted_calls(m) == 4  # 2 copied (not counted again) + 2 new

    os.remove(pa)  # Claude Code's sweep deletes the original
    p.forget_deleted({pa})
    # B holds A's calls too: a copy of B must still not count them again
    c = copy_as(b, C)
    c.write(pc)
    p.poll([pc])
    p.backfill(close_all=True)
    assert counted_calls(m) == 4

    db = State(st)
    assert db.sizes()["calls"] == 4 + 4  # B holds its 2 and A's 2 (a replay); C holds all 4 (replays)
    for path in (pb, pc):
        os.remove(path)
    p.forget_deleted({pb, pc})
    sizes = State(st).sizes()
    assert (sizes["calls"], sizes["prompts"], sizes["files"]) == (0, 0, 0)
    assert State(st).marks() == {"caught_up"}  # the first catch-up's mark is permanent
    assert len(p.assembler._seen_calls) == 0 and len(p.assembler._seen_prompts) == 0
    assert ids_sent_once(backend)


def ids_sent_once(backend: Backend) -> bool:
    ids = [s.span_id for s in backend.delivered]
    return len(ids) == len(set(ids))


def test_rows_go_with_their_file_and_survive_on_another(tmp_path):
    st = State(str(tmp_path / "st"))
    st.commit(Commit(calls=[(1, anchor_of("/r/a")), (2, anchor_of("/r/a")), (2, anchor_of("/r/b"))],
                     prompts=[(7, anchor_of("/r/a"))], marks=[("ghost:/r/a", anchor_of("/r/a")), ("caught_up", 0)]))
    assert st.held_only_by(["/r/a"]) == ({1}, {7}, {"ghost:/r/a"})
    st.commit(Commit(forget_files=["/r/a"]))
    assert st.calls() == {2} and st.prompts() == set() and st.marks() == {"caught_up"}
    assert st.held_only_by(["/r/b"]) == ({2}, set(), set())


def test_schema_1_state_is_migrated_and_its_rows_go_with_the_files_it_knew(tmp_path):
    state_dir = tmp_path / "st"
    state_dir.mkdir()
    db = sqlite3.connect(state_dir / "state.db")
    db.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE files (path TEXT PRIMARY KEY, dev INTEGER, ino INTEGER, head_len INTEGER, fingerprint TEXT,
            offset INTEGER NOT NULL, read_to INTEGER NOT NULL DEFAULT 0);
        CREATE TABLE calls (digest INTEGER PRIMARY KEY);
        CREATE TABLE prompts (digest INTEGER PRIMARY KEY);
        CREATE TABLE counters (key TEXT PRIMARY KEY, value REAL NOT NULL);
        CREATE TABLE marks (key TEXT PRIMARY KEY);
        INSERT INTO meta VALUES ('schema', '1');
        INSERT INTO files VALUES ('/r/a', 1, 2, 10, 'f', 100, 100), ('/r/b', 1, 3, 10, 'g', 50, 50);
        INSERT INTO calls VALUES (11), (12);
        INSERT INTO prompts VALUES (21);
        INSERT INTO marks VALUES ('caught_up'), ('ghost:/r/a');
        INSERT INTO counters VALUES ('ccotel_turns_total', 3.0);
    """)
    db.commit()
    db.close()
    st = State(str(state_dir))
    assert st.calls() == {11, 12} and st.prompts() == {21} and st.marks() == {"caught_up", "ghost:/r/a"}
    assert st.counters()["ccotel_turns_total"] == 3.0
    assert st.files()["/r/a"][1] == 100
    st.commit(Commit(forget_files=["/r/a"]))
    assert st.calls() == {11, 12}  # /r/b, known at the migration, may hold them
    st.commit(Commit(forget_files=["/r/b"]))
    assert st.calls() == set() and st.prompts() == set() and st.marks() == {"caught_up"}
    st.close()
    assert State(str(state_dir)).sizes()["legacy_files"] == 0  # opened again: schema 2, no second migration


def test_a_simulated_month_of_live_use_keeps_the_state_flat(tmp_path):
    """Sessions every day, Claude Code's sweep deleting files older than the retention: after
    the first retention period the state's rows and the process's seen-sets stop growing."""
    root, st = str(tmp_path / "claude"), str(tmp_path / "st")
    os.makedirs(proj(root))
    m, backend = Metrics(), Backend()
    p = caught_up(root, st, backend, m)
    retention, days, per_day = 5, 20, 3
    written: list[tuple[int, str]] = []
    sizes: list[dict[str, int]] = []
    for day in range(days):
        for i in range(per_day):
            sid = f"{day:08d}-{i:04d}-4222-8333-444444444444"
            path = os.path.join(proj(root), f"{sid}.jsonl")
            t = Transcript(sid)
            one_tool_turn(t, f"{day}_{i}")
            t.write(path)
            written.append((day, path))
            p.poll([path])
        swept = [path for d, path in written if d <= day - retention and os.path.exists(path)]
        for path in swept:
            os.remove(path)
        p.forget_deleted(set(swept))
        p.backfill(close_all=True)
        s = State(st)
        sizes.append({**s.sizes(), "seen": len(p.assembler._seen_calls)})
        s.close()
    assert counted_calls(m) == 2 * per_day * days  # every call once
    steady = sizes[retention:]
    assert {(s["calls"], s["prompts"], s["files"], s["seen"]) for s in steady} == \
        {(2 * per_day * retention, per_day * retention, per_day * retention, 2 * per_day * retention)}
    assert ids_sent_once(backend)
