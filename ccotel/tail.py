"""Tail stage: read whole new lines of one file from a byte offset.

A partial last line is held back until its newline arrives (Claude Code appends line by line);
an unterminated last line is taken only when the caller says the file is quiet and the bytes
parse as JSON (files of a session that died keep no final newline). Lines longer than the
limit are skipped with bounded memory and counted. A file that shrank or was replaced
(other inode, other first bytes) is read again from the start.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field

import orjson

from .records import RawLine

__all__ = ["FileIdentity", "Tailer", "ReadResult", "identity_of"]

_CHUNK = 1 << 20
_FINGERPRINT_BYTES = 256


@dataclass(frozen=True)
class FileIdentity:
    dev: int
    ino: int
    head_len: int  # how many first bytes the fingerprint covers (fewer while the file is small)
    fingerprint: str  # digest of the first bytes; catches inode reuse and rewrites in place


def _fingerprint(path: str, length: int) -> tuple[int, str] | None:
    try:
        with open(path, "rb") as f:
            head = f.read(length)
    except OSError:
        return None
    return len(head), hashlib.blake2b(head, digest_size=8).hexdigest()


def identity_of(path: str, st: os.stat_result | None = None) -> FileIdentity | None:
    try:
        st = st or os.stat(path)
    except OSError:
        return None
    fp = _fingerprint(path, _FINGERPRINT_BYTES)
    return None if fp is None else FileIdentity(st.st_dev, st.st_ino, fp[0], fp[1])


@dataclass
class ReadResult:
    lines: list[RawLine] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    reset: bool = False  # the file was truncated or replaced and is read again from 0
    gone: bool = False


@dataclass
class Tailer:
    path: str
    offset: int = 0
    identity: FileIdentity | None = None
    max_line_bytes: int = 64 << 20
    _skip_from: int | None = None  # inside an over-long line: discard until its newline

    @property
    def line_offset(self) -> int:
        """The start of the next whole line (inside an over-long line: where it began)."""
        return self._skip_from if self._skip_from is not None else self.offset

    def read(self, accept_unterminated: bool = False, max_bytes: int = 1 << 62) -> ReadResult:
        res = ReadResult()
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            res.gone = True
            return res
        except OSError:
            res.errors.append("unreadable")
            return res
        self._check_identity(st, res)
        if st.st_size <= self.offset and self._skip_from is None:
            return res
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                self._read_lines(f, res, accept_unterminated, max_bytes)
        except OSError:
            res.errors.append("unreadable")
        return res

    def _check_identity(self, st: os.stat_result, res: ReadResult) -> None:
        if self.identity is None:
            self.identity = identity_of(self.path, st)
            if self.offset > st.st_size:
                self._restart(res)
            return
        same_inode = (self.identity.dev, self.identity.ino) == (st.st_dev, st.st_ino)
        if not same_inode or st.st_size < self.offset or not self._same_head():
            self._restart(res)
            self.identity = identity_of(self.path, st)
        elif self.identity.head_len < _FINGERPRINT_BYTES and st.st_size > self.identity.head_len:
            self.identity = identity_of(self.path, st)  # the file grew: fingerprint more of it

    def _same_head(self) -> bool:
        """The bytes we fingerprinted are still the file's first bytes (not rewritten in place)."""
        assert self.identity is not None
        fp = _fingerprint(self.path, self.identity.head_len)
        return fp is not None and fp == (self.identity.head_len, self.identity.fingerprint)

    def _restart(self, res: ReadResult) -> None:
        self.offset = 0
        self._skip_from = None
        res.reset = True

    def _read_lines(self, f, res: ReadResult, accept_unterminated: bool, max_bytes: int) -> None:  # type: ignore[no-untyped-def]
        pos = self.offset
        buf = b""
        budget = max_bytes
        while budget > 0:
            chunk = f.read(_CHUNK)
            if not chunk:
                break
            budget -= len(chunk)
            if self._skip_from is not None:
                nl = chunk.find(b"\n")
                if nl < 0:
                    pos += len(chunk)
                    self.offset = pos
                    continue
                pos += nl + 1
                self.offset = pos
                self._skip_from = None
                res.errors.append("line_too_long")
                chunk = chunk[nl + 1:]
            data = buf + chunk if buf else chunk
            start = 0
            while True:
                nl = data.find(b"\n", start)
                if nl < 0:
                    break
                line = data[start:nl]
                line_start = pos + start
                if len(line) > self.max_line_bytes:
                    res.errors.append("line_too_long")
                elif line:
                    res.lines.append(RawLine(line_start, pos + nl + 1, line))
                start = nl + 1
            pos += start
            self.offset = pos
            buf = data[start:]
            if len(buf) > self.max_line_bytes:
                # Over-long line still growing: drop what we have, skip to its newline.
                self._skip_from = pos  # where the over-long line began
                pos += len(buf)
                self.offset = pos
                buf = b""
        if buf and accept_unterminated and self._skip_from is None:
            try:
                orjson.loads(buf)
                ok = True
            except orjson.JSONDecodeError:
                ok = _has_glued_objects(buf)
            if ok:
                res.lines.append(RawLine(pos, pos + len(buf), buf))
                self.offset = pos + len(buf)


def _has_glued_objects(buf: bytes) -> bool:
    stripped = buf.strip()
    return stripped.startswith(b"{") and stripped.endswith(b"}") and b"}{" in stripped
