"""Walking a directory tree under a root, to any depth.

``os.walk`` recurses once per level below Python 3.12: a tree some thousand directories deep (made
by anything with write access under a root, or moved in whole) raised RecursionError in the
inotify thread, which then died and left ``ccotel run`` following nothing new, and in ``doctor``.
This walk keeps its own stack.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

__all__ = ["walk"]


def walk(top: str, onerror: Callable[[OSError], None] | None = None) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk(top, onerror=onerror, followlinks=False)``, top-down, without recursion: each
    (directory, its subdirectory names, its other names); a name the caller removes from the
    subdirectories is not entered. A symlink to a directory is named among the subdirectories but
    not entered, as os.walk does."""
    stack = [top]
    while stack:
        dirpath = stack.pop()
        try:
            with os.scandir(dirpath) as it:
                entries = list(it)
        except OSError as exc:
            if onerror is not None:
                onerror(exc)
            continue
        dirs: list[str] = []
        files: list[str] = []
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            (dirs if is_dir else files).append(entry.name)
        yield dirpath, dirs, files
        for name in reversed(dirs):  # os.walk's order: the first subdirectory next
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                stack.append(path)
