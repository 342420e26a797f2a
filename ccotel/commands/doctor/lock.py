"""Who holds a state dir's lock, seen without taking it. ccotel run and backfill hold an exclusive
flock on ``<state dir>/ccotel.lock`` and write their pid in it (store/state.py); doctor reads the
holder from /proc/locks, and only where that cannot be read tries a shared non-blocking flock,
released at once.
"""

from __future__ import annotations

import errno
import fcntl
import os
from dataclasses import dataclass

from ccotel.read.procs import PROC_LOCKS, flock_holders

__all__ = ["LockProbe", "probe_lock"]


@dataclass(frozen=True)
class LockProbe:
    exists: bool  # the lock file is there
    held: bool  # a process holds the flock
    holder: int | None  # the pid holding it (from /proc/locks), else the pid written in the file
    pid_alive: bool
    how: str  # "proc-locks" or "flock-probe"


def probe_lock(path: str, proc_locks: str = PROC_LOCKS) -> LockProbe:
    """Whether a process holds the flock on ``path``, without taking it: /proc/locks names the
    holder. Where it cannot be read, a shared non-blocking flock is tried and released at once (a
    ccotel starting in that instant would see the state dir locked)."""
    try:
        st = os.stat(path)
    except OSError:
        return LockProbe(False, False, None, False, "none")
    written = _pid_in(path)
    holders = flock_holders(proc_locks, st.st_dev, st.st_ino)
    if holders is not None:
        holder = holders[0] if holders else written
        return LockProbe(True, bool(holders), holder, _alive(holder), "proc-locks")
    held = _flock_probe(path)
    return LockProbe(True, held, written, _alive(written), "flock-probe")


def _pid_in(path: str) -> int | None:
    try:
        with open(path, "rb") as f:
            text = f.read(64).decode("ascii", "replace").split()
        return int(text[0]) if text else None
    except (OSError, ValueError):
        return None


def _flock_probe(path: str) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        return exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
    finally:
        os.close(fd)  # releases the shared lock, if it was taken
    return False


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True
