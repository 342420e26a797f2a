"""Opening a file found under a root: only a regular file is read.

Anything can sit under a config dir with a transcript's or a session file's name: a FIFO there
made a plain ``open`` wait for a writer that never came (``ccotel report``, ``backfill``,
``sessions`` and ``trace`` hung on it), and a device or socket is no transcript either. The open
never blocks (``O_NONBLOCK``, which changes nothing for a regular file) and anything else is an
``OSError`` like a missing file, so each caller's existing "cannot be read" path takes it.
"""

from __future__ import annotations

import errno
import os
import stat

TYPE_CHECKING = False  # typing.TYPE_CHECKING without typing's import, a cost the status line does not pay
if TYPE_CHECKING:
    from typing import BinaryIO

__all__ = ["NotRegularFile", "check_regular", "open_nonblocking", "open_regular", "opener"]


class NotRegularFile(OSError):
    """The path names a FIFO, socket, device or directory: not read."""


def open_nonblocking(path: str, flags: int) -> int:
    """``open()``'s opener for a caller that fstats the file itself and checks its mode with
    ``check_regular`` (the tail stage: one fstat a read, not two)."""
    return os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC)


def check_regular(mode: int, path: str) -> None:
    """NotRegularFile unless ``mode`` (an fstat's st_mode) is a regular file's."""
    if not stat.S_ISREG(mode):
        raise NotRegularFile(errno.EINVAL, "not a regular file", path)


def opener(path: str, flags: int) -> int:
    """``open()``'s opener: a descriptor of a regular file, opened without blocking."""
    fd = open_nonblocking(path, flags)
    try:
        check_regular(os.fstat(fd).st_mode, path)
    except OSError:
        os.close(fd)
        raise
    return fd


def open_regular(path: str, buffering: int = -1) -> BinaryIO:
    """``open(path, "rb", buffering)`` of a regular file; OSError for anything else."""
    return open(path, "rb", buffering=buffering, opener=opener)  # noqa: SIM115 - the caller's with
