"""The rich console the commands print with.

rich answers a closed stdout (`ccotel sessions | head`) by exiting with status 1; ccotel ends such
a command quietly with status 0 (cli.main, as `yes | head` does), so the closed pipe is passed on as
the BrokenPipeError it is.
"""

from __future__ import annotations

import errno

from rich.console import Console

__all__ = ["PipeConsole"]


class PipeConsole(Console):
    """A rich Console whose closed stdout raises BrokenPipeError, for cli.main to end quietly."""

    def on_broken_pipe(self) -> None:
        self.quiet = True  # nothing more is written to the closed pipe
        raise BrokenPipeError(errno.EPIPE, "stdout closed")
