"""A catch-up read by several processes (catchup.py) delivers exactly what one process does."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import orjson

from ccotel.commands.options import BACKFILL_PARALLEL_MIN_MB
from ccotel.export.sinks import ExportQueue, OtlpSink
from ccotel.metrics.counters import Metrics
from ccotel.run.catchup import catch_up_in_parallel
from ccotel.run.detectors import HISTORY_OWNER
from ccotel.run.pipeline import Options, Pipeline
from ccotel.store.sqlite import SqliteState as State
from tests.harness.fixtures import list_fixtures, load_fixture
from tests.support.fixtures import realdata_config_dir  # noqa: F401
from tests.support.otlp import OtlpReceiver


def catch_up(root: Path, state_dir: Path, endpoint: str, workers: int,
             monkeypatch, commit_every_s: float = 1.0,
             hooks_spool: Path | None = None) -> tuple[dict[str, float], int, int]:
    """What ``ccotel run`` does up to 'caught up': parallel catch-up, then its own pipeline.
    Returns the counters, how many processes read and how many of them failed."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint)
    options = Options(roots=(str(root),), backfill_commit_every_s=commit_every_s,
                      hooks_spool=str(hooks_spool) if hooks_spool else None)
    done = catch_up_in_parallel(options, str(state_dir), "otlp", workers, min_bytes=0, metrics=True)
    state, metrics = State(str(state_dir)), Metrics()
    queue = ExportQueue(OtlpSink())
    pipeline = Pipeline(options, emit=queue.submit, state=state, metrics=metrics)
    queue.on_ack = pipeline.acknowledge
    pipeline.backfill()
    if done is not None:  # what the workers' history named and never saw, as ccotel run hands it over
        pipeline.adopt_detector_state(done.ghosts, done.unseen_agents)
    assert queue.close(timeout_s=60)
    pipeline.process_acks()
    state.close()
    return metrics.totals(), (done.workers if done else 1), (done.failed_workers if done else 0)


def spans_by_id(rx: OtlpReceiver, resent_ok: int = 0) -> dict[str, dict]:
    """Spans by id. ``resent_ok``: how many may come twice (a process killed after the backend took
    a batch and before it committed the acknowledgement sends it again: the same bytes)."""
    out: dict[str, dict] = {}
    resent = 0
    for s in rx.spans:
        span = {k: v for k, v in s.items() if k != "arrived_ns"}
        if out.setdefault(s["span_id"], span) is not span:
            assert out[s["span_id"]] == span, "a span sent again differs"
            resent += 1
    assert resent <= resent_ok, f"{resent} spans delivered twice"
    return out


def compare(root: Path, tmp_path: Path, monkeypatch, workers: int) -> int:
    with OtlpReceiver() as one, OtlpReceiver() as many:
        counters_one, _, _ = catch_up(root, tmp_path / "state-one", one.endpoint, 1, monkeypatch)
        counters_many, processes, _ = catch_up(root, tmp_path / "state-many", many.endpoint, workers, monkeypatch)
        assert spans_by_id(many) == spans_by_id(one)
    assert counters_many == counters_one
    assert counters_one["ccotel_lines_read\x1f"] > 0
    db_one, db_many = State(str(tmp_path / "state-one")), State(str(tmp_path / "state-many"))
    assert db_many.files() == db_one.files()
    assert db_many.calls() == db_one.calls() and db_many.prompts() == db_one.prompts()
    # history:<owner> marks record which history owners were still in flight when the caught-up
    # mark was committed (detectors.catch_up_done): timing, not data; the rest are equal
    # (the subagents and sessions history left without a transcript are marked, uncounted, either way)
    marks_one, marks_many = ({m for m in db.marks() if not m.startswith(HISTORY_OWNER)} for db in (db_one, db_many))
    assert marks_many == marks_one and "caught_up" in marks_one
    return processes


def test_realdata_in_three_processes_equals_one(realdata_config_dir, tmp_path, monkeypatch):  # noqa: F811
    assert compare(realdata_config_dir, tmp_path, monkeypatch, workers=3) == 3


