"""Which shards ccotel run reads itself while it catches up (livefirst.LiveFirst.live_shards): those
holding a session written just now, also one read to its end before a restart (nothing of its own to
read, its shard's other sessions something)."""

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
