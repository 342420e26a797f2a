"""Discover stage: which files under the roots are transcripts, and what kind.

Layout (docs/format.md section 1), relative to ``<root>/projects``:
  <proj>/<session>.jsonl                          main conversation
  <proj>/<session>/subagents/agent-<id>.jsonl     2.1.x subagent (+ agent-<id>.meta.json)
  <proj>/agent-<id>.jsonl                         2.0.x flat subagent file
Nothing outside a root is ever read: symlinks are resolved and checked.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from ccotel.read.layout import AGENT_PREFIX, SUBAGENTS, agent_meta, is_utf8, projects_dir, shown
from ccotel.read.parse_time import parse_timestamp
from ccotel.read.regular import open_regular
from ccotel.records import BadInput, FileKind, TranscriptFile

if TYPE_CHECKING:  # types only: tail.py loads the parser, shard.py multiprocessing (a cached report needs neither)
    from ccotel.read.shard import Group
    from ccotel.read.tail import FileIdentity, Marker

__all__ = ["classify", "scan", "ScanCache", "within_root", "find", "unread_bytes", "session_groups",
           "group_files", "PathNotUtf8", "SkipWarning",
           "time_span", "Checkpoint", "size_of", "mtime_ns", "readable_under", "OutsideRoot"]

log = logging.getLogger("ccotel.read")

# A file's checkpoint (state.files()): identity, offset, read_to, the offset marker (None: trusted).
Checkpoint: TypeAlias = "tuple[FileIdentity | None, int, int, Marker | None]"


def within_root(root: str, path: str) -> bool:
    """True if path, with every symlink resolved, is inside root (resolved once per process: the
    root ccotel was started on is the one it keeps to)."""
    real_root = _real_root(root)
    real = _realpath(path)
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


class PathNotUtf8(OSError):
    """A file or directory under a root whose name is not UTF-8 (os.fsdecode gave it surrogates):
    no checkpoint, ledger row, span or JSON output can hold its path, so it is not read, and it is
    counted (``path_not_utf8``) where unreadable directories are. Claude Code names its files from
    ids and a cwd made ASCII: such a name was put there by something else."""

    reason = BadInput.PATH_NOT_UTF8

    def __init__(self, path: str) -> None:
        super().__init__(errno.EILSEQ, "its name is not UTF-8", shown(path))


class SkipWarning:
    """``scan``'s on_error for a command that counts nothing (report, sessions): each directory or
    name it skips is said once, so that output lacking its sessions says why. ``ccotel run``
    counts them instead (Pipeline.unreadable_dir)."""

    _MOST = 1024  # said at most this many times (a tree of unreadable directories)

    def __init__(self) -> None:
        self._said: set[str] = set()

    def __call__(self, exc: OSError) -> None:
        where = str(exc.filename or exc)
        if where in self._said or len(self._said) >= self._MOST:
            return
        self._said.add(where)
        log.warning("skipped %s (%s): what it holds is not in this output", where, exc.strerror or exc)


class OutsideRoot:
    """The side files under a root (history.jsonl, sessions/<pid>.json, settings.json) found to
    resolve outside it: not read; each said once in the log and, given ``count``, counted once
    (ccotel run counts them in ccotel_parse_errors_total, as it counts transcripts and metas that
    do). Whoever reads such files again and again keeps one: a new one says a file again."""

    _MOST = 1024  # paths remembered (a tree of links out of the root)

    def __init__(self, count: Callable[[BadInput], None] | None = None) -> None:
        self._seen: set[str] = set()
        self._count = count

    def __call__(self, root: str, path: str) -> None:
        if path in self._seen or len(self._seen) >= self._MOST:
            return
        self._seen.add(path)
        log.warning("%s: %s resolves outside the root %s: not read", BadInput.PATH_OUTSIDE_ROOT, path, root)
        if self._count is not None:
            self._count(BadInput.PATH_OUTSIDE_ROOT)


def readable_under(root: str, path: str, outside: OutsideRoot | None = None) -> bool:
    """May ``path`` (a side file ccotel reads under ``root``) be read? Not when it resolves
    outside the root (a symlink to elsewhere): ``outside`` (else a new OutsideRoot) is told, and
    the caller reads nothing of it."""
    if within_root(root, path):
        return True
    (outside if outside is not None else OutsideRoot())(root, path)
    return False


def _realpath(path: str) -> str:
    """os.path.realpath with the directory's resolution reused for a few seconds while that
    directory is the same one (device and inode, as its path resolves now): two lstat calls
    instead of one per path component, for every read of every transcript. (A directory above it
    moved out of the root and replaced by a symlink keeps its inode: that is seen when the entry
    expires, and only files of a directory that was inside the root are read meanwhile.)"""
    path = os.path.abspath(path)
    parent, name = os.path.split(path)
    try:
        st = os.lstat(parent)
        leaf = os.lstat(path)
    except OSError:
        return os.path.realpath(path)
    if stat.S_ISLNK(leaf.st_mode) or stat.S_ISLNK(st.st_mode) or name in ("", ".", ".."):
        return os.path.realpath(path)
    return os.path.join(_real_dir(parent, st.st_dev, st.st_ino), name)


_DIR_TTL_S = 10.0
_dirs: dict[tuple[str, int, int], tuple[str, float]] = {}  # (dir, dev, ino) -> (real path, expires)


def _real_dir(parent: str, dev: int, ino: int) -> str:
    now = time.monotonic()
    hit = _dirs.get((parent, dev, ino))
    if hit is not None and now < hit[1]:
        return hit[0]
    real = os.path.realpath(parent)
    if len(_dirs) >= 4096:
        _dirs.clear()
    _dirs[(parent, dev, ino)] = (real, now + _DIR_TTL_S)
    return real


@functools.lru_cache(maxsize=64)
def _real_root(root: str) -> str:
    return os.path.realpath(root)


@functools.lru_cache(maxsize=64)
def _projects_prefix(root: str) -> str:
    """``<root>/projects/`` as an absolute, normalised path."""
    return os.path.join(os.path.abspath(projects_dir(root)), "")


def _relative(root: str, path: str) -> str:
    """os.path.relpath(path, <root>/projects), without its normalisation of both paths when path
    is already absolute and normal (what scan and the watcher give): a prefix cut."""
    prefix = _projects_prefix(root)
    if path.startswith(prefix) and "/." not in path and "//" not in path and not path.endswith("/"):
        return path[len(prefix):]
    return os.path.relpath(path, projects_dir(root))


def classify(root: str, path: str) -> TranscriptFile | None:
    """What ``path`` is under ``root`` (None: no transcript, or a name that is not UTF-8)."""
    if not is_utf8(path):
        return None
    rel = _relative(root, path)
    if rel.startswith(".."):
        return None
    *where, name = rel.split(os.sep)
    return _classify_name(where, os.path.dirname(path), path, name)


def _classify_name(where: list[str], dirpath: str, path: str, name: str) -> TranscriptFile | None:
    """The layout's rule for file ``name`` at ``path`` in ``dirpath``, whose path relative to
    <root>/projects is ``where`` (split): shared by ``classify`` and by ``scan``, which splits each
    directory's path once for all its files."""
    if not name.endswith(".jsonl"):
        return None
    stem = name[: -len(".jsonl")]
    if len(where) == 1:
        if stem.startswith(AGENT_PREFIX):
            return TranscriptFile(path, FileKind.FLAT_AGENT, where[0], None, stem[len(AGENT_PREFIX):])
        return TranscriptFile(path, FileKind.MAIN, where[0], stem)
    if len(where) == 3 and where[2] == SUBAGENTS and stem.startswith(AGENT_PREFIX):
        agent_id = stem[len(AGENT_PREFIX):]
        return TranscriptFile(path, FileKind.SUBAGENT, where[0], where[1], agent_id, agent_meta(dirpath, agent_id))
    return None


