"""Whether what a report read is still what is on disk: for a report from the usage ledger, no
transcript under the roots written since its last write, less a grace for turns still open then
(``written_since``); for one read from the transcripts, the tree as it was (``unchanged``). Kept
apart from the sums: a report with a kept answer (kept.py) asks this and nothing else.

Every ``.jsonl`` under ``<root>/projects`` is looked at (directories entered as discover.scan
enters them: not through a symlink), a superset of the transcripts. A walk can keep what it
listed (a ``Listing``): each directory's mtime, its ``.jsonl`` files' sizes and mtimes, and its
subdirectories. A later walk given it lists again only a directory whose mtime moved (a file
added, removed or renamed) and stats the files of the others (a line appended moves the file's
mtime, never its directory's). Only a directory not changed in the last RACY_NS before the walk
is kept: an entry added in the same clock tick as the listing (mtimes move by the tick) would
otherwise be missed until the directory changes again."""

from __future__ import annotations

import os
import time

from ccotel.read.layout import projects_dir

TYPE_CHECKING = False  # typing is not loaded on this path: mypy reads this block, Python does not
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

    # folder -> (its mtime, {.jsonl name: (size, mtime)}, the subdirectories entered)
    Listing = dict[str, tuple[int, dict[str, tuple[int, int]], list[str]]]

__all__ = ["REREAD_GRACE_NS", "RACY_NS", "written_since", "unchanged"]

# Files written this long before the ledger's last write are read again from the transcripts: a
# turn still open then (its calls not yet finished) is in the file, not yet in the ledger.
REREAD_GRACE_NS = 15 * 60 * 1_000_000_000
RACY_NS = 2_000_000_000


def written_since(roots: Sequence[str], since_ns: int, listing: Listing | None = None,
                  keep: Listing | None = None) -> bool:
    """False if no transcript under ``roots`` was modified at or after ``since_ns``: then
    ``gather`` reads nothing from the transcripts and the ledger answers alone. One that cannot
    be stat'ed counts as written (the transcripts are read then, which is never wrong, only
    slower). ``listing``: an earlier walk's; ``keep``: filled with this walk's (complete only when
    the answer is False: the walk stops at the first file written since)."""
    for _folder, files in _walk(roots, listing, keep):
        if files is None:
            return True
        for _size, mtime_ns in files.values():
            if mtime_ns >= since_ns:
                return True
    return False


def unchanged(roots: Sequence[str], listing: Listing) -> bool:
    """Is every directory and ``.jsonl`` file under ``roots`` as ``listing`` holds it (the same
    names, sizes and mtimes; none added, none gone)?"""
    seen = 0
    for folder, files in _walk(roots, listing, None):
        known = listing.get(folder)
        if files is None or known is None or files != known[1]:
            return False
        seen += 1
    return seen == len(listing)


def _walk(roots: Sequence[str], listing: Listing | None, keep: Listing | None
          ) -> Iterator[tuple[str, dict[str, tuple[int, int]] | None]]:
    """(folder, its files' {name: (size, mtime)}, or None if one could not be stat'ed) for each
    directory entered, as it is entered: a caller that has its answer stops the walk."""
    settled = time.time_ns() - RACY_NS
    dated = bool(listing) or keep is not None  # a directory's own mtime is needed
    stack = [projects_dir(root) for root in roots]
    while stack:
        folder = stack.pop()
        try:
            mtime_ns = os.stat(folder).st_mtime_ns if dated else 0
        except OSError:
            continue  # scan reads nothing from a directory it cannot list either
        known = listing.get(folder) if listing else None
        if known is not None and known[0] == mtime_ns:
            files, dirs = _stat_all(folder, known[1]), known[2]
        else:
            listed = _list(folder)
            if listed is None:
                continue
            files, dirs = listed
        yield folder, files
        if files is None:
            return
        stack.extend(folder + os.sep + name for name in dirs)
        if keep is not None and mtime_ns < settled:
            keep[folder] = (mtime_ns, files, dirs)


def _stat_all(folder: str, names: Iterable[str]) -> dict[str, tuple[int, int]] | None:
    prefix = folder + os.sep  # os.path.join's result for a name of a listing, at a fraction of its cost
    stat = os.stat
    try:  # comprehensions: most of a kept answer's time is this loop
        found = [(name, stat(prefix + name)) for name in names]
    except OSError:
        return None  # gone or unreadable: read again, as for a listed one
    return {name: (st.st_size, st.st_mtime_ns) for name, st in found}


def _list(folder: str) -> tuple[dict[str, tuple[int, int]] | None, list[str]] | None:
    """(its ``.jsonl`` files, or None if one could not be stat'ed; the directories to enter);
    None if it cannot be listed."""
    try:
        with os.scandir(folder) as it:
            entries = list(it)
    except OSError:
        return None
    files: dict[str, tuple[int, int]] | None = {}
    dirs = []
    for entry in entries:
        try:
            is_dir = entry.is_dir()
        except OSError:
            is_dir = False
        if is_dir:
            if not entry.is_symlink():
                dirs.append(entry.name)
        elif entry.name.endswith(".jsonl") and files is not None:
            try:
                st = entry.stat()
            except OSError:
                files = None
                continue
            files[entry.name] = (st.st_size, st.st_mtime_ns)
    return files, dirs
