"""Tail stage: read whole new lines of one file from a byte offset.

A partial last line is held back until its newline arrives (Claude Code appends line by line);
an unterminated last line is taken only when the caller says the file is quiet and the bytes
parse as JSON (files of a session that died keep no final newline). Lines longer than the
limit are skipped with bounded memory and counted. A file that shrank or was replaced
(other inode, other first bytes) is read again from the start.

A file rewritten in place (the same inode and first bytes, as long as what was read or longer)
would otherwise be read on from the old offset, in the middle of other lines. An offset marker
guards it, as Fluent Bit's and Vector's do: the last bytes read before the furthest offset read,
kept with the checkpoint as a digest (``Marker``). When the file changed (its size or mtime)
and once after a restart, those bytes are read again (one pread of at most _MARKER_BYTES); if the
file is now shorter than the marker's end or they differ, it was rewritten: it is read again from
the start, as a replaced file is. While following, the bytes themselves are held and compared
(no digest per read); the digest is made when a checkpoint is written.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from ccotel.hashing import blake2b
from ccotel.read.parse import is_complete_json
from ccotel.read.regular import check_regular, open_nonblocking, open_regular
from ccotel.records import BadInput, RawLine

__all__ = ["FileIdentity", "Marker", "Tailer", "ReadResult", "identity_of", "lines_with"]

# A tailer's read: under a catch-up worker's mmap threshold (run/memory.py), so the chunk comes
# from the heap and is reused, not mapped, faulted in and unmapped at every read.
_CHUNK = 1 << 17
# lines_with's read (a report scans a file once, through a buffered reader of its own).
_SCAN_CHUNK = 1 << 20
# A read asks this much past the size the fstat gave: a short read then shows the end of the file.
_SLACK = 1 << 12
_FINGERPRINT_BYTES = 256
# The offset marker covers this many bytes before the offset (fewer at the start of a file): a
# record's last fields (its uuid, timestamp, request id), which no other line of the file holds
# at the same position; most real lines are longer, so the marker is taken from the line just
# read, without a read of its own; and checking it is one pread within a page.
_MARKER_BYTES = 512


@dataclass(frozen=True, slots=True)
class FileIdentity:
    dev: int
    ino: int
    head_len: int  # how many first bytes the fingerprint covers (fewer while the file is small)
    fingerprint: str  # digest of the first bytes; catches inode reuse and rewrites in place


@dataclass(frozen=True, slots=True)
class Marker:
    """The last ``length`` bytes before ``end`` (a position read up to), by digest: if the file
    no longer holds them there, it was rewritten. Kept in the state as ``text()``."""

    end: int
    length: int
    digest: str

    def text(self) -> str:
        return f"{self.end}:{self.length}:{self.digest}"

    @staticmethod
    def parse(text: str | None) -> Marker | None:
        """A marker from ``text()``; None for none or one not understood (the offset is trusted)."""
        if not text:
            return None
        try:
            end, length, digest = text.split(":")
            return Marker(int(end), int(length), digest)
        except ValueError:
            return None


def _marker_of(data: bytes, end: int) -> Marker:
    return Marker(end, len(data), blake2b(data, digest_size=8).hexdigest())


def _holds(fd: int, end: int, length: int, expected: bytes | Marker) -> bool:
    """The file still holds, before ``end``, the bytes ``expected`` (or those a marker digests)."""
    data = _pread_exactly(fd, length, end - length)
    if isinstance(expected, Marker):
        return len(data) == length and _marker_of(data, end) == expected
    return data == expected


def _fingerprint(fd: int, length: int) -> tuple[int, str] | None:
    try:
        head = os.pread(fd, length, 0)
    except OSError:
        return None
    return len(head), blake2b(head, digest_size=8).hexdigest()


def identity_of(path: str, st: os.stat_result | None = None) -> FileIdentity | None:
    try:
        with open_regular(path) as f:
            return _identity(f.fileno(), st or os.fstat(f.fileno()))
    except OSError:
        return None


def _identity(fd: int, st: os.stat_result) -> FileIdentity | None:
    fp = _fingerprint(fd, _FINGERPRINT_BYTES)
    return None if fp is None else FileIdentity(st.st_dev, st.st_ino, fp[0], fp[1])


@dataclass
class ReadResult:
    lines: list[RawLine] = field(default_factory=list)
    errors: list[BadInput] = field(default_factory=list)
    error_ends: list[int] = field(default_factory=list)  # per error: where its line ends (-1: the file)
    reset: bool = False  # the file was truncated or replaced and is read again from 0
    size: int = 0  # the file's size when read (at least what was read): more than the offset = a partial line
    mtime_ns: int = 0
    more: bool = False  # stopped at max_bytes: more whole lines may follow
    gone: bool = False
    other_file: bool = False  # not the file read(only=...) names: nothing read

    def error(self, reason: BadInput, end: int = -1) -> None:
        self.errors.append(reason)
        self.error_ends.append(end)


# A line longer than this is measured on disk, not buffered, and read again only if it is within
# the limit: skipping a 100 MB line costs no more memory than a chunk.
_IN_MEMORY = 4 << 20


@dataclass(slots=True)
class Tailer:
    path: str
    offset: int = 0  # always the start of a line: everything before it was read
    identity: FileIdentity | None = None
    max_line_bytes: int = 32 << 20
    marker: Marker | None = None  # a checkpoint's marker, until this process reads past it (None: trusted)
    _last: bytes = field(default=b"", repr=False)  # the last bytes this process read ...
    _last_end: int = field(default=0, repr=False)  # ... before this offset (0: none)
    _saved: Marker | None = field(default=None, repr=False)  # their digest, once asked for
    _seen: tuple[int, int] | None = field(default=None, repr=False)  # (size, mtime) the marker was checked at

    def read(self, accept_unterminated: bool = False, max_bytes: int = 1 << 62,
             force_tail: bool = False, quiet_before_ns: int | None = None,
             only: tuple[int, int] | None = None) -> ReadResult:
        """New whole lines, about ``max_bytes`` of them (at least one line when there is one). An
        unterminated last line is taken if ``accept_unterminated`` and it is complete JSON, or
        always with ``force_tail`` or when the file was last written before ``quiet_before_ns``
        (the writer is known to be done with it). ``only``: the (device, inode) the caller
        checked the path leads to; another file is not read at all (``res.other_file``).

        One descriptor per read, used by position (pread): an open, an fstat, the head
        fingerprint and the new bytes, no buffered file object (whose 1 MiB reads allocated a
        1 MiB buffer per read, and a second read to see the end)."""
        res = ReadResult()
        try:
            f = open(self.path, "rb", buffering=0, opener=open_nonblocking)  # noqa: SIM115 - closed below
        except FileNotFoundError:
            res.gone = True
            return res
        except OSError:
            res.error(BadInput.UNREADABLE)
            return res
        fd = f.fileno()
        try:
            st = os.fstat(fd)
            check_regular(st.st_mode, self.path)  # (NotRegularFile is an OSError: "unreadable")
            if only is not None and (st.st_dev, st.st_ino) != only:
                res.other_file = True
                return res
            res.size, res.mtime_ns = st.st_size, st.st_mtime_ns
            self._check_identity(st, res, fd)
            if not res.reset:
                self._check_marker(st, res, fd)
            if st.st_size <= self.offset:
                return res
            force_tail = force_tail or (quiet_before_ns is not None and st.st_mtime_ns <= quiet_before_ns)
            end = self._read_lines(fd, res, accept_unterminated or force_tail, force_tail, max_bytes, st.st_size)
            res.size = max(res.size, end)
            self._mark(fd, res)
        except OSError:
            res.error(BadInput.UNREADABLE)
        finally:
            f.close()
        return res

    def _check_identity(self, st: os.stat_result, res: ReadResult, fd: int) -> None:
        if self.identity is None:
            self.identity = _identity(fd, st)
            if self.offset > st.st_size:
                self._restart(res)
            return
        same_inode = (self.identity.dev, self.identity.ino) == (st.st_dev, st.st_ino)
        if not same_inode or st.st_size < self.offset or not self._same_head(fd):
            self._restart(res)
            self.identity = _identity(fd, st)
        elif self.identity.head_len < _FINGERPRINT_BYTES and st.st_size > self.identity.head_len:
            self.identity = _identity(fd, st)  # the file grew: fingerprint more of it

    def _same_head(self, fd: int) -> bool:
        """The bytes we fingerprinted are still the file's first bytes (not rewritten in place)."""
        assert self.identity is not None
        fp = _fingerprint(fd, self.identity.head_len)
        return fp is not None and fp == (self.identity.head_len, self.identity.fingerprint)

    def checkpoint_marker(self) -> Marker | None:
        """The marker to keep with a checkpoint: of the last bytes read, or the checkpoint's own
        while a restart re-reads the lines before it (None: no marker, the offset is trusted)."""
        if not self._last_end:
            return self.marker
        if self._saved is None or self._saved.end != self._last_end:
            self._saved = _marker_of(self._last, self._last_end)
        return self._saved

    def _check_marker(self, st: os.stat_result, res: ReadResult, fd: int) -> None:
        """Rewritten in place? Checked when the file changed since the last check (its size or
        mtime; the first read after a restart always): an idle poll reads nothing again."""
        seen, self._seen = self._seen, (st.st_size, st.st_mtime_ns)
        if seen == self._seen:
            return
        expected: bytes | Marker
        if self._last_end:
            end, length, expected = self._last_end, len(self._last), self._last
        elif self.marker is not None:
            end, length, expected = self.marker.end, self.marker.length, self.marker
        else:
            return
        if st.st_size < end or not _holds(fd, end, length, expected):
            self._restart(res)
            self.identity = _identity(fd, st)

    def _mark(self, fd: int, res: ReadResult) -> None:
        """Hold the last bytes before the offset now reached, if it is past what is held (a
        restart re-reads up to the checkpoint's marker first): from the last line read when it
        covers _MARKER_BYTES, else read back."""
        end = self.offset
        if end <= max(self._last_end, self.marker.end if self.marker is not None else 0):
            return
        data = b""
        if res.lines and res.lines[-1].end == end:
            last = res.lines[-1]
            data = last.data if last.end - last.offset == len(last.data) else last.data + b"\n"
        if len(data) < _MARKER_BYTES:
            data = _pread_exactly(fd, min(_MARKER_BYTES, end), end - min(_MARKER_BYTES, end))
        self._last, self._last_end = data[-_MARKER_BYTES:], end

    def _restart(self, res: ReadResult) -> None:
        self.offset = 0
        self.marker, self._last, self._last_end = None, b"", 0
        res.reset = True

    def _read_lines(self, fd: int, res: ReadResult, take_tail: bool, force_tail: bool,
                    max_bytes: int, size: int) -> int:
        """The lines from self.offset on, read by position; returns the file position reached.
        ``size``: the file's size at the fstat. A read is sized to what the fstat showed (plus
        room to see the end): a short read past that size, ending on a newline, is the end of
        the file then, and no further read is made to see it. With a partial line pending, the
        end is confirmed by an empty read as before (a short read of a file system that gives
        less must not make a partial line look like the last one)."""
        pos = self.offset  # where the next read starts
        start = self.offset  # where the current, unfinished line begins
        pieces: list[memoryview] = []  # its bytes while it is short, joined once it ends (one copy)
        held = 0  # their length
        length = 0  # its length once it is long (then only measured)
        long_line = False
        budget = max_bytes
        first = self.offset
        while True:
            if budget <= 0 and self.offset > first:
                # Enough for this call, and at least one line done: the rest is read by the next
                # (a line longer than the budget is still read whole, never cut).
                res.more = True
                return pos
            want = min(_CHUNK, size - pos + _SLACK) if pos < size else _CHUNK  # past the size: it grew
            chunk = os.pread(fd, want, pos)
            if not chunk:
                break
            pos += len(chunk)
            budget -= len(chunk)
            i = 0
            while True:
                nl = chunk.find(b"\n", i)
                if nl >= 0 and not held and not long_line:  # the common case: a whole line in this chunk
                    if nl - i > self.max_line_bytes:
                        res.error(BadInput.LINE_TOO_LONG, start + nl - i + 1)
                    elif nl > i:
                        res.lines.append(RawLine(start, start + nl - i + 1, chunk[i:nl]))
                    start += nl - i + 1
                    self.offset = start
                    i = nl + 1
                    continue
                piece_end = len(chunk) if nl < 0 else nl
                if long_line:
                    length += piece_end - i
                elif piece_end > i:
                    pieces.append(memoryview(chunk)[i:piece_end])
                    held += piece_end - i
                    if held > _IN_MEMORY:
                        long_line, length, pieces, held = True, held, [], 0
                if nl < 0:
                    break
                size_ = length if long_line else held
                self._line(fd, res, start, size_, None if long_line else pieces)
                start += size_ + 1
                self.offset = start
                pieces, held, length, long_line = [], 0, 0, False
                i = nl + 1
            if len(chunk) < want and pos >= size and start == pos:
                break  # a short read past the fstat's size, every byte in whole lines: the end
        line_len = length if long_line else held
        if line_len and take_tail:
            data = None if long_line else b"".join(pieces)
            if force_tail or (data is not None and is_complete_json(data)):
                self._line(fd, res, start, line_len, None if data is None else [data], end=start + line_len)
                self.offset = start + line_len
        return pos

    def _line(self, fd: int, res: ReadResult, start: int, size: int, pieces: Sequence[bytes | memoryview] | None,
              end: int | None = None) -> None:
        end = start + size + 1 if end is None else end
        if size > self.max_line_bytes:
            res.error(BadInput.LINE_TOO_LONG, end)
            return
        if size == 0:
            return
        data = _pread_exactly(fd, size, start) if pieces is None else b"".join(pieces)  # None: a long line, read again
        res.lines.append(RawLine(start, end, data))


