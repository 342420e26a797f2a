"""The catch-up reports the memory of every process that took part (bench/run.py row 4 reads it)."""

from __future__ import annotations

import logging
import re
import resource

from ccotel.catchup import catch_up_in_parallel
from ccotel.pipeline import Options


def test_peaks_of_the_workers_and_of_the_caller_are_reported(tmp_path, caplog):
    from bench.corpus import generate

    root = tmp_path / "claude"
    generate(str(root), 2_000_000, seed=3, session_mean=200_000, projects=2)
    with caplog.at_level(logging.INFO, logger="ccotel.catchup"):
        done = catch_up_in_parallel(Options(roots=(str(root),)), str(tmp_path / "state"), "none", 2, min_bytes=0)
    assert done is not None and done.workers == 2 and done.failed_workers == 0
    assert len(done.worker_peak_rss_mb) == 2 and all(p > 5 for p in done.worker_peak_rss_mb)
    # this process's high-water mark as it was when its workers had ended
    assert 5 < done.caller_peak_rss_mb <= resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    line = next(r.getMessage() for r in caplog.records if "high-water mark" in r.getMessage())
    caller, together = (float(x) for x in re.findall(r"([0-9.]+) MB", line))
    assert caller == round(done.caller_peak_rss_mb)
    assert together == round(done.caller_peak_rss_mb + sum(done.worker_peak_rss_mb))
    assert not re.search(r"peak RSS [0-9]", line)  # bench/run.py takes the workers' peaks from "peak RSS a / b MB"