@dataclass(frozen=True)
class _Listing:
    """One directory as scan last listed it: its mtime then, when it was listed, its
    subdirectories (sorted) and the transcripts in it (in scan's order)."""

    ino: int
    mtime_ns: int
    listed_ns: int
    subdirs: tuple[str, ...]
    found: tuple[TranscriptFile, ...]


# A listing is reused only if the directory had been quiet this long when it was listed: an entry
# added within the same mtime tick as the one before it cannot hide behind an unchanged mtime.
_SETTLED_NS = 2_000_000_000


class ScanCache:
    """What ``scan`` found in each directory, kept by the directory's inode and mtime: a directory
    unchanged since it was listed is not listed again, so a scan of a tree that did not change (the
    periodic safety rescan of ``ccotel run``: 10,000 sessions are thousands of directories and more
    files) is one stat per directory. Adding, removing or renaming an entry changes the mtime of
    its directory; a file written to does not, and scan does not look at files' contents."""

    def __init__(self) -> None:
        self.dirs: dict[str, _Listing] = {}


def scan(root: str, on_error: Callable[[OSError], None] | None = None,
         cache: ScanCache | None = None) -> Iterator[TranscriptFile]:
    """Every transcript under root/projects, main files before the subagent files of their session.
    ``on_error``: told of each directory that cannot be read (its transcripts are not seen).
    ``cache``: directories unchanged since the last scan with this cache are not listed again."""
    projects = projects_dir(root)
    if not os.path.isdir(projects) or not within_root(root, projects):
        return
    seen: dict[str, _Listing] = {}
    stack = [projects]
    while stack:
        dirpath = stack.pop()
        listing = _listing(root, dirpath, cache, on_error)
        if listing is None:
            continue
        seen[dirpath] = listing
        yield from listing.found
        stack.extend(os.path.join(dirpath, d) for d in reversed(listing.subdirs))  # os.walk's top-down order
    if cache is not None:
        cache.dirs = seen  # directories gone (or unreadable now) are forgotten


