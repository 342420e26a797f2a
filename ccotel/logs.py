"""How a ccotel process logs: one line format, to standard error, for the commands and for the
catch-up's worker processes. A spawned worker starts with no logging set up, and Python's
last-resort handler printed its warnings bare, with no time or level."""

from __future__ import annotations

import logging
import sys

__all__ = ["configure", "configure_worker"]

_FORMAT = "%(asctime)s ccotel %(levelname)s %(message)s"
_WORKER_FORMAT = "%(asctime)s ccotel (catch-up worker) %(levelname)s %(message)s"


def configure(verbose: bool = False) -> None:
    """A command's own logging: its progress at INFO, everything with -v."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format=_FORMAT, stream=sys.stderr)


def configure_worker() -> None:
    """A catch-up worker's: what goes wrong, said as the worker's (the process that started it
    says how the catch-up went). A forked worker's inherited handlers are replaced."""
    logging.basicConfig(level=logging.WARNING, format=_WORKER_FORMAT, stream=sys.stderr, force=True)
