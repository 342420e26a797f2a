"""The one status line at the bottom of a terminal: the catch-up's progress bar, then the live counts.

It is cut to the terminal's width (a line one column too long wraps, and every redraw then adds a
line), redrawn in place (carriage return, the text, erase to the end of the line), and the log
records written to the same terminal meanwhile go above it: the line is erased before each
record and drawn again after it, so a warning never lands in the middle of the bar.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TextIO

__all__ = ["StatusLine"]

_ERASE = "\r\x1b[K"  # to the line's start, then erase it


class StatusLine:
    """A line redrawn in place on ``stream`` (a terminal), with the log records above it."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.text = ""  # what is drawn now ("" nothing)
        self._lock = threading.RLock()  # the export thread logs while the main thread draws
        self._handlers: list[logging.StreamHandler[TextIO]] = []

    def width(self) -> int:
        try:
            return os.get_terminal_size(self.stream.fileno()).columns
        except (OSError, ValueError):
            return 80

    def show(self, text: str) -> None:
        """Draw ``text`` in place of the line, cut to one column less than the terminal (the last
        column would leave the cursor past the edge, where some terminals wrap)."""
        with self._lock:
            self.text = text[: max(self.width() - 1, 0)]
            self.stream.write(_ERASE + self.text)
            self.stream.flush()

    def done(self) -> None:
        """Leave the line as drawn and go on below it; nothing is redrawn from now on."""
        with self._lock:
            if self.text:
                self.stream.write("\n")
                self.stream.flush()
            self.text = ""

    def attach(self) -> StatusLine:
        """Log records the root logger writes to this stream go above the line from now on."""
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler) and handler.stream is self.stream:
                handler.setStream(_Above(self))
                self._handlers.append(handler)
        return self

    def detach(self) -> None:
        self.done()
        for handler in self._handlers:
            handler.setStream(self.stream)
        self._handlers.clear()

    def above(self, record: str) -> None:
        """Write ``record`` (whole lines) above the line: erase it, write, draw it again."""
        with self._lock:
            if self.text:
                self.stream.write(_ERASE)
            self.stream.write(record)
            if self.text and record.endswith("\n"):
                self.stream.write(self.text)
            self.stream.flush()


class _Above:
    """The stream a logging handler writes to while a status line is shown."""

    def __init__(self, line: StatusLine) -> None:
        self.line = line

    def write(self, text: str) -> int:
        self.line.above(text)
        return len(text)

    def flush(self) -> None:
        self.line.stream.flush()
