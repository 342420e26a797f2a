"""Splitting a large catch-up over processes: which session groups may be read apart.

An API call is counted once across ALL files (docs/format.md 2 and 4.2: resumed, forked and copied sessions
replay the same message.id/requestId), and the first file in time order keeps it. Reading
two sessions in different processes is therefore exact only when no call can appear in both.
A session's subagents are in its group already; a resumed session appends to its own file; a
forked or copied session starts with the original's lines (the same uuids, message ids and
request ids, docs/format.md 10). So sessions whose main files begin with the same uuid, or whose first
API response has the same message id, share a shard; other sessions may be read apart, also
within one project (most of a heavy user's history is often one project). Within a shard,
groups keep their global (oldest first) order.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ccotel.read.regular import open_regular
from ccotel.records import FileKind, TranscriptFile

if TYPE_CHECKING:  # multiprocessing is loaded when processes are started: a backfill in one process never does
    from multiprocessing.connection import Connection
    from multiprocessing.context import ForkContext, SpawnContext
    from multiprocessing.process import BaseProcess

__all__ = ["Group", "plan_shards", "balance", "default_workers", "end_resource_tracker", "worth_processes", "head_keys",
           "process_context", "run_jobs"]

Group = list[tuple[str, TranscriptFile]]  # (root, file), main file first
_J = TypeVar("_J")
_R = TypeVar("_R")


def head_keys(path: str, first: int = 1 << 16, limit: int = 4 << 20) -> list[tuple[str, str]]:
    """What a copy of this session would share with it: the first uuid and the first message id
    (of an API response: "msg_..."), from the file's start (64 KiB, up to 4 MiB when the first
    prompt is long). Neither found: ("unknown", ""), which puts all such sessions together."""
    keys: dict[str, str] = {}
    try:
        with open_regular(path) as f:
            head = f.read(first)
            while True:
                for kind, needle in (("uuid", b'"uuid":"'), ("message", b'"id":"msg_')):
                    i = head.find(needle) if kind not in keys else -1
                    start = i + len(needle) - (4 if kind == "message" else 0)
                    end = head.find(b'"', start) if i >= 0 else -1
                    if 0 < end - start <= 128:
                        keys[kind] = head[start:end].decode("utf-8", "replace")
                if len(keys) == 2 or len(head) >= limit:
                    break
                more = f.read(len(head))
                if not more:
                    break
                head += more
    except OSError:
        pass
    return list(keys.items()) or [("unknown", "")]


def plan_shards(groups: Sequence[Group], weights: Sequence[int],
                heads: dict[tuple[str, str], int] | None = None) -> list[list[int]]:
    """Indices of ``groups`` per shard (each list ascending), heaviest shard first (weights are
    bytes to read). Groups that may share API calls are always in the same shard; shards are
    handed to worker processes as they come free, so the heaviest go first. ``heads``: filled with
    each head key (``head_keys``) and the first group that has it."""
    parent = list(range(len(groups)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(a: int, b: int) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    by_key: dict[tuple[str, str], int] = {}
    for i, group in enumerate(groups):
        main = next((tf for _root, tf in group if tf.kind is FileKind.MAIN), None)
        keys = head_keys(main.path) if main is not None else []
        for key in keys:
            j = by_key.setdefault(key, i)
            union(i, j)
    if heads is not None:
        heads.update(by_key)
    components: dict[int, list[int]] = {}
    for i in range(len(groups)):
        components.setdefault(find(i), []).append(i)
    return sorted(components.values(), key=lambda m: -sum(weights[i] for i in m))


def balance(shards: list[list[int]], weights: Sequence[int], n: int) -> list[list[int]]:
    """At most ``n`` bins of shards, by weight (heaviest shard into the lightest bin); each bin's
    group indices ascending, so every process reads its sessions in time order."""
    bins: list[list[int]] = [[] for _ in range(max(1, min(n, len(shards))))]
    loads = [0] * len(bins)
    for members in sorted(shards, key=lambda m: -sum(weights[i] for i in m)):
        k = loads.index(min(loads))
        loads[k] += sum(weights[i] for i in members)
        bins[k].extend(members)
    return [sorted(b) for b in bins if b]


def process_context() -> ForkContext | SpawnContext:
    """fork when this process has no other thread (instant, nothing to re-import), else spawn:
    forking a process with threads can copy a lock some thread holds."""
    import multiprocessing

    if threading.active_count() == 1 and "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def end_resource_tracker() -> None:
    """Stop multiprocessing's resource tracker, if this process started one. A spawned worker (or
    a spawn context's lock) starts it: a Python process of its own, several MB, that would live as
    long as ccotel run, tracking nothing once the workers are gone and their shared counter freed.
    Were anything tracked again later, multiprocessing would start it again. A process that never
    loaded the tracker never started one: it is not imported for nothing (a backfill in one process)."""
    resource_tracker = sys.modules.get("multiprocessing.resource_tracker")
    if resource_tracker is None:
        return
    tracker = getattr(resource_tracker, "_resource_tracker", None)
    stop = getattr(tracker, "_stop", None)  # private, in 3.10 to 3.13: nothing to stop without it
    if stop is not None:
        stop()


def worth_processes(workers: int, *, live: bool, exporter: str) -> bool:
    """Whether a catch-up in ``workers`` processes is worth starting them (run/catchup.py). Beside
    ccotel run (``live``) even one worker is: the caller follows the live sessions meanwhile;
    without it one worker would only do what the caller does itself. Never for the console
    exporter: several processes would interleave its output."""
    return workers >= (1 if live else 2) and exporter != "console"


def default_workers() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 4))


def run_jobs(jobs: Sequence[_J], n: int, read: Callable[..., _R], *args: Any) -> list[_R]:
    """``read(job, *args)`` of every job over ``n`` processes, this one included, each job once;
    the results in the jobs' order. Every process takes the next job (heaviest first, as the jobs
    are given) from one shared counter when it comes free, so no process holds a job another
    could start and all end within about one job of each other (a process pool queues each
    worker's next jobs ahead of time: at the end this process waited for those, bench/NOTES.md)."""
    ctx = process_context()
    taken = ctx.Value("q", 0)
    workers: list[tuple[BaseProcess, Connection]] = []
    ok = False
    try:
        for _ in range(min(n, len(jobs)) - 1):
            receive, send = ctx.Pipe(duplex=False)
            worker = ctx.Process(target=_work, args=(jobs, taken, send, read, args), daemon=True)
            worker.start()
            send.close()
            workers.append((worker, receive))
        done = dict(_take_jobs(jobs, taken, read, args))
        for started, receive in workers:
            done.update(_result_of(started, receive))
        ok = True
    finally:
        for started, _receive in workers:
            if not ok:
                started.terminate()
            started.join()
    return [done[i] for i in range(len(jobs))]


def _take_jobs(jobs: Sequence[_J], taken: Any, read: Callable[..., _R],
               args: tuple[Any, ...]) -> Iterator[tuple[int, _R]]:
    while True:
        with taken.get_lock():
            i = taken.value
            taken.value = i + 1
        if i >= len(jobs):
            return
        yield i, read(jobs[i], *args)


def _work(jobs: Sequence[_J], taken: Any, send: Connection, read: Callable[..., _R], args: tuple[Any, ...]) -> None:
    """A worker process: jobs until none is left, then all its results at once (sent one by one,
    a result would wait in the pipe until the parent, reading too, came to take it). Ctrl-C is the
    parent's to act on (it ends the readers): a reader of its own would print a traceback each."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        send.send((True, list(_take_jobs(jobs, taken, read, args))))
    except Exception as exc:  # noqa: BLE001 - handed to the parent, which raises it
        send.send((False, f"{type(exc).__name__}: {exc}"))
    finally:
        send.close()


def _result_of(process: BaseProcess, receive: Connection) -> list[tuple[int, Any]]:
    from multiprocessing.connection import wait

    wait([receive, process.sentinel])
    try:
        ok, result = receive.recv()
    except EOFError:
        raise RuntimeError(f"a reading process ended without its results (exit code {process.exitcode})") from None
    if not ok:
        raise RuntimeError(f"a reading process failed: {result}")
    return list(result)
