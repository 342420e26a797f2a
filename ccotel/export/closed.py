"""A closed output: whoever read ccotel's stdout (or the console exporter's stream) went away.

`ccotel backfill --traces-exporter console | head` closes the pipe once head has its lines. That
is not an outage to retry: nothing written from now on can be read, so the command ends, quietly
and with status 0 as `yes | head` does. Here: the exception a sink raises for it, and the
stream pointed at /dev/null so that what is still buffered (the interpreter flushes stdout at
exit) finds no broken pipe and prints no "Exception ignored" traceback.
"""

from __future__ import annotations

import os
from typing import TextIO

__all__ = ["OutputClosed", "discard"]


class OutputClosed(Exception):
    """The reader of an output went away (EPIPE): not retried, the command ends quietly."""


def discard(stream: TextIO) -> None:
    """From now on ``stream`` (its descriptor) writes to /dev/null."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no descriptor (a StringIO), or already closed: nothing is flushed to it
        pass
