"""The usage a correction is the difference from (run/usage.py _Counted): kept packed, read back equal."""

from __future__ import annotations

import dataclasses
import sys
import tracemalloc

from ccotel.records import Usage
from ccotel.run.usage import _Counted


def test_read_back_equal() -> None:
    counted = _Counted()
    usages = {"a": Usage(1, 2, 3, 4, 5, 6, 7), "b": Usage(), "c": Usage(output_tokens=(1 << 63) - 1),
              "d": Usage(input_tokens=1 << 70)}  # beyond 64 bits: kept as it is
    for key, usage in usages.items():
        counted.remember(key, usage)
    for key, usage in usages.items():
        got = counted.get(key)
        assert got == usage and type(got) is Usage
        assert all(type(getattr(got, f.name)) is int for f in dataclasses.fields(Usage))
    assert counted.get("e") is None


def test_every_field_kept() -> None:
    """A field added to Usage must be packed too (the struct has one count per field)."""
    counted = _Counted()
    values = {f.name: i + 10 for i, f in enumerate(dataclasses.fields(Usage))}
    counted.remember("k", Usage(**values))
    got = counted.get("k")
    assert got is not None and dataclasses.asdict(got) == values


def test_bounded_and_small() -> None:
    """The most recent _MAX calls are kept, the oldest go first; a call held costs at most ~300 bytes
    (a key, its packed counts, the ordered dict's entry), not a Usage's ~600 with them."""
    counted = _Counted()
    n = 20_000
    keys = [f"msg_{i:024d}:req_{i:024d}" for i in range(n + counted._MAX)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i, key in enumerate(keys[:n]):
            counted.remember(key, Usage(i * 1000, i * 7 + 300, i * 50_000, 1000 + i, 1000 + i, 0, 0))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held / n < 300, held / n
    for key in keys[n:]:
        counted.remember(key, Usage(1, 2))
    assert counted.get(keys[0]) is None and counted.get(keys[n]) == Usage(1, 2)
    assert len(counted._usage) == counted._MAX
    assert sys.getsizeof(counted._usage[keys[-1]]) < 100
