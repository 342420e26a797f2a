"""A large catch-up read by several processes, one shard of sessions each.

One Python process is bound by its per-line work (parse, assemble, build and encode spans).
When the history to read is large, worker processes each run the ordinary pipeline over a
shard of the sessions (shard.py: sessions that may share API calls stay together) with their
own OTLP exporter, writing the same state (the SQLite database, or their host's rows in
PostgreSQL: each a writer of its own, postgres.py). The ordinary rules make this safe:
a worker moves a file's checkpoint only past turns whose every span the backend acknowledged,
and adds its counter increments (state.py commits counters as increments). Afterwards the caller's own
pipeline starts from those checkpoints: it re-reads only the turns still open, skips spans
already delivered, and is the one that declares the catch-up complete. A worker that dies
loses nothing: whatever it did not checkpoint is read again by the caller. For ``ccotel run``
the caller's pipeline is there from the start: it reads the live sessions' shards itself and
follows them while the workers run (livefirst.py), then takes over what the workers wrote.

Stopping (SIGINT/SIGTERM to ccotel, runner.Stopper): the caller sends SIGTERM to each worker and
waits for them until a deadline, then kills what is left. A worker stops like ccotel does: at
the next file, after the batch it is sending was acknowledged and committed, without moving any
offset past lines it read but did not hand to its exporter; its watchdog ends it in any case.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import os
import pickle
import resource
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ccotel.logs import configure_worker
from ccotel.metrics.counters import Metrics
from ccotel.read.discover import Checkpoint
from ccotel.read.procs import peak_rss_kb
from ccotel.read.shard import Group, balance, plan_shards, process_context, worth_processes
from ccotel.run.memory import Heap
from ccotel.run.pipeline import Options, discover, session_groups, unread_bytes
from ccotel.run.prices import AskCaller, PriceDesk
from ccotel.store.backends import open_state

if TYPE_CHECKING:
    from ccotel.run.livefirst import LiveFirst  # the watcher: not loaded by catch-up workers

__all__ = ["CatchUpResult", "catch_up_in_parallel"]

log = logging.getLogger("ccotel.catchup")


@dataclass
class CatchUpResult:
    workers: int  # processes at a time
    jobs: int = 0  # processes started in all, one after another as each ended
    files: int = 0
    lines: int = 0
    spans_exported: int = 0
    errors: Counter[str] = field(default_factory=Counter)  # bad input, by reason
    failed_workers: int = 0
    seconds: float = 0.0
    worker_seconds: list[float] = field(default_factory=list)
    worker_peak_rss_mb: list[float] = field(default_factory=list)
    # this process's RSS high-water mark when its workers had ended, before it took over what they
    # wrote: the most it held while they ran
    caller_peak_rss_mb: float = 0.0
    # for the caller's detectors (workers run none): Pipeline.adopt_detector_state
    ghosts: list[str] = field(default_factory=list)
    unseen_agents: list[tuple[str, str, int]] = field(default_factory=list)

    def workers_together_mb(self) -> float:
        """The most the workers held at any one time, at most: the sum of the ``workers`` largest
        peaks (never more than that many ran at once)."""
        return sum(sorted(self.worker_peak_rss_mb, reverse=True)[:self.workers])


# A worker returns its heap's free pages after each this many bytes read, not more often: a trim
# costs its own time and the page faults of reusing what it returned.
WORKER_TRIM_EVERY_BYTES = 32 << 20

# A worker reads at most about this much before it ends and a fresh one takes the next part: a
# process's memory grows with what it has read (heap pages pinned by what it keeps), so a history of
# any size is read in the memory of this much per worker.
WORKER_JOB_BYTES = 256 << 20

# While a worker that has sent its result exits, ccotel run follows the live sessions this often.
JOIN_POLL_S = 0.02

# A stopped worker is gone within this long (its own watchdog); the caller kills it a little later.
WORKER_STOP_GRACE_S = 1.2


def catch_up_in_parallel(options: Options, state_dir: str, exporter: str, workers: int, *, min_bytes: int,
                         progress: Callable[[int, int], None] | None = None, close_all: bool = False,
                         metrics: bool = True,
                         stopper: Any = None, live: LiveFirst | None = None,
                         host: str | None = None) -> CatchUpResult | None:
    """Read the unread history in ``workers`` processes. None if it is too small to split (less
    than ``min_bytes`` to read: the command's --parallel-min-mb) or cannot be split (one shard);
    the caller's pipeline then reads it all, as it always does.
    ``metrics``: the caller keeps metrics (``ccotel run``), so the workers add to its counters.
    ``stopper`` (runner.Stopper): once it is set the workers are stopped and runner.Interrupted raised;
    any exception (``progress`` may raise one) stops them too before it goes on.
    ``live`` (``ccotel run``): the shards of the live sessions are not the workers': this process
    reads them first and follows them while the workers read the rest (livefirst.py); once the
    workers are done it takes over what they wrote (checkpoints, acknowledged ids, counters). ``host``: this
    host's id in a PostgreSQL state; the workers write as that host (each a writer of its own,
    postgres.py) under the lock and lease the caller holds: they take neither."""
    if not worth_processes(workers, live=live is not None, exporter=exporter):
        return None
    t0 = time.monotonic()
    state = open_state(state_dir, host, verify=False)  # the caller opened (and checked) it first
    try:
        checkpoints = state.files()
    finally:
        state.close()
    files = discover(options, checkpoints)
    if sum(unread_bytes(tf.path, checkpoints) for _root, tf in files) < min_bytes:
        return None
    groups = session_groups(files, checkpoints)
    weights = [sum(unread_bytes(tf.path, checkpoints) for _root, tf in g) for g in groups]
    total = sum(weights)
    # a shard with nothing to read is no one's: its sessions (one followed before a restart, and
    # live now) are followed by this process from the start, never held for a worker
    heads: dict[tuple[str, str], int] = {}
    shards = [m for m in plan_shards(groups, weights, heads) if any(weights[i] for i in m)]
    # the live sessions' shards read here first, and those too large for that: each its worker's first part
    first, urgent = live.live_shards(groups, shards, weights) if live is not None else ([], [])
    bins = balance([m for m in shards if m not in first], weights, workers)
    if not worth_processes(len(bins), live=live is not None, exporter=exporter):
        return None
    mine = [groups[i] for members in first for i in sorted(members)]
    sizes = live.pipeline.delivery.started_sizes if live is not None else None
    # the caller follows those (and counts the hooks' events); workers read the spool from where the
    # caller's pipeline starts it, to put what the hooks said on their spans as one process would
    spool = os.path.join(os.path.abspath(options.hooks_spool), "") if options.hooks_spool else None
    worker_options = dataclasses.replace(
        options, orchestrator_logs=(), registries=(),
        hooks_annotate_from={p: c for p, c in checkpoints.items() if p.startswith(spool)} if spool else None)
    ctx = process_context()
    # one queue of parts a bin: a bin's parts are read one after another, never at once (a shard's
    # sessions may share API calls, and a part reads the calls the parts before it committed)
    queues = [[_job([groups[i] for i in part], sizes, checkpoints) for part in parts]
              for parts in _split(bins, weights, {i for members in urgent for i in members})]
    jobs = [job for queue in queues for job in queue]
    # bytes read so far, a slot a bin (its parts run one after another: one writer a slot). No lock:
    # a lock is a semaphore the resource tracker must be told is freed, which a stop cut short
    # left to its warning at exit
    done = ctx.RawArray("q", len(queues))
    running: list[tuple[Any, Any]] = []
    if stopper is not None:
        stopper.hard = False  # from here on the workers are stopped, not abandoned
        stopper.check()

    # prices.py: what the price cache lacks, looked up here once; from a thread when the workers
    # are spawned (this process has threads already), else from the loop waiting for them
    desk = PriceDesk(options.pricing, threaded=ctx.get_start_method() != "fork")

    started: dict[Any, tuple[Any, _Job]] = {}  # a running worker's parcel (kept until it has ended) and job

    def start(job: _Job, slot: int) -> tuple[Any, Any]:
        reader, writer = ctx.Pipe(duplex=False)
        asks, answers = ctx.Pipe(duplex=True)
        parcel = _parcel(ctx, worker_options, job.groups, job.started, job.checkpoints)
        proc = ctx.Process(target=_worker, name="ccotel-catchup", daemon=True,
                           args=(parcel, state_dir, exporter, close_all, metrics, (done, slot), writer, os.getpid(),
                                 host, asks))
        proc.start()
        started[proc] = parcel, job
        writer.close()
        asks.close()
        desk.add(answers)
        return proc, reader

    try:
        if live is not None:
            live.note_heads(groups, heads)
            for job in jobs:
                live.hold(job.groups)
        running = [start(queue.pop(0), b) for b, queue in enumerate(queues)]
        log.info("catching up on %.1f MB in %d process%s%s%s", total / 1e6, len(running),
                 "es" if len(running) != 1 else "",
                 f" ({len(jobs)} in turn)" if len(jobs) > len(running) else "",
                 f" (and %.1f MB of {len(mine)} live sessions here, followed meanwhile)" % (
                     sum(weights[i] for m in first for i in m) / 1e6) if mine else "")
        if live is not None and mine:
            live.hold(mine)
            def between(group: Group) -> None:
                live.between(group)
                desk.serve()

            live.pipeline.backfill(lambda _done, _total: stopper.check() if stopper is not None else None,
                                   groups=mine, final=False, between=between)
        result = _collect(running, queues, start, done, total, progress, stopper, desk, live, started)
    except BaseException:
        _stop_workers(running, stopper)
        raise
    finally:
        desk.close()
    # Every worker has ended (joined): this process's mark now is the most it held beside them;
    # what it takes over next (their checkpoints, ids and digests) is held after them, never beside.
    result.caller_peak_rss_mb = _peak_rss_mb()
    if live is not None:
        _take_over(live, metrics)
    result.seconds = time.monotonic() - t0
    # What all processes held together at most (this process's peak from here on no longer adds
    # to theirs). Not "peak RSS ...": bench/run.py reads that of the workers.
    log.info("RSS high-water mark of this process during the catch-up: %.0f MB (with its workers' at most %.0f MB)",
             result.caller_peak_rss_mb, result.caller_peak_rss_mb + result.workers_together_mb())
    return result


@dataclass(frozen=True)
class _Job:
    """The session groups one worker process reads, with their sizes at ccotel run's start and the
    checkpoints of their files (only those: every file's grew with the history, in each worker)."""

    groups: list[Group]
    started: dict[str, int] | None
    checkpoints: dict[str, Checkpoint]


def _job(groups: list[Group], sizes: dict[str, int] | None, checkpoints: Mapping[str, Checkpoint]) -> _Job:
    paths = [tf.path for g in groups for _r, tf in g]
    # Its files are this job's alone (no other worker reads them, and the caller holds them:
    # livefirst.py), so their checkpoints are still those read when the catch-up started.
    return _Job(groups, None if sizes is None else {p: sizes.get(p, 0) for p in paths},
                {p: checkpoints[p] for p in paths if p in checkpoints})


def _split(bins: list[list[int]], weights: list[int], urgent: AbstractSet[int] = frozenset()) -> list[list[list[int]]]:
    """Each process's bin in parts of about WORKER_JOB_BYTES, in order; the groups in ``urgent`` (a
    live session's shard) first, in parts of their own: followed as soon as their part is done."""
    return [_parts([i for i in b if i in urgent], weights) + _parts([i for i in b if i not in urgent], weights)
            for b in bins]


def _parts(b: list[int], weights: list[int]) -> list[list[int]]:
    """One bin cut, in order, into parts of about equal bytes (a worker's peak grows with the bytes
    it reads, not with its sessions: parts of equal sessions ranged from half to twice the size)."""
    total = sum(weights[i] for i in b)
    n = max(1, -(-total // WORKER_JOB_BYTES))
    out: list[list[int]] = [[]]
    done = 0
    for i in b:
        # a new part once this one has its share: where the bytes read so far cross a k/n boundary
        if out[-1] and len(out) < n and done + weights[i] / 2 > total * len(out) / n:
            out.append([])
        out[-1].append(i)
        done += weights[i]
    return [part for part in out if part]


def _parcel(ctx: Any, *parts: Any) -> Any:
    """``parts`` pickled into shared memory, for a worker to read first. Passed as the process's
    arguments instead, they are written to its pipe by ``start``, which then waits while more than
    the pipe holds (64 KiB) is unread: until the new process has imported ccotel and unpickled
    them, ccotel run's thread (and the live sessions) waiting. A part's files and checkpoints are
    many times what a pipe holds."""
    data = pickle.dumps(parts, protocol=pickle.HIGHEST_PROTOCOL)
    parcel = ctx.RawArray("B", len(data))
    memoryview(parcel).cast("B")[:] = data
    return parcel


def _unwrap(parcel: Any) -> Any:
    return pickle.loads(memoryview(parcel).cast("B"))


def _stop_workers(procs: list[tuple[Any, Any]], stopper: Any) -> None:
    """SIGTERM each worker still running, wait for them (until the stopper's deadline), kill the rest."""
    alive = [proc for proc, _ in procs if proc.is_alive()]
    for proc in alive:
        try:
            os.kill(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    until = stopper.deadline(0.85) if stopper is not None and stopper.is_set() else time.monotonic() + 1.5
    for proc in alive:
        proc.join(max(until - time.monotonic(), 0.0))
    for proc in alive:
        if proc.is_alive():
            log.warning("catch-up worker %d did not stop in time: killed", proc.pid)
            proc.kill()
            proc.join(1.0)
    for _, reader in procs:
        reader.close()


def _take_over(live: LiveFirst, metrics: bool) -> None:
    """The workers are done: this process's pipeline takes what they wrote to the state (their
    counters too, which ccotel run serves from here on)."""
    pipeline = live.pipeline
    pipeline.adopt_state()
    live.poll(0.0)  # what was written meanwhile (the digests of a long history take a while)
    if metrics and pipeline.metrics is not None and pipeline.state is not None:
        pipeline.metrics.absorb(pipeline.state.others_counters())


def _collect(running: list[tuple[Any, Any]], queues: list[list[_Job]],
             start: Callable[[_Job, int], tuple[Any, Any]], done: Any, total: int,
             progress: Callable[[int, int], None] | None, stopper: Any,
             desk: PriceDesk, live: LiveFirst | None, started: dict[Any, tuple[Any, _Job]]) -> CatchUpResult:
    """Wait for the workers' results, starting the next part of a bin as its running part ends
    (``running[k]`` reads bin k's parts, ``queues[k]`` what is left of them; ``live``: following
    the live sessions meanwhile, and those of each part done from then on; ``started``: each
    worker's parcel and job, dropped once it has ended). ``running`` is kept current: the caller
    stops what is in it."""
    result = CatchUpResult(workers=len(running), jobs=len(running) + sum(map(len, queues)))
    queues = [list(q) for q in queues]
    bins = list(range(len(running)))  # the bin each running worker reads, beside ``running``
    while running:
        ended = _wait_for_one(running, done, total, progress, stopper, desk, live)
        proc, reader = running.pop(ended)
        b = bins.pop(ended)
        stats = _receive(reader)
        _join(proc, live)
        reader.close()
        job = started.pop(proc)[1]  # its parcel goes with it
        if queues[b]:
            running.append(start(queues[b].pop(0), b))
            bins.append(b)
        if stats is None:
            result.failed_workers += 1
            log.warning("a catch-up worker ended with exit code %s; its unfinished part is read again",
                        proc.exitcode)
            continue
        if live is not None:
            live.adopt(job.groups)
        result.files += stats["files"]
        result.lines += stats["lines"]
        result.spans_exported += stats["exported"]
        result.errors.update(stats["errors"])
        result.worker_seconds.append(stats["seconds"])
        result.worker_peak_rss_mb.append(stats["peak_rss_mb"])
        result.ghosts += stats["ghosts"]
        result.unseen_agents += [tuple(a) for a in stats["unseen_agents"]]
    if progress is not None:
        progress(min(sum(done), total), total)
    return result


def _wait_for_one(running: list[tuple[Any, Any]], done: Any, total: int,
                  progress: Callable[[int, int], None] | None, stopper: Any, desk: PriceDesk,
                  live: LiveFirst | None) -> int:
    """The index of a worker that has sent its result or ended (answering the workers' price
    questions meanwhile)."""
    while True:
        for i, (proc, reader) in enumerate(running):
            if reader.poll(0.0) or not proc.is_alive():
                if stopper is not None:
                    stopper.check()
                return i
        if live is not None:
            live.poll(0.1)
            live.pipeline.process_acks(force=False)
            desk.serve()
        else:
            desk.serve(0.1)
        if stopper is not None:
            stopper.check()
        if progress is not None:
            progress(min(sum(done), total), total)


def _join(proc: Any, live: LiveFirst | None) -> None:
    """Wait for a worker that has sent its result (or died) to exit, following the live sessions meanwhile."""
    while live is not None and proc.is_alive():
        live.poll(0.0)
        proc.join(JOIN_POLL_S)
    proc.join()


def _receive(reader: Any) -> dict[str, Any] | None:
    try:
        return reader.recv() if reader.poll(1.0) else None
    except (EOFError, OSError):
        return None


def _worker(parcel: Any, state_dir: str, exporter: str, close_all: bool, count: bool, done: tuple[Any, int],
            writer: Any, parent_pid: int, host: str | None = None, prices: Any = None) -> None:
    from ccotel.run.runner import Interrupted, Stopper, die, settle_state, wire

    configure_worker()
    options: Options
    groups: list[Group]
    started_sizes: dict[str, int] | None
    checkpoints: dict[str, Checkpoint]
    options, groups, started_sizes, checkpoints = _unwrap(parcel)
    if prices is not None:  # this process's own copy of the caller's Pricing
        options.pricing.lookup = AskCaller(prices)

    shared, slot = done  # catch_up_in_parallel's count of bytes read, and this worker's slot in it
    stopper = Stopper(grace_s=WORKER_STOP_GRACE_S).install()  # hard: raises at once until the first file
    _die_with_parent(parent_pid)
    heap = Heap()  # memory.py: a worker's heap would otherwise only grow (its peak RSS, issue 15)
    heap.map_large_blocks()
    trimmed = [0]
    t0 = time.monotonic()
    metrics = Metrics(max_label_values=options.max_label_values) if count else None
    wired = wire(options, exporter, state_dir, metrics, stopper, verify=False, host=host, checkpoints=checkpoints)
    pipeline, queue, state = wired.pipeline, wired.queue, wired.state
    assert state is not None
    pipeline.delivery.started_sizes = started_sizes  # lines written since ccotel run started count
    last = [0]

    def progress(n: int, _total: int) -> None:
        stopper.hard = False
        stopper.check()
        if os.getppid() != parent_pid:
            os._exit(1)  # ccotel is gone (where PR_SET_PDEATHSIG does not exist)
        shared[slot] += n - last[0]
        last[0] = n
        if n - trimmed[0] >= WORKER_TRIM_EVERY_BYTES:
            heap.trim()
            trimmed[0] = n

    try:
        try:
            pipeline.backfill(progress, close_all=close_all, groups=groups, final=False)
        except Interrupted:
            queue.abandon(stopper.deadline(0.8))  # no process_acks: see runner.read_history
            raise
        stopper.hard = False
        while not queue.flush(timeout_s=0.1):
            stopper.check()
        stopper.check()
    except Interrupted as stop:
        pipeline.keep_own_counts()  # failed exports while the backend was away
        die(stop.signum)
    queue.close(timeout_s=None)
    pipeline.process_acks()
    settle_state(state, time.monotonic() + 5.0)
    state.close()
    wired.close()
    ghosts, unseen = pipeline.detector_state()
    writer.send({"ghosts": ghosts, "unseen_agents": unseen, "files": pipeline.stats.files,
                 "lines": pipeline.stats.lines, "exported": queue.exported,
                 "errors": dict(pipeline.stats.errors), "seconds": time.monotonic() - t0,
                 "peak_rss_mb": _peak_rss_mb()})
    writer.close()


def _peak_rss_mb() -> float:
    """This process's RSS high-water mark, MB. Linux: VmHWM, of this program only. ru_maxrss
    keeps, across exec, the RSS of the process it was forked from: a spawned worker would report
    ccotel run's RSS at the spawn, and ccotel run that of whatever started it."""
    hwm = peak_rss_kb()
    if hwm is not None:
        return hwm / 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB elsewhere


def _die_with_parent(parent_pid: int) -> None:
    """A worker must not outlive ccotel: a restarted ccotel would read its sessions a second time."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the parent's pid is checked below and on every progress poll instead
    if os.getppid() != parent_pid:
        os._exit(1)
