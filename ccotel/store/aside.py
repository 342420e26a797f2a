"""Setting a damaged database aside: the one rule for the state (sqlite.py) and the usage ledger
(ledger.py). The file and its WAL and shared-memory files are renamed, never deleted, to
``<name>.corrupt-<UTC time>``: what they still hold can be recovered by hand (``sqlite3 .recover``)."""

from __future__ import annotations

import os
import time

__all__ = ["set_aside"]

_SUFFIXES = ("", "-wal", "-shm")


def set_aside(path: str, kind: str = "corrupt") -> str:
    """Rename ``path`` (and its ``-wal``/``-shm``) to ``<path>.<kind>-<UTC time>`` (``-2``, ``-3``...
    if that name is taken) and return the new name. OSError if a rename fails. ``kind``: ``corrupt``,
    or ``unusable`` for a file that holds none of ccotel's data (0 bytes, another program's database)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = f"{path}.{kind}-{stamp}"
    n = 1
    while any(os.path.exists(aside + s) for s in _SUFFIXES):
        n += 1
        aside = f"{path}.{kind}-{stamp}-{n}"
    for suffix in _SUFFIXES:
        if os.path.exists(path + suffix):
            os.replace(path + suffix, aside + suffix)
    return aside
