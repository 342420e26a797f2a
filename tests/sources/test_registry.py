"""ccotel/registry.py: an orchestrator's agent registry, written the way orchestrators write it (an
entry with pid null before the spawn, updated after; front matter rewritten in place), real
processes for alive, dead and reused pids, a real State for "killed once across restarts", and the
real Claude Code session of a killed run (the s06 fixtures' sessions/<pid>.json) for the link."""

from __future__ import annotations

import builtins
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from ccotel.assemble import ids
from ccotel.metrics.counters import METRICS, Metrics, Spec
from ccotel.read.procs import proc_start
from ccotel.records import SpanRecord, StatusCode
from ccotel.run.pipeline import Options, Pipeline
from ccotel.sources.registry.agents import ENTRY_WAIT_NS
from ccotel.sources.registry.files import FrontMatter, parse_active_pids, parse_front_matter
from ccotel.sources.registry.follower import Registry
from ccotel.sources.registry.telemetry import AGENT_SECONDS, AGENTS, BAD_INPUT, KILLED
from ccotel.store.sqlite import SqliteState as State
from ccotel.store.state import Commit
from tests.harness.fixtures import load_fixture

S = 1_000_000_000
T0 = 1_795_000_000 * S  # 2026-11-18: before any process on this machine started (reused-pid checks)

# The Spec lines the lead adds to metrics.METRICS (the same text is in the report); until then the
# tests declare them, after that they check the declared ones are these.
SPECS = {
    AGENTS: Spec("counter", "Agents of an orchestrator's registry (--registry) that ended, by type, outcome "
                 "(done, failed, killed) and depth.", ("type", "status", "depth")),
    AGENT_SECONDS: Spec("counter", "Run time of the registry's agents that ended (Started to Ended; a killed one "
                        "to its output's last change), by type, outcome and depth.", ("type", "status", "depth")),
    KILLED: Spec("counter", "Registry agents whose process died (or whose pid another process took) while "
                 "their Status still said in-progress (by type: ccotel_registry_agents_total{status=\"killed\"})."),
    BAD_INPUT: Spec("counter", "Registry files read mid-write or not understood, by reason (malformed_json, "
                    "partial_front_matter, no_front_matter, bad_entry, bad_pid, unknown_status, ...).", ("reason",)),
}


@pytest.fixture(autouse=True)
def declared(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, spec in SPECS.items():
        if name in METRICS:
            assert METRICS[name].labels == spec.labels and METRICS[name].kind == spec.kind
        else:
            monkeypatch.setitem(METRICS, name, spec)


# -- writing a registry as an orchestrator does ----------------------------------------------------


def iso(ns: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // S)) + f".{ns % S // 1_000_000:03d}Z"


def write_pids(d: Path, doc: dict[str, Any]) -> None:
    """Rewritten in place, as the orchestrator does (not a rename: a reader can see it half-written)."""
    with open(d / ".active-pids.json", "r+b" if (d / ".active-pids.json").exists() else "wb") as f:
        data = json.dumps(doc, indent=2).encode()
        f.seek(0)
        f.write(data)
        f.truncate()


def entry(pid: int | None, depth: int = 0, parent: str | None = None, agent_type: str = "worker") -> dict[str, Any]:
    return {"pid": pid, "depth": depth, "parentId": parent, "agentType": agent_type}


def md_text(status: str, started: int, ended: int | None = None, depth: int = 0, parent: str | None = None,
            task: str = "Review the change", body: str = "") -> str:
    lines = ["---", f"Task: {task}", "Instructions: |", "  Read the diff: every file.", "  Report: findings only.",
             f"Started: {iso(started)}", f"Status: {status}", f"Depth: {depth}",
             f"ParentAgent: {parent if parent else 'null'}"]
    if ended is not None:
        lines.append(f"Ended: {iso(ended)}")
    return "\n".join(lines) + "\n---\n" + body


def write_md(d: Path, agent_id: str, text: str, mtime_ns: int | None = None) -> Path:
    path = d / "agent-responses" / f"{agent_id}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "r+b" if path.exists() else "wb") as f:  # in place
        f.write(text.encode())
        f.truncate()
    if mtime_ns is not None:
        os.utime(path, ns=(mtime_ns, mtime_ns))
    return path


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "300"])


def kill(p: subprocess.Popen[bytes]) -> None:
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=10)


