"""The runner's wiring: one wire() for every command, the usage ledger filled once for a state
that predates it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from ccotel.store.ledger import Ledger
from tests.harness.fixtures import FIXTURES_DIR


def _root(tmp_path, scenario: str = "s03_parallel_subagents") -> str:
    src = os.path.join(FIXTURES_DIR, "2.1.330", scenario, "claude")
    dst = str(tmp_path / "claude")
    shutil.copytree(src, dst)
    return dst


def main(args: list[str]) -> int:
    """ccotel in its own process (it holds the state dir's lock until it ends)."""
    return subprocess.run([sys.executable, "-m", "ccotel", *args], capture_output=True, timeout=120).returncode


def _calls(state_dir: str) -> set[str]:
    ledger = Ledger(os.path.join(state_dir, "ledger.db"))
    try:
        return ledger.call_keys()
    finally:
        ledger.close()


def test_a_state_without_a_ledger_gets_one_filled_from_the_transcripts(tmp_path):
    root, st = _root(tmp_path), str(tmp_path / "st")
    args = ["backfill", "--root", root, "--state-dir", st, "--traces-exporter", "none", "--close-all"]
    assert main(args) == 0
    made_while_reading = _calls(st)
    assert made_while_reading  # the ledger is written as spans are built
    for name in os.listdir(st):  # an older ccotel's state: checkpoints, no ledger
        if name.startswith("ledger.db"):
            os.remove(os.path.join(st, name))
    assert main(args) == 0  # nothing new to read: the checkpoints hold it all
    assert _calls(st) == made_while_reading
    assert main(args) == 0  # filled once: a third start reads nothing again
    assert _calls(st) == made_while_reading


class _Watcher:
    def __init__(self, spaces: bool) -> None:
        self.spaces_batches = spaces
        self.waits = 0

    def wait(self, timeout_s: float) -> set[str]:
        self.waits += 1
        return {"late"}


def test_polls_are_spaced_once_by_the_watcher_or_by_the_runner() -> None:
    """inotify's reader spaces its batches POLL_GAP_S apart: the runner polls at once (a second gap
    out of phase with it would add to an append's wait). Other watchers: the runner waits out the
    gap since the last poll and gathers what came meanwhile; a lone append waits for nothing."""
    import time as _time

    from ccotel.run.runner import POLL_GAP_S, _gather

    dirty: set[str] = {"a"}
    spacing = _Watcher(True)
    t0 = _time.monotonic()
    _gather(spacing, dirty, last_poll=t0, gap_s=POLL_GAP_S)  # type: ignore[arg-type]
    assert _time.monotonic() - t0 < POLL_GAP_S / 2 and spacing.waits == 0 and dirty == {"a"}
    plain = _Watcher(False)
    t0 = _time.monotonic()
    started = _gather(plain, dirty, last_poll=t0, gap_s=POLL_GAP_S)  # type: ignore[arg-type]
    assert started - t0 >= POLL_GAP_S * 0.9 and dirty == {"a", "late"}
    t0 = _time.monotonic()
    _gather(plain, dirty, last_poll=t0 - 1.0, gap_s=POLL_GAP_S)  # type: ignore[arg-type]
    assert _time.monotonic() - t0 < POLL_GAP_S / 2 and plain.waits == 1


def test_polls_are_spaced_wider_only_while_a_heavy_stream_lasts() -> None:
    """A poll that read lines at BUSY_LINES_PER_S or more (since the poll before) puts the next
    BUSY_POLL_GAP_S after it (fewer, larger batches: less CPU per line); anything slower keeps
    POLL_GAP_S, also after a wide gap gathered many lines of a slower stream, and the first poll
    after a quiet time; the inotify reader is told the gap (it spaces batches on Linux)."""
    from ccotel.read.watch import Watcher
    from ccotel.run.runner import BUSY_LINES_PER_S, BUSY_POLL_GAP_S, POLL_GAP_S, poll_gap

    fast = int(BUSY_LINES_PER_S * POLL_GAP_S)  # lines in one short gap at the busy rate
    assert poll_gap(0, POLL_GAP_S) == poll_gap(fast - 1, POLL_GAP_S) == POLL_GAP_S
    assert poll_gap(fast, POLL_GAP_S) == poll_gap(10_000, POLL_GAP_S) == BUSY_POLL_GAP_S > POLL_GAP_S
    slower = int(BUSY_LINES_PER_S * BUSY_POLL_GAP_S / 2)  # half the rate, gathered over a wide gap
    assert slower > fast and poll_gap(slower, BUSY_POLL_GAP_S) == POLL_GAP_S
    assert poll_gap(10 * fast, 1000.0) == POLL_GAP_S  # the first poll after a quiet time
    assert poll_gap(fast, 0.0) == BUSY_POLL_GAP_S  # polls closer than the gap: the gap counts
    assert BUSY_POLL_GAP_S <= 0.25  # a heavy stream's lines still reach the backend within ~0.25 s
    watcher = Watcher(())
    watcher.space_batches(0.5)  # not started: no inotify reader to tell, nothing fails
