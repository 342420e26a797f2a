"""A set of 64-bit digests kept in 8 bytes each (the assembler's seen calls and prompts).

A long history has many API calls: a Python set of ints holds each digest as an int object plus
its hash-table slots, several times the 8 bytes, built once more while a restart loads them, and
every catch-up worker holds its shard's half. Here most digests sit in a sorted array of signed 64-bit
integers, looked up by bisection; the ones added since the last packing sit in a small set,
merged into the array once it has grown by a quarter (so the merges cost O(n) in all). The
two parts never hold the same digest, so ``len`` is the number of distinct digests.
"""

from __future__ import annotations

import functools
import heapq
import itertools
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator

from ccotel.hashing import blake2b

__all__ = ["Digests", "PACK_MIN", "digest64"]


# Memoised: the assembler asks for the digest of one call key, message id or file path again and
# again (every line of a response, every span of a file), and a bounded cache lookup is cheaper
# than hashing; the digest of a string never changes.
@functools.lru_cache(maxsize=4096)
def digest64(text: str) -> int:
    """A signed 64-bit digest (fits an SQLite INTEGER)."""
    return int.from_bytes(blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                          "big", signed=True)


# The recent set is packed once it holds this many digests, or a quarter of the array's, whichever is more.
PACK_MIN = 1024


class Digests:
    """Signed 64-bit integers (digest64): ``in``, ``add``, ``update``, ``difference_update``, ``len``."""

    def __init__(self, digests: Iterable[int] = ()) -> None:
        self._packed = array("q")  # sorted, no repeats
        self._recent: set[int] = set()  # none of them in _packed
        self._pack_at = PACK_MIN  # _recent's size that packs it
        self.update(digests)

    def __contains__(self, digest: int) -> bool:
        if digest in self._recent:
            return True
        packed = self._packed
        i = bisect_left(packed, digest)
        return i < len(packed) and packed[i] == digest

    def __len__(self) -> int:
        return len(self._packed) + len(self._recent)

    def __iter__(self) -> Iterator[int]:
        """In no particular order."""
        yield from self._packed
        yield from self._recent

    def add(self, digest: int) -> None:
        recent, packed = self._recent, self._packed  # __contains__ inlined: one add per API call read
        if digest in recent:
            return
        i = bisect_left(packed, digest)
        if i < len(packed) and packed[i] == digest:
            return
        recent.add(digest)
        if len(recent) >= self._pack_at:
            self._pack()

    def update(self, digests: Iterable[int]) -> None:
        self.update_sorted(sorted(set(digests)))

    def update_sorted(self, digests: Iterable[int]) -> None:
        """Digests in ascending order (repeats allowed): merged into the array without a set of them all."""
        self._pack()
        self._packed = array("q", _unique(heapq.merge(self._packed, digests)))
        self._pack_at = max(PACK_MIN, len(self._packed) >> 2)

    def difference_update(self, digests: Iterable[int]) -> None:
        gone = set(digests)
        if not gone:
            return
        self._recent -= gone
        if any(d in gone for d in self._packed):
            self._packed = array("q", (d for d in self._packed if d not in gone))
            self._pack_at = max(PACK_MIN, len(self._packed) >> 2)

    def _pack(self) -> None:
        if self._recent:
            # the two parts are disjoint: sorted in C, no repeats to drop (a list of them all, for a moment)
            self._packed = array("q", sorted(itertools.chain(self._packed, self._recent)))
            self._recent = set()
        self._pack_at = max(PACK_MIN, len(self._packed) >> 2)


def _unique(ordered: Iterable[int]) -> Iterator[int]:
    """An ascending sequence without its repeats."""
    last: int | None = None
    for d in ordered:
        if d != last:
            yield d
            last = d
