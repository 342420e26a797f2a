"""Which shards ccotel run reads itself while it catches up (livefirst.LiveFirst.live_shards): those
holding a session written just now, also one read to its end before a restart (nothing of its own to
read, its shard's other sessions something); and when it takes over a worker's part before the
workers end (a copy of one of its sessions waits for it)."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

from ccotel.run.livefirst import RECENT_S, LiveFirst


def live_first() -> LiveFirst:
    lf = object.__new__(LiveFirst)  # live_shards reads the files' times and nothing of the pipeline
    lf.since_s = time.time() - RECENT_S
    return lf


def group(tmp_path, name: str, age_s: float) -> list:
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(b"{}\n")
    os.utime(path, (time.time() - age_s,) * 2)
    return [(str(tmp_path), SimpleNamespace(path=str(path)))]


def test_a_shard_whose_recent_session_was_read_to_its_end_is_read_here(tmp_path):
    groups = [group(tmp_path, "followed", 1.0), group(tmp_path, "resumed-from-it", 86_400),
              group(tmp_path, "old", 86_400)]
    weights = [0, 5_000, 20_000]  # the followed session has nothing left to read
    assert live_first().live_shards(groups, [[2], [0, 1]], weights) == ([[0, 1]], [])


def test_a_shard_of_old_sessions_goes_to_the_workers(tmp_path):
    groups = [group(tmp_path, "a", 86_400), group(tmp_path, "b", 86_400)]
    assert live_first().live_shards(groups, [[0], [1]], [5_000, 20_000]) == ([], [])


def test_the_most_recent_shard_first_within_the_cap(tmp_path):
    groups = [group(tmp_path, "older", 60.0), group(tmp_path, "newest", 1.0), group(tmp_path, "history", 86_400)]
    weights = [1_000, 1_000, 100_000]
    assert live_first().live_shards(groups, [[2], [0], [1]], weights) == ([[1], [0]], [])


def test_a_live_session_too_large_to_be_read_here_is_a_workers_first_part(tmp_path):
    from ccotel.run import catchup
    from ccotel.run.livefirst import LIVE_MAX_BYTES

    groups = [group(tmp_path, "old", 86_400), group(tmp_path, "long-and-live", 1.0), group(tmp_path, "older", 86_400)]
    weights = [10 << 20, LIVE_MAX_BYTES + 1, 10 << 20]
    first, urgent = live_first().live_shards(groups, [[0], [1], [2]], weights)
    assert (first, urgent) == ([], [[1]])
    # its worker reads it first, in a part of its own (then the rest of its bin)
    assert catchup._split([[0, 1, 2]], weights, {1}) == [[[1], [0, 2]]]
    assert catchup._split([[0, 2]], weights, {1}) == [[[0, 2]]]


class _Pipeline:
    """What LiveFirst asks of the pipeline when it takes a worker's part over and reads a new file."""

    def __init__(self, root: str) -> None:
        from ccotel.read.discover import classify

        self.files: dict[str, bool] = {}
        self.adopted: list[set[str]] = []
        self.polled: list[str] = []
        self.reader = SimpleNamespace(classify=lambda p: (root, tf) if (tf := classify(root, p)) else None)

    def adopt_state(self, paths: set[str]) -> None:
        self.adopted.append(set(paths))

    def poll(self, paths: list[str]) -> None:
        self.polled += paths
        self.files.update(dict.fromkeys(paths, True))


def session(root, sid: str, head: bytes, age_s: float):
    from ccotel.read.discover import classify

    path = root / "projects" / "-p" / f"{sid}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(head)
    os.utime(path, (time.time() - age_s,) * 2)
    return path, [(str(root), classify(str(root), str(path)))]


def test_a_copy_of_a_session_whose_part_is_done_takes_that_part_over_then_is_read(tmp_path):
    """A worker's part with no live session waits for the take-over after the workers; a copy of
    one of its sessions written meanwhile (a fork) has it taken over at once, then is read."""
    from ccotel.read.shard import plan_shards
    from ccotel.run.livefirst import LiveFirst

    line = b'{"type":"user","uuid":"u-1","sessionId":"S"}\n{"type":"assistant","message":{"id":"msg_1"}}\n'
    original, group = session(tmp_path, "11111111-1111-4111-8111-111111111111", line, 86_400)
    part = [group]  # a worker's part: its session groups
    lf = LiveFirst.__new__(LiveFirst)
    pipeline = _Pipeline(str(tmp_path))
    lf.__dict__.update(pipeline=pipeline, since_s=time.time() - RECENT_S, _held=set(), _held_flat=set(),
                       _deferred=set(), _heads={}, _waiting={}, _done_parts=[], _tops=set())
    heads: dict = {}
    plan_shards(part, [len(line)], heads)
    lf.note_heads(part, heads)
    lf.hold(part)
    lf.adopt(part)  # read by its worker; nothing live in it
    assert pipeline.adopted == [] and lf._done_parts == [part]

    empty, _ = session(tmp_path, "22222222-2222-4222-8222-222222222222", b"", 0)
    lf._take([str(empty)])  # just created: nothing to tell a copy by yet
    assert pipeline.polled == [] and str(empty) in lf._deferred

    fork, _ = session(tmp_path, "33333333-3333-4333-8333-333333333333", line, 0)
    lf._take([str(fork)])
    assert pipeline.adopted == [{str(original)}]  # the original's part, taken over for the fork
    assert pipeline.polled == [str(fork)] and lf._done_parts == [] and lf._waiting == {}
