"""Python's cyclic garbage collector during a history's read: fewer collections of the objects that live a while.

Reading a history allocates several container objects per line (entries, blocks, usage, spans,
rows), nearly all freed by reference counting once their session's spans are built; few form
cycles (owners and their calls). With the default thresholds (700, 10, 10) every 700 surviving
allocations trigger a young collection, every 10 of those a middle one, and those promote the
objects still held (a session's entries, its open owners) to the oldest generation, whose full
collections then traverse every object the process holds: the imports and the assembler's
maps included. The collections cost the same whatever they find.

``fewer_collections`` keeps the young threshold (cycles are still found soon after they form)
and collects the middle generation a tenth as often, so that most objects that survive a young
collection are freed by reference counting before they are traversed again or promoted; the
objects alive when the read starts (the imports, the options, the opened state) are frozen out
of every collection. Nothing computed changes: only when unreachable cycles are freed.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["fewer_collections"]

# Young collections per middle-generation collection while a history is read (Python's default: 10).
MIDDLE_EVERY = 100


@contextmanager
def fewer_collections() -> Iterator[None]:
    """The history's read with the thresholds above; the process's own thresholds again after it,
    and the objects frozen at its start collectable again."""
    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(before[0], max(before[1], MIDDLE_EVERY), *before[2:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