def _transcripts(root: str, dirpath: str, files: list[tuple[str, bool, str]]) -> list[TranscriptFile]:
    """The transcripts among a directory's files named *.jsonl (name, is a symlink, path)."""
    names = sorted(files)
    if not names:
        return []
    # classify's relative path, once for the directory: a file's is this and its name
    rel = _relative(root, names[0][2])
    *dir_parts, first = rel.split(os.sep)
    # an unusual path (outside the projects dir, ...): classify judges each file
    where = None if rel.startswith("..") or first != names[0][0] else dir_parts
    found = []
    for name, link, path in names:
        if link and not within_root(root, path):
            continue
        tf = classify(root, path) if where is None else _classify_name(where, dirpath, path, name)
        if tf is not None:
            found.append(tf)
    # main files first: their Task tool calls are what subagent files hang under
    found.sort(key=lambda t: t.kind is not FileKind.MAIN)
    return found


def _listing(root: str, dirpath: str, cache: ScanCache | None,
             on_error: Callable[[OSError], None] | None) -> _Listing | None:
    """A directory's listing: the cached one while the directory is unchanged, else listed now
    the way os.walk(followlinks=False) lists it (a symlinked directory is not entered; an entry
    that cannot be stat'ed is a file). Without a cache the directory is not stat'ed: its inode and
    mtime (-1) are kept nowhere."""
    ino = mtime = -1
    try:
        if cache is not None:
            st = os.stat(dirpath)
            ino, mtime = st.st_ino, st.st_mtime_ns
            have = cache.dirs.get(dirpath)
            if have is not None and have.ino == ino and have.mtime_ns == mtime \
                    and have.listed_ns - have.mtime_ns >= _SETTLED_NS:
                return have
        listed_ns = time.time_ns()
        with os.scandir(dirpath) as it:
            entries = list(it)
    except OSError as exc:
        if on_error is not None:
            on_error(exc)
        return None
    subdirs: list[str] = []
    files: list[tuple[str, bool, str]] = []  # (name, is a symlink, path: os.path.join's, made by scandir)
    for entry in entries:
        try:
            is_dir = entry.is_dir()
        except OSError:
            is_dir = False
        name = entry.name
        if not is_utf8(name):  # counted if it could be a transcript or hold some
            if on_error is not None and (is_dir or name.endswith(".jsonl")):
                on_error(PathNotUtf8(entry.path))
            continue
        # is_symlink: from the listing itself (d_type), no stat; a file not named *.jsonl is no transcript
        if is_dir:
            if not entry.is_symlink():
                subdirs.append(name)
        elif name.endswith(".jsonl"):
            files.append((name, entry.is_symlink(), entry.path))
    return _Listing(ino, mtime, listed_ns, tuple(sorted(subdirs)),
                    tuple(_transcripts(root, dirpath, files)))


