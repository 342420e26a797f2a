"""Stopping: SIGINT and SIGTERM honoured in every phase, and the exit status.

Apart from runner.py so that a command that only reads (check, report, doctor) can say how it
ends without importing the pipeline.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ccotel.export.closed import discard

if TYPE_CHECKING:
    from ccotel.store.state import State

__all__ = ["Stopper", "Interrupted", "StdoutClosed", "end_quietly", "die", "settle_state", "EXIT_ERROR", "EXIT_LOCKED",
           "STOP_GRACE_S", "STOP_SIGNALS"]

log = logging.getLogger("ccotel")

# Exit status (docs/run.md, "Stopping and exit status"): 0 done (backfill) or stopped by a signal once caught up
# (run); killed by SIGINT/SIGTERM (130/143 in a shell) when stopped before its work was done;
# EXIT_ERROR the state cannot be used or a checkpoint could not be written; EXIT_LOCKED
# another ccotel holds the state dir; 2 usage (argparse) or, for check, refused.
EXIT_ERROR = 1
EXIT_LOCKED = 75  # EX_TEMPFAIL: try again once the other one stopped

# After SIGINT/SIGTERM the process is gone within this long, whatever it was doing.
STOP_GRACE_S = 1.75
# The signals that stop ccotel as it stops itself: Ctrl-C, a service manager's stop, and the hang-up
# of the terminal or tmux pane it runs in (which killed it mid-batch: no data lost, the batch on the
# wire sent again after a restart).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StdoutClosed(Interrupted):
    """stdout was closed by its reader (`ccotel ... | head`): the command stops as for a signal
    (nothing more is checkpointed) but ends quietly with status 0 (``end_quietly``)."""

    def __init__(self) -> None:
        Exception.__init__(self, "stdout closed")
        self.signum = 0


def end_quietly() -> int:
    """The exit of a command whose stdout was closed: status 0 as `yes | head` gives, no
    traceback; what is still buffered for stdout goes to /dev/null."""
    discard(sys.stdout)
    return 0


class Stopper:
    """SIGINT and SIGTERM, honoured in every phase.

    ``hard`` (the default, and while nothing is being checkpointed by this thread: discovery,
    loading the state, starting workers' reads): the handler raises Interrupted at once.
    Otherwise it only sets ``event`` and the code stops at its next ``check()`` (between
    files, every 0.25 s live). Either way each ``wakers`` callable runs (an export queue drops
    its unsent spans so nothing blocks on it), and a watchdog thread ends the process
    ``grace_s`` after the signal if it has not ended by then; a second signal ends it at once.
    The process ends by the signal itself (``die``), so a shell sees 130 / 143 and systemd a
    clean stop."""

    def __init__(self, grace_s: float = STOP_GRACE_S) -> None:
        self.grace_s = grace_s
        self.event = threading.Event()
        self.signum = 0
        self.at = 0.0  # monotonic time of the first signal
        self.hard = True
        self.wakers: list[Callable[[], None]] = []
        self.closed = False  # stopped because stdout was closed, not by a signal
        self.reason: str | None = None  # stopped from within (``give_up``), not by a signal

    def stdout_closed(self) -> None:
        """From any thread: stdout's reader went away (the console exporter found its pipe
        closed). The command stops at its next ``check()``, which raises StdoutClosed; the
        wakers run so nothing blocks on the export queue; a watchdog ends the process with
        status 0 ``grace_s`` later if it has not ended by then."""
        if self.event.is_set():
            return
        self.closed, self.at = True, time.monotonic()
        self.event.set()
        threading.Thread(target=self._watchdog, name="ccotel-stop", daemon=True).start()
        for wake in self.wakers:
            wake()

    def why(self) -> str:
        """What stopped the command: the signal's name, "stdout closed", or the reason given up for."""
        if self.reason is not None:
            return self.reason
        return "stdout closed" if self.closed else signal.Signals(self.signum).name

    def give_up(self, reason: str) -> None:
        """Stop from within, as for a signal but without one (the state was taken from under this
        process): the loops that watch ``is_set`` end and the command exits with EXIT_ERROR."""
        if self.event.is_set():
            return
        self.reason, self.at = reason, time.monotonic()
        self.event.set()
        for wake in self.wakers:
            wake()

    def install(self) -> Stopper:
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._handle)
        return self

    def is_set(self) -> bool:
        return self.event.is_set()

    def deadline(self, share: float = 1.0) -> float:
        """A monotonic time ``share`` of the grace period after the signal."""
        return self.at + self.grace_s * share

    def check(self) -> None:
        if self.event.is_set():
            raise StdoutClosed() if self.closed else Interrupted(self.signum)

    def _handle(self, signum: int, _frame: object) -> None:
        if self.event.is_set():
            die(signum, f"{signal.Signals(signum).name} again: exiting now; checkpoints are as last written")
        self.signum, self.at = signum, time.monotonic()
        self.event.set()
        threading.Thread(target=self._watchdog, name="ccotel-stop", daemon=True).start()
        for wake in self.wakers:
            wake()
        if self.hard:
            raise Interrupted(signum)

    def _watchdog(self) -> None:
        time.sleep(max(self.deadline() - time.monotonic(), 0.0))
        if self.closed and not self.signum:
            os._exit(end_quietly())  # no signal to end by: the status `| head` expects
        die(self.signum, f"still stopping {self.grace_s:.2f} s after {signal.Signals(self.signum).name}: exiting "
            "now; checkpoints are as last written (a restart reads again what they do not cover)")


def die(signum: int, message: str | None = None) -> None:
    """End this process by ``signum`` (its default action), as an unhandled signal would, from
    any thread; nothing else runs (no atexit, no thread joins). ``message``: a last log line."""
    try:
        if message:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            os.write(2, f"{stamp} ccotel WARNING {message}\n".encode())
        for handler in logging.getLogger().handlers:
            stream = getattr(handler, "stream", None)
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        pass
    try:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signum, signal.SIG_DFL)
        else:  # signal.signal is for the main thread only; libc's is not
            import ctypes

            ctypes.CDLL(None).signal(signum, 0)  # SIG_DFL
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
        os.kill(os.getpid(), signum)
        time.sleep(1.0)
    finally:
        os._exit(128 + signum)


def settle_state(state: State | None, until: float) -> bool:
    """Write what failed commits left, retrying until ``until``. True if nothing is left."""
    if state is None:
        return True
    while not state.retry():
        if time.monotonic() >= until:
            log.error("%d checkpoint records could not be written (%d attempts); a restart sends the spans "
                      "delivered since the last write again", state.pending, state.failures)
            return False
        time.sleep(0.2)
    return True