def test_fixtures_and_a_corpus_in_two_processes_equal_one(tmp_path, monkeypatch):
    from bench.corpus import generate

    root = tmp_path / "claude"
    generate(str(root), 4_000_000, seed=5, session_mean=250_000, projects=4)
    for name in list_fixtures():
        shutil.copytree(load_fixture(name).config_dir / "projects", root / "projects", dirs_exist_ok=True)
    assert compare(root, tmp_path, monkeypatch, workers=2) == 2


def test_small_history_is_read_by_one_process(tmp_path, monkeypatch):
    root = load_fixture("s03_parallel_subagents").config_dir
    assert catch_up_in_parallel(Options(roots=(str(root),)), str(tmp_path / "s"), "none", 4,
                                min_bytes=int(BACKFILL_PARALLEL_MIN_MB * 1e6)) is None


def test_killed_workers_lose_nothing(tmp_path, monkeypatch):
    """Workers SIGKILLed mid-way: the caller's pipeline reads what they did not checkpoint. The
    history is large enough (~13 MB a worker) that a worker cannot end before the killer, a thread
    of a busy test process, has seen all three start: with 16 MB one CI run saw no worker fail
    (not reproduced alone or beside three busy loops; the likely cause)."""
    from bench.corpus import generate

    root = tmp_path / "claude"
    generate(str(root), 40_000_000, seed=6, session_mean=200_000, projects=3)
    killed: list[int] = []

    def kill_workers() -> None:
        deadline = time.monotonic() + 20
        seen: set[int] = set()
        while time.monotonic() < deadline and not killed:
            kids = [p for p in multiprocessing.active_children() if p.name == "ccotel-catchup"]
            seen |= {p.pid for p in kids if p.pid is not None}
            if len(seen) == 3 and kids:  # all three started (on a loaded machine one may be done already)
                time.sleep(0.4)  # started, imported, part-way through their shard
                for p in kids:
                    try:
                        os.kill(p.pid, signal.SIGKILL)
                        killed.append(p.pid)
                    except ProcessLookupError:
                        pass  # this one finished its shard first
            time.sleep(0.01)

    with OtlpReceiver() as one, OtlpReceiver() as many:
        catch_up(root, tmp_path / "state-one", one.endpoint, 1, monkeypatch)
        killer = threading.Thread(target=kill_workers)
        killer.start()
        # Workers commit at the end of every session group (the default, once a second, would
        # have the whole of this small shard acknowledged and not committed when it is killed).
        _, processes, failed = catch_up(root, tmp_path / "state-many", many.endpoint, 3, monkeypatch,
                                        commit_every_s=0)
        killer.join()
        assert processes == 3 and failed >= 1 and len(killed) >= failed
        # A killed worker sends again at most the batch it had sent (512 spans) and what was
        # acknowledged since its last commit: the spans of the group it was reading and of the
        # one before it (whose acknowledgements may come after that group's commit).
        spans = spans_by_id(one)
        per_group = _spans_per_group(root, spans.values())
        assert spans_by_id(many, resent_ok=len(killed) * (512 + 2 * max(per_group))) == spans
        assert 2 * max(per_group) < len(spans) // 4  # the bound is far below all the spans


def _spans_per_group(root: Path, spans: Iterable[dict]) -> list[int]:
    """How many spans each session group (the unit a worker reads and commits) made."""
    from ccotel.read.discover import scan
    from ccotel.run.pipeline import session_groups

    groups = session_groups([(str(root), tf) for tf in scan(str(root))])
    group_of = {tf.session_id: i for i, g in enumerate(groups) for _, tf in g}
    counts = [0] * (max(group_of.values()) + 1)
    for s in spans:
        counts[group_of[s["attributes"]["session.id"]]] += 1
    return counts