def _pread_exactly(fd: int, size: int, offset: int) -> bytes:
    """``size`` bytes from ``offset`` (fewer only at the end of the file)."""
    parts = []
    while size > 0:
        part = os.pread(fd, size, offset)
        if not part:
            break
        parts.append(part)
        size -= len(part)
        offset += len(part)
    return b"".join(parts)


def lines_with(path: str, needle: bytes, max_line_bytes: int,
               chunk_size: int = _SCAN_CHUNK) -> Iterator[tuple[int, bytes]]:
    """(offset, line) of every line of a file that contains ``needle``, found by a byte search
    over 4 MiB chunks: the other lines cost no Python work at all. A line longer than the limit
    is skipped with bounded memory (as the tail stage does); a last line may lack its newline."""
    try:
        f = open_regular(path)
    except OSError:
        return
    with f:
        base = 0  # file offset of chunk[0]
        carry = b""  # the start of a line the previous chunk did not finish
        skipping = False  # inside a line over the limit: drop bytes up to its newline
        while True:
            try:
                chunk = f.read(chunk_size)
            except OSError:
                return
            if not chunk:
                break
            start = 0
            if carry or skipping:
                nl = chunk.find(b"\n")
                head = chunk if nl < 0 else chunk[:nl]
                if not skipping:
                    carry += head
                    skipping = len(carry) > max_line_bytes
                if nl < 0:
                    carry = b"" if skipping else carry
                    base += len(chunk)
                    continue
                if not skipping and needle in carry:
                    yield base - (len(carry) - nl), carry
                carry, skipping, start = b"", False, nl + 1
            end = chunk.rfind(b"\n", start)
            if end < 0:
                end = start - 1  # no whole line left in this chunk
            pos = chunk.find(needle, start, max(end, start))
            while pos >= 0:
                first = chunk.rfind(b"\n", start, pos) + 1 or start
                stop = chunk.find(b"\n", pos)
                if stop - first <= max_line_bytes:
                    yield base + first, chunk[first:stop]
                pos = chunk.find(needle, stop, end)
            carry = chunk[end + 1:]
            skipping = len(carry) > max_line_bytes
            carry = b"" if skipping else carry
            base += len(chunk)
        if carry and not skipping and needle in carry:
            yield base - len(carry), carry
