"""Handing freed memory back to the system during a long read (glibc's malloc; elsewhere nothing).

A catch-up worker reads hundreds of MB. Its passing buffers (1 MiB read chunks, a slice of
lines, a long line and the text decoded from it, an encoded OTLP batch) come from malloc. glibc
serves a block above its mmap threshold by its own mmap, unmapped when freed, but raises that
threshold to the size of every such block freed (up to 32 MiB): after the first long line, blocks
of a few MB come from the heap, which cannot shrink below its highest block still in use. A
worker's RSS then only grows, by heap pages that are free but kept.
Two remedies, both leaving every value computed unchanged (only where freed memory goes):
- a fixed mmap threshold: large blocks are mapped and unmapped, never left in the heap;
- ``trim`` from time to time: free pages inside the heap are returned (malloc_trim(0)).
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

__all__ = ["Heap", "MMAP_THRESHOLD"]

# mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

# Blocks from this size on are mapped on their own. 256 KiB: lines, read chunks and batches, not
# the small objects of parsed lines (a mapping per small block would cost a system call each).
MMAP_THRESHOLD = 256 << 10


class Heap:
    """glibc's malloc, when this process has it (``available``); otherwise every call does nothing."""

    def __init__(self) -> None:
        self._libc: Any = _glibc()

    @property
    def available(self) -> bool:
        return self._libc is not None

    def map_large_blocks(self, threshold: int = MMAP_THRESHOLD) -> bool:
        """Blocks of ``threshold`` bytes or more get a mapping of their own, returned when freed; the
        heap's free top is returned once it exceeds twice that (fixing either ends glibc's dynamic
        adjustment of both)."""
        if self._libc is None:
            return False
        return bool(self._libc.mallopt(_M_MMAP_THRESHOLD, threshold)) and bool(
            self._libc.mallopt(_M_TRIM_THRESHOLD, 2 * threshold))

    def trim(self) -> bool:
        """Return the free pages of the heap (anywhere in it, not only at its top) to the system."""
        if self._libc is None:
            return False
        self._libc.malloc_trim(0)
        return True


def _glibc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        return libc
    except (OSError, AttributeError):  # musl and others: no mallopt or malloc_trim
        return None