def size_of(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def mtime_ns(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


def find(roots: tuple[str, ...], since_ns: int | None, checkpoints: Mapping[str, Checkpoint],
         on_error: Callable[[OSError], None] | None = None,
         cache: ScanCache | None = None) -> list[tuple[str, TranscriptFile]]:
    """Every transcript under the roots (with ``since_ns``: those written since, or already followed)."""
    found = []
    for root in roots:
        for tf in scan(root, on_error, cache):
            if since_ns is not None and mtime_ns(tf.path) < since_ns and tf.path not in checkpoints:
                continue
            found.append((root, tf))
    return found


def unread_bytes(path: str, checkpoints: Mapping[str, Checkpoint]) -> int:
    return max(size_of(path) - checkpoints.get(path, (None, 0, 0, None))[1], 0)


def session_groups(files: list[tuple[str, TranscriptFile]],
                   checkpoints: Mapping[str, Checkpoint] | None = None,
                   span: Callable[[str], tuple[int, int]] | None = None) -> list[Group]:
    """Main file + subagent files of one session together; a project with 2.0.x flat agent
    files is one group (their session is only named inside them). With ``checkpoints``, groups
    with nothing left to read come first, in no particular order (their files are not opened).
    ``span``: a file's first and last time (default ``time_span``: read from the file)."""
    span_of = time_span if span is None else span
    # Oldest session first: when a session's history was copied into a new session file, the
    # original (same first line, but it ends earlier) is read first and keeps its traces and
    # usage; ccotel counts each API call once.
    def order(group: Group) -> tuple[int, int]:
        if checkpoints is not None and not any(unread_bytes(tf.path, checkpoints) for _, tf in group):
            return (0, 0)
        return span_of(group[0][1].path)

    return sorted(group_files(files), key=order)


def group_files(files: list[tuple[str, TranscriptFile]]) -> list[Group]:
    """``session_groups``' groups in the order their first file was found (not yet by time: a
    stable sort by ``time_span`` of each group's first file gives session_groups' order)."""
    groups: dict[tuple[str, str, str | None], Group] = {}
    flat_projects = {(root, tf.project) for root, tf in files if tf.kind is FileKind.FLAT_AGENT}
    for root, tf in files:
        key = (root, tf.project, None if (root, tf.project) in flat_projects else tf.session_id)
        groups.setdefault(key, []).append((root, tf))
    for group in groups.values():
        group.sort(key=lambda rt: (rt[1].kind is not FileKind.MAIN, rt[1].path))
    return list(groups.values())


_SPAN_WINDOW = 1 << 16  # a file's time span is read from its first and last 64 KiB
_SPAN_PROBE = 1 << 13  # ... of which these 8 KiB are enough for almost every file


def time_span(path: str) -> tuple[int, int]:
    """First and last line timestamps of a file, from its first and last 64 KiB. The first and
    last 8 KiB are read first: a whole line with a timestamp in them is the same line in 64 KiB
    (two 64 KiB reads and their split, per session, were a visible share of a one-process backfill
    of 2.1.330-shaped history, and are paid in the catch-up's planning before any worker starts)."""
    try:
        with open_regular(path, buffering=0) as f:
            fd = f.fileno()
            size = os.fstat(fd).st_size
            first = _first_stamp(fd, size)
            last = _last_stamp(fd, size)
    except OSError:
        return (0, 0)
    return (first, last if last is not None else first)


def _first_stamp(fd: int, size: int) -> int:
    head = os.pread(fd, _SPAN_PROBE, 0)
    lines = head.split(b"\n")
    whole = lines if len(head) >= size else lines[:-1]  # the last piece may be cut short
    for line in whole:
        ts = _stamp(line)
        if ts is not None:
            return ts
    stamps = _timestamps(os.pread(fd, _SPAN_WINDOW, 0))
    return stamps[0] if stamps else 0


def _last_stamp(fd: int, size: int) -> int | None:
    start = max(0, size - _SPAN_PROBE)
    lines = os.pread(fd, size - start, start).split(b"\n")
    whole = lines if start == 0 else lines[1:]  # the first piece may start inside a line
    for line in reversed(whole):
        ts = _stamp(line)
        if ts is not None:
            return ts
    start = max(0, size - _SPAN_WINDOW)
    stamps = _timestamps(os.pread(fd, size - start, start))
    return stamps[-1] if stamps else None


def _timestamps(chunk: bytes) -> list[int]:
    return [ts for ts in map(_stamp, chunk.split(b"\n")) if ts is not None]


def _stamp(line: bytes) -> int | None:
    """The time of the first ``"timestamp":"`` in a line (or a piece of one)."""
    i = line.find(b'"timestamp":"')
    if i < 0:
        return None
    return parse_timestamp(line[i + 13: i + 53].split(b'"', 1)[0].decode("ascii", "replace"))