def polls(reg: Registry, clock: Clock, until: int, step: int = S // 4) -> list[SpanRecord]:
    """Poll every ``step`` until ``until`` (the run loop's tick), collecting the spans."""
    out: list[SpanRecord] = []
    while clock.now < until:
        clock.now += step
        out += reg.poll(clock.now)
    return out


def registry(d: Path, clock: Clock, metrics: Metrics | None = None, marks: set[str] | None = None,
             roots: tuple[str, ...] = ()) -> Registry:
    return Registry(str(d), roots, metrics, marks or set(), clock=clock, kill_grace_ns=5 * S)


def first_look(d: Path, clock: Clock, metrics: Metrics) -> Registry:
    """A registry ccotel has watched before (its 'seen' mark is in the state): events count."""
    reg = registry(d, clock, metrics)
    reg.poll(clock.now)
    marks, _ = reg.take_commit()
    return registry(d, clock, metrics, {m for m, _a in marks})


# -- parsing ------------------------------------------------------------------------------------------


def test_front_matter_full_partial_and_odd() -> None:
    fm = parse_front_matter(md_text("done", T0, T0 + 90 * S, depth=2, parent="a1").encode())
    assert fm == FrontMatter(status="done", task="Review the change", started_ns=T0, ended_ns=T0 + 90 * S,
                             depth=2, parent="a1")
    whole = md_text("in-progress", T0).encode()
    cut = whole.index(b"\n---\n")
    for n in (3, 10, cut, cut + 2, cut + 4):  # every prefix of a front matter being written
        assert parse_front_matter(whole[:n]) == "partial_front_matter", n
    assert parse_front_matter(whole[: cut + 5]).status == "in-progress"  # type: ignore[union-attr]
    assert parse_front_matter(b"just text\n") == "no_front_matter"
    assert parse_front_matter(b"") == "no_front_matter"
    assert parse_front_matter(b"---\n" + b"x: " + b"y" * (70 << 10)) == "front_matter_too_long"
    odd = parse_front_matter(b'---\nStatus: "Done"\nStarted: 1795000000000\nDepth: x\nParentAgent: ~\n'
                             b"Task: fix: the bug\nUnknownKey: 1\n---\nbody")
    assert odd == FrontMatter(status="done", task="fix: the bug", started_ns=T0, depth=None, parent=None)
    assert parse_front_matter(b"---\nStatus: done\nTask: caf\xc3") == "partial_front_matter"  # cut mid-character
    assert parse_front_matter(b"---\nTask: \xff\xfe bad\nStatus: done\n---\n") == "invalid_utf8"


def test_active_pids_null_pid_and_bad_documents() -> None:
    entries, errors = parse_active_pids(json.dumps({"a": entry(None), "b": entry(123, 1, "a", "reviewer"),
                                                    "c": "nope", "d": {"pid": "12"}}).encode())
    assert entries["a"].pid is None and entries["b"].pid == 123 and entries["b"].parent_id == "a"
    assert entries["b"].agent_type == "reviewer" and entries["d"].pid is None
    assert sorted(errors) == ["bad_entry", "bad_pid"]
    assert parse_active_pids(b'{"a": {"pid": 1') == ({}, ["malformed_json"])
    assert parse_active_pids(b"") == ({}, ["empty_file"])
    assert parse_active_pids(b"[1]") == ({}, ["not_an_object"])


# -- the life of an agent -------------------------------------------------------------------------------


def test_spawn_run_done_is_one_span_counted_once(tmp_path: Path) -> None:
    t0 = time.time_ns() // 1_000_000 * 1_000_000  # Started is written to the millisecond
    clock, metrics = Clock(t0), Metrics()
    write_pids(tmp_path, {})
    reg = first_look(tmp_path, clock, metrics)
    write_pids(tmp_path, {"a1": entry(None, 0, None, "planner")})  # before the spawn
    assert polls(reg, clock, t0 + 2 * S) == []
    proc = sleeper()
    try:
        write_pids(tmp_path, {"a1": entry(proc.pid, 0, None, "planner")})  # after it
        write_md(tmp_path, "a1", md_text("in-progress", t0 + S, body="working...\n"))
        assert polls(reg, clock, t0 + 20 * S) == []  # alive: nothing to say yet
        assert reg.gauges()["ccotel_registry_agents_in_progress"] == 1.0
        write_md(tmp_path, "a1", md_text("in-progress", t0 + S, body="working...\nmore\n"))  # body appended
        assert polls(reg, clock, t0 + 22 * S) == []
        write_md(tmp_path, "a1", md_text("done", t0 + S, ended=t0 + 61 * S, body="working...\nmore\nall done\n"))
        spans = polls(reg, clock, t0 + 30 * S)
    finally:
        kill(proc)
    (span,) = spans
    assert span.name == "invoke_agent planner" and span.status is StatusCode.UNSET
    assert (span.start_ns, span.end_ns) == (t0 + S, t0 + 61 * S)
    assert span.trace_id == ids.trace_id("registry", "a1") and span.span_id == ids.span_id("registry", "a1")
    assert span.parent_span_id is None
    a = span.attributes
    assert a["gen_ai.operation.name"] == "invoke_agent" and a["gen_ai.agent.name"] == "planner"
    assert a["claude_code.registry.outcome"] == "done" and a["claude_code.registry.pid"] == proc.pid
    assert a["gen_ai.agent.description"] == "Review the change"
    assert not any("Read the diff" in str(v) for v in a.values())  # Instructions are content: never exported
    assert metrics.value(AGENTS, "planner", "done", "0") == 1
    assert metrics.value(AGENT_SECONDS, "planner", "done", "0") == 60
    reg.acknowledge(spans)
    assert polls(reg, clock, t0 + 60 * S) == []  # once
    assert metrics.value(AGENTS, "planner", "done", "0") == 1
    assert reg.gauges()["ccotel_registry_agents_in_progress"] == 0.0


def test_span_tree_by_parent_and_depth(tmp_path: Path) -> None:
    clock = Clock(T0 + 100 * S)
    tree = {"root": (None, 0), "c1": ("root", 1), "c2": ("root", 1), "g1": ("c1", 2), "other": (None, 0)}
    write_pids(tmp_path, {k: entry(None, depth, parent, f"t{depth}") for k, (parent, depth) in tree.items()})
    for n, (k, (parent, depth)) in enumerate(tree.items()):
        write_md(tmp_path, k, md_text("failed" if k == "g1" else "done", T0 + n * S, T0 + (20 - n) * S,
                                      depth, parent))
    spans = {s.attributes["claude_code.registry.agent_id"]: s for s in registry(tmp_path, clock).poll(clock.now)}
    assert set(spans) == set(tree)
    root_trace = ids.trace_id("registry", "root")
    for k, (parent, depth) in tree.items():
        s = spans[k]
        assert s.trace_id == (ids.trace_id("registry", "other") if k == "other" else root_trace)
        assert s.parent_span_id == (spans[parent].span_id if parent else None)
        assert s.attributes["claude_code.registry.depth"] == depth and s.name == f"invoke_agent t{depth}"
    assert spans["g1"].status is StatusCode.ERROR and spans["g1"].attributes["error.type"] == "failed"
    # ids come from the agent ids alone: another ccotel (or a restart without state) gives the same
    again = registry(tmp_path, Clock(clock.now)).poll(clock.now)
    assert {(s.trace_id, s.span_id, s.parent_span_id) for s in again} == \
        {(s.trace_id, s.span_id, s.parent_span_id) for s in spans.values()}


# -- processes: alive, dead, reused ---------------------------------------------------------------------


def test_live_process_is_not_killed_dead_one_is(tmp_path: Path) -> None:
    clock, metrics = Clock(time.time_ns()), Metrics()
    write_pids(tmp_path, {})
    reg = first_look(tmp_path, clock, metrics)
    alive, doomed = sleeper(), sleeper()
    try:
        write_pids(tmp_path, {"live": entry(alive.pid), "dies": entry(doomed.pid, 1, "live", "helper")})
        write_md(tmp_path, "live", md_text("in-progress", clock.now - 2 * S))
        write_md(tmp_path, "dies", md_text("in-progress", clock.now - S, depth=1, parent="live"))
        assert polls(reg, clock, clock.now + 3 * S) == []
        kill(doomed)  # SIGKILL: the orchestrator never writes its Status
        assert polls(reg, clock, clock.now + 4 * S) == []  # within the grace: maybe the Status is on its way
        spans = polls(reg, clock, clock.now + 3 * S)
        assert polls(reg, clock, clock.now + 60 * S) == []  # the live one stays live
    finally:
        kill(alive)
    (span,) = spans
    assert span.attributes["claude_code.registry.outcome"] == "killed" and span.status is StatusCode.ERROR
    assert span.parent_span_id == ids.span_id("registry", "live") and span.trace_id == ids.trace_id("registry", "live")
    assert metrics.value(KILLED) == 1 and metrics.value(AGENTS, "helper", "killed", "1") == 1
    assert metrics.value(AGENTS, "worker", "killed", "0") == 0


def test_status_written_within_the_grace_is_not_a_kill(tmp_path: Path) -> None:
    clock, metrics = Clock(time.time_ns()), Metrics()
    write_pids(tmp_path, {})
    reg = first_look(tmp_path, clock, metrics)
    proc = sleeper()
    write_pids(tmp_path, {"a": entry(proc.pid)})
    write_md(tmp_path, "a", md_text("in-progress", clock.now - S))
    polls(reg, clock, clock.now + 2 * S)
    kill(proc)
    polls(reg, clock, clock.now + 2 * S)  # gone, Status not written yet
    write_md(tmp_path, "a", md_text("done", clock.now - S, ended=clock.now))
    (span,) = polls(reg, clock, clock.now + 10 * S)
    assert span.attributes["claude_code.registry.outcome"] == "done"
    assert metrics.value(KILLED) == 0 and metrics.value(AGENTS, "worker", "done", "0") == 1


def test_reused_pid_is_a_killed_agent(tmp_path: Path) -> None:
    """The pid runs, but a process that started long after the agent's Started holds it: the agent's
    own process died and the pid was given to another."""
    clock, metrics = Clock(time.time_ns()), Metrics()
    write_pids(tmp_path, {})
    reg = first_look(tmp_path, clock, metrics)
    other = sleeper()
    try:
        assert proc_start(other.pid) is not None
        write_pids(tmp_path, {"old": entry(other.pid, agent_type="builder")})
        write_md(tmp_path, "old", md_text("in-progress", clock.now - 3600 * S))  # started an hour ago
        spans = polls(reg, clock, clock.now + 7 * S)
    finally:
        kill(other)
    (span,) = spans
    assert span.attributes["claude_code.registry.outcome"] == "killed"
    assert metrics.value(KILLED) == 1 and metrics.value(AGENTS, "builder", "killed", "0") == 1


def test_null_pid_in_progress_is_never_judged(tmp_path: Path) -> None:
    clock = Clock(time.time_ns())
    write_pids(tmp_path, {"p": entry(None)})
    write_md(tmp_path, "p", md_text("in-progress", clock.now))
    assert polls(registry(tmp_path, clock), clock, clock.now + 30 * S) == []


# -- once, across restarts ----------------------------------------------------------------------------------


def commit(state: State, reg: Registry, metrics: Metrics) -> None:
    """What pipeline.process_acks does with the registry's marks: one transaction with the counters."""
    marks, gone = reg.take_commit()
    assert state.commit(Commit(marks=marks, forget_files=gone, counters=metrics.snapshot("read")))


@pytest.mark.parametrize("delivered", [True, False])
def test_killed_counted_exactly_once_across_restarts(tmp_path: Path, delivered: bool) -> None:
    reg_dir, state_dir = tmp_path / "reg", tmp_path / "state"
    reg_dir.mkdir()
    clock = Clock(time.time_ns())
    write_pids(reg_dir, {})
    state, metrics = State(str(state_dir)), Metrics()
    reg = registry(reg_dir, clock, metrics, state.marks())
    reg.poll(clock.now)
    commit(state, reg, metrics)  # first run: the registry is seen
    proc = sleeper()
    write_pids(reg_dir, {"k": entry(proc.pid, agent_type="coder")})
    write_md(reg_dir, "k", md_text("in-progress", clock.now - S))
    polls(reg, clock, clock.now + 2 * S)
    kill(proc)
    spans = polls(reg, clock, clock.now + 8 * S)
    assert len(spans) == 1 and metrics.value(KILLED) == 1
    if delivered:
        reg.acknowledge(spans)
    commit(state, reg, metrics)
    state.close()
    for _restart in range(3):  # ccotel restarted, three times; the .md still says in-progress
        state, metrics = State(str(state_dir)), Metrics()
        metrics.restore(state.counters())
        reg = registry(reg_dir, clock, metrics, state.marks())
        again = polls(reg, clock, clock.now + 10 * S)
        assert metrics.value(KILLED) == 1 and metrics.value(AGENTS, "coder", "killed", "0") == 1
        if delivered:
            assert again == []
        else:  # not delivered before the restart: sent again (same ids), not counted again
            assert [(s.trace_id, s.span_id) for s in again] == [(s.trace_id, s.span_id) for s in spans]
            reg.acknowledge(again)
            delivered = True
        commit(state, reg, metrics)
        state.close()


def test_deleted_md_takes_its_marks_along(tmp_path: Path) -> None:
    clock, state_dir = Clock(T0 + 50 * S), str(tmp_path / "state")
    reg_dir = tmp_path / "reg"
    reg_dir.mkdir()
    write_pids(reg_dir, {"a": entry(None), "b": entry(None)})
    md_a = write_md(reg_dir, "a", md_text("done", T0, T0 + S))
    write_md(reg_dir, "b", md_text("done", T0, T0 + S))
    state, metrics = State(state_dir), Metrics()
    reg = registry(reg_dir, clock, metrics, state.marks())
    reg.acknowledge(reg.poll(clock.now))
    commit(state, reg, metrics)
    assert {f"registry:judged:{md_a}", f"registry:sent:{md_a}"} <= state.marks()
    md_a.unlink()
    clock.now += S
    os.utime(reg_dir / "agent-responses", ns=(clock.now + 5 * S, clock.now + 5 * S))  # the dir changed
    reg.poll(clock.now)
    _marks, gone = reg.take_commit()
    assert gone == [str(md_a)]
    state.commit(Commit(forget_files=gone))
    left = state.marks()
    assert f"registry:sent:{md_a}" not in left and f"registry:judged:{md_a}" not in left
    assert f"registry:sent:{reg_dir}/agent-responses/b.md" in left
    # deleted while ccotel was down: forgotten at the next start
    state.close()
    state = State(state_dir)
    (reg_dir / "agent-responses" / "b.md").unlink()
    reg = registry(reg_dir, clock, metrics, state.marks())
    assert reg.take_commit()[1] == [f"{reg_dir}/agent-responses/b.md"]
    state.close()


def test_history_is_traced_not_counted(tmp_path: Path) -> None:
    """A registry ccotel never saw: agents over before it looked are traced, not counted; what ends
    while it watches is counted."""
    clock, metrics = Clock(time.time_ns()), Metrics()
    dead = sleeper()
    kill(dead)
    live = sleeper()
    try:
        write_pids(tmp_path, {"old": entry(None), "crashed": entry(dead.pid), "now": entry(live.pid)})
        write_md(tmp_path, "old", md_text("done", clock.now - 900 * S, clock.now - 800 * S),
                 mtime_ns=clock.now - 800 * S)
        write_md(tmp_path, "crashed", md_text("in-progress", clock.now - 700 * S), mtime_ns=clock.now - 600 * S)
        write_md(tmp_path, "now", md_text("in-progress", clock.now - 5 * S))
        reg = registry(tmp_path, clock, metrics)
        spans = polls(reg, clock, clock.now + 10 * S)
        write_md(tmp_path, "now", md_text("failed", clock.now - 15 * S, clock.now))
        spans += polls(reg, clock, clock.now + S)
    finally:
        kill(live)
    outcomes = {s.attributes["claude_code.registry.agent_id"]: s.attributes["claude_code.registry.outcome"]
                for s in spans}
    assert outcomes == {"old": "done", "crashed": "killed", "now": "failed"}
    crashed = next(s for s in spans if s.attributes["claude_code.registry.agent_id"] == "crashed")
    assert crashed.end_ns == clock.now - 600 * S - 11 * S  # its output's last change, not when ccotel noticed
    assert metrics.value(AGENTS, "worker", "done", "0") == 0 and metrics.value(KILLED) == 0
    assert metrics.value(AGENTS, "worker", "failed", "0") == 1


# -- files mid-write ------------------------------------------------------------------------------------------


def test_files_rewritten_in_place_mid_read(tmp_path: Path) -> None:
    clock, metrics = Clock(T0 + 100 * S), Metrics()
    write_pids(tmp_path, {})
    reg = first_look(tmp_path, clock, metrics)
    good = {"a": entry(None, 0, None, "lead"), "b": entry(None, 1, "a", "sub")}
    write_pids(tmp_path, good)
    reg.poll(clock.now)
    half = json.dumps({**good, "c": entry(None, 1, "a")}, indent=2).encode()
    with open(tmp_path / ".active-pids.json", "r+b") as f:  # the writer is mid-way
        f.write(half[: len(half) // 2])
        f.truncate()
    for _ in range(8):
        clock.now += S // 4
        reg.poll(clock.now)
    assert metrics.value(BAD_INPUT, "malformed_json") == 1  # once, though read twice
    assert set(reg.entries) == {"a", "b"}  # the last good reading kept
    write_pids(tmp_path, {**good, "c": entry(None, 1, "a")})
    clock.now += S // 4
    reg.poll(clock.now)
    assert set(reg.entries) == {"a", "b", "c"}
    # front matter mid-write: counted once, the agent judged once the writer is through
    text = md_text("done", T0, T0 + 30 * S, depth=1, parent="a")
    write_md(tmp_path, "b", text[: text.index("Status")])
    assert polls(reg, clock, clock.now + 2 * S) == []
    assert metrics.value(BAD_INPUT, "partial_front_matter") == 1
    write_md(tmp_path, "b", text + "the answer\n")
    (span,) = polls(reg, clock, clock.now + S)
    assert span.name == "invoke_agent sub" and span.parent_span_id == ids.span_id("registry", "a")
    assert metrics.value(AGENTS, "sub", "done", "1") == 1
    write_md(tmp_path, "c", "no front matter at all\n")
    write_md(tmp_path, "a", md_text("paused", T0))
    polls(reg, clock, clock.now + S)
    assert metrics.value(BAD_INPUT, "no_front_matter") == 1 and metrics.value(BAD_INPUT, "unknown_status") == 1


def test_a_quiet_registry_opens_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cheap when nothing changed: stat calls only (every agent judged and delivered is not even stat'ed,
    nor an entry without an .md)."""
    clock = Clock(T0 + 100 * S)
    n = 200
    # the registry is never cleaned up: entries whose .md was deleted long ago are not looked at either
    write_pids(tmp_path, {**{f"a{i}": entry(None, 1, "a0") for i in range(n)},
                          **{f"old{i}": entry(10**6 + i) for i in range(n)}})
    for i in range(n):
        write_md(tmp_path, f"a{i}", md_text("done", T0, T0 + S, 1, "a0"))
    write_md(tmp_path, "running", md_text("in-progress", T0))
    reg = registry(tmp_path, clock)
    reg.acknowledge(reg.poll(clock.now))
    opened: list[str] = []
    real_open, real_stat = builtins.open, os.stat
    stats: list[str] = []

    def counting_open(file: Any, *a: Any, **k: Any) -> Any:
        opened.append(str(file))
        return real_open(file, *a, **k)

    def counting_stat(path: Any, *a: Any, **k: Any) -> Any:
        stats.append(str(path))
        return real_stat(path, *a, **k)

    monkeypatch.setattr(builtins, "open", counting_open)
    monkeypatch.setattr(os, "stat", counting_stat)
    started = time.perf_counter()
    for _ in range(100):
        clock.now += S // 4
        assert reg.poll(clock.now) == []
    took = time.perf_counter() - started
    monkeypatch.undo()
    assert [p for p in opened if str(tmp_path) in p] == []
    assert len(stats) == 100 * 3  # the json, the directory, the one agent still running
    assert took < 1.0, took


def test_refused_spans_are_offered_again(tmp_path: Path) -> None:
    clock = Clock(T0 + 100 * S)
    write_pids(tmp_path, {"a": entry(None)})
    write_md(tmp_path, "a", md_text("done", T0, T0 + S))
    reg = registry(tmp_path, clock)
    (span,) = reg.poll(clock.now)
    assert reg.poll(clock.now + S) == []  # in flight
    reg.unsent([span], now=clock.now + S)  # the trace queue was full
    assert polls(reg, clock, clock.now + 5 * S) == []
    (again,) = polls(reg, clock, clock.now + 2 * S)
    assert again.span_id == span.span_id


# -- the Claude Code session of an agent --------------------------------------------------------------------


def turn_spans(root: Path) -> list[SpanRecord]:
    spans: list[SpanRecord] = []
    pipeline = Pipeline(Options(roots=(str(root),)), emit=spans.extend)
    pipeline.backfill(close_all=True)
    return [s for s in spans if s.parent_span_id is None and s.attributes.get("gen_ai.agent.name") == "claude-code"]


@pytest.mark.parametrize("name", ["s06_kill_orphan_resume", "2.1.330-s06_kill_orphan_resume"])
def test_killed_agent_linked_to_its_real_claude_session(tmp_path: Path, name: str) -> None:
    """The fixture's Claude Code was SIGKILLed mid-tool and left sessions/<pid>.json behind: an
    orchestrator that had spawned it as an agent still says in-progress. The agent is killed and its
    span names that session and the first turn the transcript path built for it."""
    fx = load_fixture(name)
    tree = fx.snapshots["after_kill"] if "after_kill" in fx.snapshots and fx.version == "2.1.197" else fx.config_dir
    root = tmp_path / "claude"
    shutil.copytree(tree, root)
    (sessions_file,) = (root / "sessions").glob("*.json")
    doc = json.loads(sessions_file.read_text())
    started = doc["startedAt"] * 1_000_000 - S  # the orchestrator wrote Started just before the spawn
    reg_dir = tmp_path / "reg"
    reg_dir.mkdir()
    write_pids(reg_dir, {"orch-1": entry(doc["pid"], 0, None, "claude")})
    write_md(reg_dir, "orch-1", md_text("in-progress", started), mtime_ns=started + 2 * S)
    clock, metrics = Clock(time.time_ns()), Metrics()
    reg = Registry(str(reg_dir), (str(root),), metrics, {f"registry:seen:{reg_dir}"}, clock=clock,
                   kill_grace_ns=5 * S)
    (span,) = polls(reg, clock, clock.now + 7 * S)
    a = span.attributes
    assert a["claude_code.registry.outcome"] == "killed" and metrics.value(KILLED) == 1
    assert a["session.id"] == a["gen_ai.conversation.id"] == doc["sessionId"] == fx.session_ids[0]
    assert a["claude_code.registry.session_link"] == "left_behind"
    turns = turn_spans(root)
    first = min(turns, key=lambda s: s.start_ns)
    assert (a["claude_code.registry.session_trace_id"], a["claude_code.registry.session_span_id"]) == \
        (f"{first.trace_id:032x}", f"{first.span_id:016x}")
    assert first.attributes["session.id"] == doc["sessionId"]
    # started after the session's process (an agent of a later run): not that session
    write_md(reg_dir, "orch-2", md_text("in-progress", doc["startedAt"] * 1_000_000 + 3600 * S))
    write_pids(reg_dir, {"orch-1": entry(doc["pid"], 0, None, "claude"), "orch-2": entry(doc["pid"])})
    (other,) = polls(reg, clock, clock.now + 8 * S)
    assert other.attributes["claude_code.registry.session_link"] == "none" and "session.id" not in other.attributes


def test_live_agent_found_through_its_wrapper(tmp_path: Path) -> None:
    """The orchestrator recorded a wrapper's pid; Claude Code runs below it and keeps
    sessions/<its pid>.json with its own start time."""
    root = tmp_path / "claude"
    (root / "sessions").mkdir(parents=True)
    wrapper = subprocess.Popen(["sh", "-c", "sleep 300 & wait"], start_new_session=True)
    try:
        child = None
        for _ in range(200):
            kids = Path(f"/proc/{wrapper.pid}/task/{wrapper.pid}/children").read_text().split()
            if kids:
                child = int(kids[0])
                break
            time.sleep(0.01)
        assert child is not None
        sid = "5e55e55e-0000-4000-8000-000000000001"
        (root / "sessions" / f"{child}.json").write_text(json.dumps(
            {"pid": child, "sessionId": sid, "cwd": str(tmp_path), "startedAt": time.time_ns() // 1_000_000,
             "procStart": proc_start(child), "version": "2.1.330", "kind": "interactive"}))
        reg_dir = tmp_path / "reg"
        reg_dir.mkdir()
        clock = Clock(time.time_ns())
        write_pids(reg_dir, {"w": entry(wrapper.pid)})
        write_md(reg_dir, "w", md_text("in-progress", clock.now - S))
        reg = Registry(str(reg_dir), (str(root),), Metrics(), {f"registry:seen:{reg_dir}"}, clock=clock)
        assert polls(reg, clock, clock.now + 2 * S) == []
        (root / "sessions" / f"{child}.json").unlink()  # a clean exit removes it: known already
        write_md(reg_dir, "w", md_text("done", clock.now - S, clock.now))
        (span,) = polls(reg, clock, clock.now + S)
    finally:
        os.killpg(wrapper.pid, signal.SIGKILL)
        wrapper.wait(timeout=10)
    assert span.attributes["session.id"] == sid and span.attributes["claude_code.registry.session_link"] == "process"


def test_exposition_passes_promtool(tmp_path: Path) -> None:
    """The series a registry run makes, as Prometheus scrapes them: promtool check metrics."""
    from prometheus_client import generate_latest

    from ccotel.metrics.counters import registry_for
    from tests.support.fixtures import missing_component
    from tests.support.prometheus import missing_reason, promtool_check_metrics

    reason = missing_reason()
    if reason:
        missing_component(reason)
    clock, metrics = Clock(time.time_ns()), Metrics()
    write_pids(tmp_path, {})
    reg = first_look(tmp_path, clock, metrics)
    dead = sleeper()
    kill(dead)
    write_pids(tmp_path, {"a": entry(None, 0, None, 'odd "type"\\'), "b": entry(dead.pid, 12, "a")})
    write_md(tmp_path, "a", md_text("done", clock.now - 5 * S, clock.now))
    write_md(tmp_path, "b", md_text("in-progress", clock.now - 5 * S, depth=12, parent="a"))
    write_md(tmp_path, "c", "---\nStatus: done\n")
    assert len(polls(reg, clock, clock.now + 8 * S)) == 2
    text = generate_latest(registry_for(metrics)).decode()
    assert 'ccotel_registry_agents_total{depth="10+",status="killed",type="worker"} 1.0' in text
    ok, output = promtool_check_metrics(text)
    assert ok, output


@pytest.mark.parametrize("rejected", [0, 1])
def test_registry_spans_count_in_spans_exported_and_dropped(tmp_path: Path, rejected: int) -> None:
    """A registry's spans go to the backend beside the transcripts' and count the same way: in
    ccotel_spans_exported when the backend took them, in ccotel_spans_dropped when it refused."""
    from ccotel.export.result import REASON_PARTIAL, ExportResult, Outcome

    reg_dir, root = tmp_path / "registry", tmp_path / "claude"
    reg_dir.mkdir()
    (root / "projects").mkdir(parents=True)
    write_pids(reg_dir, {"a": entry(None)})
    write_md(reg_dir, "a", md_text("done", T0, T0 + S))
    clock, metrics, sent = Clock(T0 + 100 * S), Metrics(), []
    pipeline = Pipeline(Options(roots=(str(root),), registries=(str(reg_dir),)), emit=sent.extend, clock=clock,
                        metrics=metrics)
    pipeline.backfill()
    for _ in range(8):
        clock.now += S
        pipeline.tick()
    (span,) = sent
    assert span.span_id == ids.span_id("registry", "a")
    pipeline.acknowledge([span], ExportResult(Outcome.OK, drops=((REASON_PARTIAL, rejected),) if rejected else ()))
    assert metrics.value("ccotel_spans_exported") == 1 - rejected
    assert metrics.value("ccotel_spans_dropped", REASON_PARTIAL) == rejected


# -- the .md written before the entry (issue 27: 3,109 of 10,000 stayed type="agent") ----------------------


def _typed(spans: list[SpanRecord]) -> dict[str, str]:
    return {s.attributes["claude_code.registry.agent_id"]: s.attributes["gen_ai.agent.name"] for s in spans}


def test_an_md_written_before_its_entry_takes_its_type_from_the_entry(tmp_path: Path) -> None:
    """The orchestrator wrote the agent's .md (already done) and its .active-pids.json entry only
    later: the agent waits for its entry and is counted and traced once, under its own type; an
    agent the registry never lists is counted as `agent` once the wait is over."""
    clock, metrics = Clock(T0 + 100 * S), Metrics()
    write_pids(tmp_path, {})
    reg = first_look(tmp_path, clock, metrics)
    write_md(tmp_path, "a1", md_text("done", T0 + 90 * S, T0 + 99 * S))
    write_md(tmp_path, "lost", md_text("done", T0 + 90 * S, T0 + 99 * S))
    spans = polls(reg, clock, clock.now + 3 * S)  # several polls with the .md alone
    write_pids(tmp_path, {"a1": entry(123456789, 0, None, "reviewer")})
    spans += polls(reg, clock, clock.now + S)
    assert _typed(spans) == {"a1": "reviewer"}
    reg.acknowledge(spans)
    more = polls(reg, clock, clock.now + ENTRY_WAIT_NS)  # the one never listed: once the wait is over
    assert _typed(more) == {"lost": "agent"}
    reg.acknowledge(more)
    assert polls(reg, clock, clock.now + 5 * S) == []
    assert metrics.value(AGENTS, "reviewer", "done", "0") == 1 and metrics.value(AGENT_SECONDS, "reviewer", "done",
                                                                                   "0") == 9
    assert metrics.value(AGENTS, "agent", "done", "0") == 1  # `lost` alone


def test_a_thousand_agents_written_md_first_interleaved(tmp_path: Path) -> None:
    """1,000 agents, each .md (done) written before its entry, the pids file rewritten every few
    agents and polled in between, as a busy orchestrator interleaves them: every agent once, under
    its type, none under `agent`."""
    clock, metrics = Clock(T0 + 100 * S), Metrics()
    write_pids(tmp_path, {})
    reg = first_look(tmp_path, clock, metrics)
    listed: dict[str, Any] = {}
    spans: list[SpanRecord] = []
    n = 1000
    for i in range(n):
        agent_id = f"agent{i:04d}"
        write_md(tmp_path, agent_id, md_text("done", T0 + 90 * S, T0 + 95 * S, depth=i % 3))
        if i % 7 == 6 or i == n - 1:  # the entries of the last few agents, after their .md files
            for j in range(len(listed), i + 1):
                listed[f"agent{j:04d}"] = entry(None, j % 3, None, f"type{j % 5}")
            write_pids(tmp_path, listed)
        if i % 5 == 0:
            clock.now += S // 4
            spans += reg.poll(clock.now)
    spans += polls(reg, clock, clock.now + 2 * S)
    typed = _typed(spans)
    assert len(spans) == len(typed) == n
    assert typed == {f"agent{i:04d}": f"type{i % 5}" for i in range(n)}
    counted = {(t, d): metrics.value(AGENTS, f"type{t}", "done", str(d)) for t in range(5) for d in range(3)}
    assert sum(counted.values()) == n
    assert all(v == sum(1 for i in range(n) if (i % 5, i % 3) == k) for k, v in counted.items())
    assert metrics.value(AGENTS, "agent", "done", "0") == 0
