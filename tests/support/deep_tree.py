"""A directory tree deeper than Python's recursion limit, made and removed without recursion
(shutil.rmtree and os.walk recurse per level: pytest's own clean-up of tmp_path would fail on it)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ccotel.read.tree import walk

DEPTH = sys.getrecursionlimit() + 200


def make_deep(top: Path, depth: int = DEPTH) -> Path:
    """``top/d/d/.../d`` (``depth`` levels below ``top``, which is made); the deepest directory."""
    top.mkdir(parents=True, exist_ok=True)
    here = os.getcwd()
    os.chdir(top)
    try:
        for _ in range(depth):  # relative steps: each mkdir names one level
            os.mkdir("d")
            os.chdir("d")
        return Path(os.getcwd())
    finally:
        os.chdir(here)


def remove_deep(top: Path) -> None:
    """Remove ``top`` and everything below it, deepest first."""
    if not top.exists():
        return
    dirs = []
    for dirpath, _dirs, files in walk(str(top)):
        for name in files:
            os.unlink(os.path.join(dirpath, name))
        dirs.append(dirpath)
    for dirpath in reversed(dirs):
        os.rmdir(dirpath)
