"""Doctor's own walk of each root's ``projects/``, reading only the newest lines of each transcript.

It is not discover.scan's walk (read/discover.py), though it takes its classify and within_root:
scan opens no file, passes over the symlinks that leave the root without a word and yields a
directory's main transcripts before its others, while doctor names those symlinks and the files it
cannot open, in the order of the walk.
"""

from __future__ import annotations

import enum
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from ccotel.commands.doctor.wording import why
from ccotel.read.discover import classify, within_root
from ccotel.read.layout import is_utf8, projects_dir, shown
from ccotel.read.tree import walk
from ccotel.records import FileKind

__all__ = ["RootState", "Sample", "Denied", "RootScan", "scan_root", "read_tail", "TAIL_BYTES", "MAX_TAIL_BYTES",
           "SAMPLE_LINES"]

TAIL_BYTES = 32 * 1024  # read from the end of each transcript; grown while it holds no whole line
MAX_TAIL_BYTES = 4 << 20  # a line longer than this (a 1.3 MB tool output is real) is not sampled
SAMPLE_LINES = 20  # newest lines per file


class RootState(enum.Enum):
    OK = "ok"
    MISSING = "missing"
    NOT_A_DIR = "not_a_dir"
    UNREADABLE = "unreadable"
    NO_PROJECTS = "no_projects"


@dataclass(frozen=True)
class Sample:
    """What doctor looks at in one of the newest lines of a transcript."""

    version: str | None
    type: str | None
    fields: tuple[str, ...]


@dataclass(frozen=True)
class Denied:
    path: str
    is_dir: bool
    reason: str


@dataclass(frozen=True)
class RootScan:
    root: str
    state: RootState
    error: str = ""
    sessions: int = 0  # main transcripts
    subagents: int = 0  # 2.1.x subagents/ files and 2.0.x flat agent files
    denied: tuple[Denied, ...] = ()  # directories and files that could not be read
    outside: tuple[str, ...] = ()  # symlinks leaving the root: never read
    not_utf8: tuple[str, ...] = ()  # directories and transcripts whose name is not UTF-8: never read (shown escaped)
    samples: tuple[tuple[str, tuple[Sample, ...]], ...] = ()  # (transcript, its newest lines)
    unparsed: int = 0  # sampled lines that are not one JSON object (a line being written, glued objects)


def scan_root(root: str) -> RootScan:
    """Walk ``root/projects`` as discover.scan does, but say what could not be read."""
    if not os.path.lexists(root):
        return RootScan(root, RootState.MISSING)
    if not os.path.isdir(root):
        return RootScan(root, RootState.NOT_A_DIR)
    try:
        os.listdir(root)
    except OSError as exc:
        return RootScan(root, RootState.UNREADABLE, exc.strerror or str(exc), denied=(Denied(root, True, why(exc)),))
    projects = projects_dir(root)
    if not os.path.isdir(projects) or not within_root(root, projects):
        return RootScan(root, RootState.NO_PROJECTS)
    denied: list[Denied] = []
    outside: list[str] = []
    not_utf8: list[str] = []
    samples: list[tuple[str, tuple[Sample, ...]]] = []
    counts = {FileKind.MAIN: 0, FileKind.SUBAGENT: 0, FileKind.FLAT_AGENT: 0}
    unparsed = 0

    def walk_error(exc: OSError) -> None:
        denied.append(Denied(str(exc.filename), True, why(exc)))

    for dirpath, dirnames, filenames in walk(projects, walk_error):
        not_utf8 += [shown(os.path.join(dirpath, d)) for d in dirnames if not is_utf8(d)]
        dirnames[:] = sorted(filter(is_utf8, dirnames))  # discover does not enter them either
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if not is_utf8(name):
                if name.endswith(".jsonl"):
                    not_utf8.append(shown(path))
                continue
            tf = classify(root, path) if name.endswith(".jsonl") else None
            if tf is None:
                continue
            if os.path.islink(path) and not within_root(root, path):
                outside.append(path)
                continue
            try:
                lines = read_tail(path)
            except OSError as exc:
                denied.append(Denied(path, False, why(exc)))
                continue
            if lines is None:
                continue  # not a regular file (a FIFO named .jsonl): discover reads none either
            counts[tf.kind] += 1
            sampled, bad = _samples(lines)
            unparsed += bad
            samples.append((path, sampled))
    return RootScan(root, RootState.OK, sessions=counts[FileKind.MAIN],
                    subagents=counts[FileKind.SUBAGENT] + counts[FileKind.FLAT_AGENT], denied=tuple(denied),
                    outside=tuple(outside), samples=tuple(samples), unparsed=unparsed, not_utf8=tuple(not_utf8))


def read_tail(path: str, size: int = TAIL_BYTES, max_size: int = MAX_TAIL_BYTES,
              lines: int = SAMPLE_LINES) -> list[bytes] | None:
    """The newest whole lines of a file (at most ``lines``), reading only its end: ``size`` bytes,
    four times more while that holds no whole line, up to ``max_size``. None if not a regular file.
    The last line may be one still being written (it then does not parse)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not block doctor
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        end = st.st_size
        while True:
            start = max(end - size, 0)
            pieces = os.pread(fd, end - start, start).split(b"\n")
            # After the last newline: nothing, or a line still being written (or a file without a
            # final newline): sampled, but it does not count as the whole line the window must hold.
            last = pieces.pop()
            if start > 0:
                pieces = pieces[1:]  # the first piece is the end of a line that began before the window
            whole = [p for p in pieces if p.strip()]
            if whole or start == 0 or size >= max_size:
                return (whole + ([last] if last.strip() else []))[-lines:]
            size = min(size * 4, max_size)
    finally:
        os.close(fd)


def _samples(lines: Sequence[bytes]) -> tuple[tuple[Sample, ...], int]:
    out = []
    bad = 0
    for line in lines:
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            bad += 1
            continue
        if not isinstance(obj, dict):
            bad += 1
            continue
        version, kind = obj.get("version"), obj.get("type")
        out.append(Sample(version if isinstance(version, str) else None, kind if isinstance(kind, str) else None,
                          tuple(str(k) for k in obj)))
    return tuple(out), bad