def test_shard_plan_keeps_copies_together_and_splits_a_project(tmp_path):
    from ccotel.read.discover import scan
    from ccotel.read.shard import balance, plan_shards
    from ccotel.run.pipeline import session_groups

    proj = tmp_path / "projects" / "-one-project"
    proj.mkdir(parents=True)

    def session(name: str, first_uuid: str, first_msg: str, prompt: str = "hi") -> None:
        lines = [{"message": {"role": "user", "content": prompt}, "type": "user", "uuid": first_uuid,
                  "sessionId": name, "timestamp": "2026-01-01T00:00:00.000Z"},
                 {"type": "assistant", "uuid": f"{name}-a", "sessionId": name, "timestamp": "2026-01-01T00:00:01.000Z",
                  "requestId": "req_1", "message": {"id": first_msg, "model": "claude-sonnet-4-5", "content": []}}]
        (proj / f"{name}.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))

    session("s-orig", "u-1", "msg_1")
    session("s-copy", "u-1", "msg_1")  # a copy: the same lines first
    session("s-fork", "u-9", "msg_1")  # its uuids rewritten, its first response the same
    session("s-long", "u-L", "msg_L", "x" * 300_000)  # ids only past the first 64 KiB (found in review)
    session("s-long-copy", "u-L", "msg_L", "x" * 300_000)
    for i in range(6):
        session(f"s-other{i}", f"u-o{i}", f"msg_o{i}")
    groups = session_groups([(str(tmp_path), tf) for tf in scan(str(tmp_path))])
    shards = plan_shards(groups, [1] * len(groups))
    names = [{groups[i][0][1].session_id for i in shard} for shard in shards]
    assert {"s-orig", "s-copy", "s-fork"} in names and {"s-long", "s-long-copy"} in names
    bins = balance(shards, [1] * len(groups), 2)
    assert len(bins) == 2  # one project, read by two processes


def test_detectors_see_what_the_workers_read(tmp_path):
    """A ghost session and a subagent without a transcript in the history a restart catches up
    on are counted as with one process (found in review: workers run no detectors)."""
    from ccotel.export.sinks import make_sink
    from ccotel.store.state import Commit

    proj = tmp_path / "claude" / "projects" / "-tmp-p"
    proj.mkdir(parents=True)

    def write(sid: str, objs: list[dict]) -> None:
        (proj / f"{sid}.jsonl").write_bytes(b"".join(orjson.dumps(o) + b"\n" for o in objs))

    def line(kind: str, u: str, parent: str | None, sid: str, ts: str, **extra) -> dict:
        return {"type": kind, "uuid": u, "parentUuid": parent, "sessionId": sid, "timestamp": ts, **extra}

    usage = {"input_tokens": 1, "output_tokens": 1, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
    write("ghost", [line("user", "g1", None, "ghost", "2025-06-01T10:00:00.000Z",
                         message={"role": "user", "content": "hello?"})])
    write("spawner", [
        line("user", "s1", None, "spawner", "2025-06-01T11:00:00.000Z", message={"role": "user", "content": "go"}),
        line("assistant", "s2", "s1", "spawner", "2025-06-01T11:00:01.000Z", requestId="r1",
             message={"id": "msg_s1", "model": "claude-sonnet-4-20250514", "stop_reason": "tool_use", "usage": usage,
                      "content": [{"type": "tool_use", "id": "toolu_a", "name": "Agent",
                                   "input": {"subagent_type": "general-purpose", "prompt": "p"}}]}),
        line("user", "s3", "s2", "spawner", "2025-06-01T11:05:00.000Z", toolUseResult={"agentId": "a0b1c2"},
             message={"role": "user",
                      "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "done"}]}),
        line("assistant", "s4", "s3", "spawner", "2025-06-01T11:05:01.000Z", requestId="r2",
             message={"id": "msg_s2", "model": "claude-sonnet-4-20250514", "stop_reason": "end_turn", "usage": usage,
                      "content": [{"type": "text", "text": "ok"}]})])
    for p in proj.iterdir():
        os.utime(p, (1.7e9, 1.7e9))
    options = Options(roots=(str(tmp_path / "claude"),))

    def run(state_dir: Path, workers: int) -> dict[str, float]:
        State(str(state_dir)).commit(Commit(marks=[("caught_up", 0)]))  # a restart: events are counted
        done = catch_up_in_parallel(options, str(state_dir), "none", workers, min_bytes=0, metrics=True)
        assert (done is not None) == (workers > 1)
        now = [time.time_ns()]
        state, metrics, queue = State(str(state_dir)), Metrics(), ExportQueue(make_sink("none"))
        pipeline = Pipeline(options, emit=queue.submit, state=state, metrics=metrics, clock=lambda: now[0])
        queue.on_ack = pipeline.acknowledge
        pipeline.backfill()
        if done is not None:
            pipeline.adopt_detector_state(done.ghosts, done.unseen_agents)
        now[0] += 10 * 60 * 10 ** 9  # past the stall timeout
        pipeline.tick()
        queue.close(timeout_s=10)
        return {k: v for k, v in metrics.totals().items() if k.startswith("ccotel_missing_transcripts")}

    one, two = run(tmp_path / "one", 1), run(tmp_path / "two", 2)
    assert one == two
    assert one["ccotel_missing_transcripts\x1fsession"] == 1 and one["ccotel_missing_transcripts\x1fsubagent"] == 1


def test_a_history_read_in_more_parts_than_processes_equals_one(realdata_config_dir, tmp_path, monkeypatch):  # noqa: F811
    """Each worker reads about WORKER_JOB_BYTES and ends, a fresh one taking the next part (a
    process's memory grows with what it has read): never more processes at once than asked for,
    and the same spans, counters and state as one process."""
    from ccotel.run import catchup

    monkeypatch.setattr(catchup, "WORKER_JOB_BYTES", 4 << 20)
    seen: list[tuple[int, int]] = []
    real = catchup._collect

    def spy(running, queued, *args, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        seen.append((len(running), len(queued)))
        return real(running, queued, *args, **kw)

    monkeypatch.setattr(catchup, "_collect", spy)
    assert compare(realdata_config_dir, tmp_path, monkeypatch, workers=2) == 2
    assert seen[-1][0] == 2 and seen[-1][1] >= 2, seen


def test_parts_are_cut_by_bytes_not_by_sessions(monkeypatch):
    """A bin of many small sessions then a few large ones: parts of equal session counts put
    nearly all the bytes in one part (a worker's peak memory grows with the bytes it reads)."""
    from ccotel.run import catchup

    mb = 1 << 20
    monkeypatch.setattr(catchup, "WORKER_JOB_BYTES", 256 * mb)
    weights = [1 * mb] * 10 + [50 * mb] * 10
    [parts] = catchup._split([list(range(20))], weights)
    assert [i for p in parts for i in p] == list(range(20))  # in order, each once
    sizes = [sum(weights[i] for i in p) for p in parts]
    assert len(parts) == 2 and max(sizes) <= 256 * mb + 50 * mb, sizes


def test_a_worker_starts_from_its_own_files_checkpoints_only(realdata_config_dir, tmp_path, monkeypatch):  # noqa: F811
    """A worker is handed the checkpoints of its part's files; it never loads every file's from the
    state (they grew with the history read so far, in each worker: its memory). Workers forked
    here, so the spy is theirs too."""
    from ccotel.run import catchup
    from ccotel.store import sqlite

    monkeypatch.setattr(catchup, "WORKER_JOB_BYTES", 4 << 20)
    monkeypatch.setattr(catchup, "process_context", lambda: multiprocessing.get_context("fork"))
    log = tmp_path / "files-called"
    parent, real = os.getpid(), sqlite.SqliteState.files

    def files(self):  # noqa: ANN001, ANN202
        if os.getpid() != parent:
            with open(log, "a") as f:
                f.write(f"{os.getpid()}\n")
        return real(self)

    monkeypatch.setattr(sqlite.SqliteState, "files", files)
    assert compare(realdata_config_dir, tmp_path, monkeypatch, workers=2) == 2
    assert not log.exists(), f"workers loaded every file's checkpoints: {log.read_text()}"


def test_a_shards_parts_are_never_read_at_once(tmp_path, monkeypatch):
    """A bin's parts run one after another: a forked session shares its original's API calls, and
    the part that reads the copy must start from the calls the original's part committed. On the
    code before, the next part of any bin started as soon as any worker ended (here the short
    one): the copy was read while its original still was, and their shared calls sent twice."""
    from bench.corpus import generate
    from ccotel.run import catchup

    root = tmp_path / "claude"
    generate(str(root), 1_000_000, seed=3, session_mean=100_000, projects=2)
    orig = max(root.glob("projects/*/*.jsonl"), key=lambda p: p.stat().st_size)
    copy = orig.with_name("0fork000-0000-4000-8000-000000000000.jsonl")
    copy.write_bytes(orig.read_bytes())  # a fork: it starts with the original's lines
    os.utime(copy, (time.time() + 5, time.time() + 5))  # and was written after it
    monkeypatch.setattr(catchup, "WORKER_JOB_BYTES", 1)  # a part a session group
    monkeypatch.setattr(catchup, "process_context", lambda: multiprocessing.get_context("fork"))
    log = tmp_path / "parts"
    fork_shard = {orig.stem, copy.stem}

    def worker(parcel, state_dir, exporter, close_all, count, done, writer, *rest):  # noqa: ANN001, ANN002, ANN202
        _options, groups, _started, _checkpoints = catchup._unwrap(parcel)  # noqa: SLF001
        names = {tf.session_id for g in groups for _root, tf in g}
        t0 = time.monotonic()
        time.sleep(0.5 if names & fork_shard else 0.02)  # the shard's first part is the long one
        with open(log, "ab") as f:
            f.write(orjson.dumps([sorted(names & fork_shard), t0, time.monotonic()]) + b"\n")
        writer.send({"files": 0, "lines": 0, "exported": 0, "errors": {}, "seconds": 0.0, "peak_rss_mb": 0.0,
                     "ghosts": [], "unseen_agents": []})

    monkeypatch.setattr(catchup, "_worker", worker)
    done = catch_up_in_parallel(Options(roots=(str(root),)), str(tmp_path / "s"), "none", 2, min_bytes=0)
    assert done is not None and done.jobs > 2
    parts = [orjson.loads(line) for line in log.read_bytes().splitlines()]
    shard = sorted((t0, t1) for names, t0, t1 in parts if names)
    assert len(shard) == 2, parts
    assert shard[0][1] <= shard[1][0], "two parts of one shard were read at once"


def test_a_workers_start_writes_less_than_a_pipe_holds(tmp_path, monkeypatch):
    """A spawned worker's arguments are written to its pipe by ``start``, which waits while more
    than the pipe holds is unread: until the new process has imported ccotel, ccotel run's thread
    (and the live sessions) waiting. The part's files and checkpoints go in a shared-memory parcel
    instead: what ``start`` writes stays small however many files a part holds."""
    from multiprocessing.context import set_spawning_popen
    from multiprocessing.popen_spawn_posix import Popen as SpawnPopen
    from multiprocessing.reduction import ForkingPickler

    from bench.corpus import generate
    from ccotel.run import catchup

    class Popen:  # what spawn's pickling asks of the process being started
        DupFd = SpawnPopen.DupFd

        def duplicate_for_child(self, fd: int) -> int:
            return fd

    ctx = multiprocessing.get_context("spawn")
    written: list[int] = []
    unwrapped: list[tuple] = []
    parcels: list[int] = []

    def start(self):  # noqa: ANN001, ANN202 - pickled as Popen._launch does, then run here
        set_spawning_popen(Popen())
        try:
            written.append(len(ForkingPickler.dumps(self)))
        finally:
            set_spawning_popen(None)
        parcel, writer = self._args[0], self._args[6]  # catchup._worker's parcel and result pipe
        unwrapped.append(catchup._unwrap(parcel))  # noqa: SLF001
        parcels.append(len(parcel))
        writer.send({"files": 0, "lines": 0, "exported": 0, "errors": {}, "seconds": 0.0,
                     "peak_rss_mb": 0.0, "ghosts": [], "unseen_agents": []})

    monkeypatch.setattr(ctx.Process, "start", start)
    monkeypatch.setattr(ctx.Process, "is_alive", lambda self: False)
    monkeypatch.setattr(ctx.Process, "join", lambda self, timeout=None: None)
    monkeypatch.setattr(catchup, "process_context", lambda: ctx)
    root = tmp_path / "claude"
    generate(str(root), 20_000_000, seed=3, session_mean=20_000, projects=2)  # many small files
    files = sum(1 for _ in root.rglob("*.jsonl"))
    done = catch_up_in_parallel(Options(roots=(str(root),)), str(tmp_path / "s"), "none", 2, min_bytes=0)
    assert done is not None and len(written) == 2
    assert min(parcels) > 64 << 10, parcels  # as arguments, they would not fit a pipe (64 KiB)
    assert max(written) < 8 << 10, written
    assert sum(len([tf for g in groups for tf in g]) for _o, groups, _s, _c in unwrapped) == files
