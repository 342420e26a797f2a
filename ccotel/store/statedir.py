"""The state dir on one host: created private (0700), and taken by one ccotel at a time.

The lock is an exclusive flock on the state dir itself (its open directory), held for the life of
the process and of the catch-up workers forked from it. A lock on a file inside the dir alone
could be lost to ``rm ccotel.lock``: the next ccotel creates a new file, locks it, and two
processes send and count the same spans. The directory cannot be unlinked while it holds the
state, so the path leads to the directory that is locked for as long as it is there; a dir moved
or replaced under a running ccotel is noticed by ``DirLock.check`` (a stat a second), which makes
that ccotel stop with a clear error rather than run beside one started on the new dir.

``ccotel.lock`` is kept too, flocked and holding the pid: it names the holder (the refusal
message, ``ccotel doctor``) and keeps out a ccotel from before the directory lock, which locks only
the file. Deleted or replaced while ccotel runs, it is made again by ``check``. Where a directory
cannot be flocked (some network file systems), the file's lock is the lock, checked after it is
taken to be the file at the path (same device and inode) and again by ``check``.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os

from ccotel.store.state import StateLocked, StateUnavailable

__all__ = ["DirLock", "lock_state_dir", "prepare_dir", "unwritable", "LOCK_NAME"]

log = logging.getLogger("ccotel.state")

LOCK_NAME = "ccotel.lock"

_BUSY = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
_ATTEMPTS = 5  # a lock file or dir replaced between its open and its lock, again and again: give up


def unwritable(state_dir: str, what: str, exc: BaseException) -> StateUnavailable:
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return StateUnavailable(
        f"the state dir {state_dir} cannot be used ({what}: {reason}). ccotel keeps its checkpoints there and "
        f"will not run without them, since every restart would then send and count the whole history again: "
        f"make it writable, give another --state-dir, or pass --state-dir none to run without checkpoints")


def prepare_dir(state_dir: str) -> None:
    try:
        os.makedirs(state_dir, mode=0o700, exist_ok=True)
        os.chmod(state_dir, 0o700)  # transcripts' paths and digests are private
    except OSError as exc:
        raise unwritable(state_dir, "creating it" if not os.path.isdir(state_dir) else "making it private",
                         exc) from None


class DirLock:
    """The state dir taken for this process (see the module docstring); ``release`` gives it up
    (it also goes when the process ends). (postgres.HostLock: the same for one host id in
    PostgreSQL.)"""

    def __init__(self, state_dir: str, dir_fd: int | None, fd: int) -> None:
        self.state_dir = state_dir
        self.path = os.path.join(state_dir, LOCK_NAME)
        self._dir_fd = dir_fd  # None: a file system whose directories cannot be flocked
        self._fd: int | None = fd

    def release(self) -> None:
        for fd in (self._fd, self._dir_fd):
            if fd is not None:
                os.close(fd)
        self._fd = self._dir_fd = None

    def check(self) -> str | None:
        """Is the state dir still this process's? Two stats, for a running ccotel to call about
        once a second. ``ccotel.lock`` deleted or replaced: made again and locked (None). The dir
        moved, replaced or deleted, or the lock file taken by another process: why this process
        must stop (a ccotel started on what is at the path now sends and counts the same spans)."""
        if self._fd is None:
            return None
        if self._dir_fd is not None and not _same(self.state_dir, self._dir_fd):
            return (f"the state dir {self.state_dir} was moved, replaced or deleted while this ccotel ran on it: "
                    f"stopping, so that no ccotel started on what is there now sends and counts the same spans")
        if _same(self.path, self._fd):
            return None
        try:
            fd = _lock_file(self.state_dir, self.path)
        except StateLocked as exc:
            return f"{LOCK_NAME} was deleted while this ccotel ran and {exc}: stopping"
        except StateUnavailable as exc:
            log.warning("%s was deleted and cannot be made again (%s); the state dir stays locked", LOCK_NAME, exc)
            return None
        os.close(self._fd)
        self._fd = fd
        log.warning("%s was deleted or replaced while ccotel ran; made it again (the state dir itself stays "
                    "locked: no second ccotel could start meanwhile)", self.path)
        return None


def lock_state_dir(state_dir: str) -> DirLock:
    """Take the state dir for this process, or raise StateLocked naming the pid that holds it
    (StateUnavailable if the dir cannot be written). Readers (check, report) need no lock."""
    prepare_dir(state_dir)
    path = os.path.join(state_dir, LOCK_NAME)
    dir_fd = _lock_dir(state_dir, path)
    try:
        fd = _lock_file(state_dir, path)
    except BaseException:
        if dir_fd is not None:
            os.close(dir_fd)
        raise
    return DirLock(state_dir, dir_fd, fd)


def _lock_dir(state_dir: str, path: str) -> int | None:
    """The state dir's own flock: its descriptor, or None where directories cannot be flocked."""
    for _ in range(_ATTEMPTS):
        try:
            fd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise unwritable(state_dir, "opening it", exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in _BUSY:
                raise _locked(state_dir, _pid_at(path)) from None
            log.debug("the state dir %s cannot be flocked (%s): %s alone is its lock", state_dir, exc, LOCK_NAME)
            return None
        if _same(state_dir, fd):
            return fd
        os.close(fd)  # replaced between the open and the lock: lock the one at the path now
    raise unwritable(state_dir, "locking it", OSError(errno.EAGAIN, "it was replaced at every attempt"))


def _lock_file(state_dir: str, path: str) -> int:
    """``ccotel.lock`` created if need be, flocked, checked to be the file at the path, with our pid."""
    for _ in range(_ATTEMPTS):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise unwritable(state_dir, f"creating {LOCK_NAME}", exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            pid = _holder(fd)
            os.close(fd)
            if exc.errno not in _BUSY:
                raise unwritable(state_dir, f"locking {LOCK_NAME}", exc) from None
            raise _locked(state_dir, pid) from None
        if not _same(path, fd):
            os.close(fd)  # deleted or replaced between the open and the lock: a lock on nothing
            continue
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # the lock holds without the pid (a full disk): only the message loses it
        return fd
    raise unwritable(state_dir, f"locking {LOCK_NAME}", OSError(errno.EAGAIN, "it was replaced at every attempt"))


def _locked(state_dir: str, pid: int | None) -> StateLocked:
    who = f"pid {pid}" if pid else "a process that did not say its pid"
    return StateLocked(f"another ccotel ({who}) is using the state dir {state_dir}; two cannot share one (each "
                       f"would send and count the same spans): stop it first, or give this one its own --state-dir",
                       pid)


def _same(path: str, fd: int) -> bool:
    """``path`` leads to the file or dir open as ``fd``."""
    try:
        a, b = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _pid_at(path: str) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return _holder(fd)
    finally:
        os.close(fd)


def _holder(fd: int) -> int | None:
    try:
        text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
        return int(text.split()[0]) if text else None
    except (OSError, ValueError, IndexError):
        return None
