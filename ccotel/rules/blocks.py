"""The 5-hour blocks ccusage cuts usage into (``ccusage blocks``; Claude's plans count usage in
5-hour windows): calls in time order; a block starts at its first call's hour (UTC) and lasts 5
hours; a call more than 5 hours after its block's start, or more than 5 hours after the call before
it, starts the next block. No imports: the report's blocks view and the status line both cut here."""

from __future__ import annotations

TYPE_CHECKING = False  # collections.abc is not loaded for the status line: mypy reads this block, Python does not
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["HOUR_NS", "BLOCK_NS", "cut_blocks", "is_active"]

HOUR_NS = 3600 * 1_000_000_000
BLOCK_NS = 5 * HOUR_NS


def cut_blocks(times: Sequence[int], length_ns: int = BLOCK_NS) -> list[tuple[int, int, int]]:
    """The blocks of calls at ``times`` (sorted, oldest first): (start ns, index of its first
    call, index after its last)."""
    out: list[tuple[int, int, int]] = []
    first = 0
    start = 0
    for i, t in enumerate(times):
        if i == 0 or t - start > length_ns or t - times[i - 1] > length_ns:
            if i:
                out.append((start, first, i))
            first, start = i, t - t % HOUR_NS
    if times:
        out.append((start, first, len(times)))
    return out


def is_active(start_ns: int, last_ns: int, now_ns: int, length_ns: int = BLOCK_NS) -> bool:
    """Is the block the one ``now`` is in (it has not ended, and its last call is less than a
    block's length ago)?"""
    return now_ns - last_ns < length_ns and now_ns < start_ns + length_ns
