"""The pipeline's side of the usage ledger: rows written, kept when a write fails (the checkpoints
then wait for them), the "still filling" mark cleared once the history is in, and the usage a
later snapshot of a call is the difference from (pipeline._correct)."""

from __future__ import annotations

import logging
import sqlite3
import struct
from collections import OrderedDict
from collections.abc import Sequence

from ccotel.metrics import events
from ccotel.metrics.counters import Metrics
from ccotel.records import SpanRecord, Usage
from ccotel.run.reader import ReadStats
from ccotel.store.ledger import Ledger, LedgerError
from ccotel.store.ledger_rows import Rows, rows_of
from ccotel.store.state import DISK_REASONS, write_error_reason

__all__ = ["UsageRecorder"]

log = logging.getLogger("ccotel.pipeline")


class UsageRecorder:
    """Writes the ledger for a pipeline (``ledger`` None: there is none, every write succeeds)."""

    def __init__(self, ledger: Ledger | None, stats: ReadStats, metrics: Metrics | None) -> None:
        self.ledger = ledger
        self._stats = stats
        self._metrics = metrics
        self._counted = _Counted()  # the usage of the calls built lately: what a correction is the difference from
        self._held: Rows = ([], [], [], [])  # rows of spans held for the next record()

    def hold(self, spans: Sequence[SpanRecord]) -> None:
        """These spans' rows go into the ledger with the next ``record``. Kept as rows, not as the
        spans: a backfill holds a second of spans between commits, ledger rows are a fraction of
        their size. (Rows of separate batches are those of them together: an advisor's span is
        built with its chat span, never in a later batch.)"""
        if self.ledger is None or not spans:
            return
        for into, rows in zip(self._held, rows_of(spans), strict=True):
            into += rows

    @property
    def holding(self) -> bool:
        return any(self._held)

    def record(self, spans: Sequence[SpanRecord]) -> bool:
        """Into the usage ledger (history for reports), after the rows held, with the rows of earlier
        failed writes. A failed write (a full disk) is counted and logged; the ledger keeps its rows
        and writes them with the next one, and False says the checkpoints must wait for them (a stop
        meanwhile reads those lines again at the next start); tracing and counting go on."""
        self.hold(spans)
        if self.ledger is None or not (self.holding or self.ledger.pending):
            return True
        if self.ledger.busy:  # the totals are being made again: the rows wait, and the checkpoints for them
            return False
        rows, self._held = self._held, ([], [], [], [])
        try:
            self.ledger.record_rows(rows)
        except sqlite3.Error as exc:
            # the disk's reason when it is the disk's (the ledger is written first: on a full disk it
            # fails first and the checkpoints, which wait for it, never get to hit the disk themselves)
            reason = write_error_reason(exc)
            reason = reason if reason in DISK_REASONS else "ledger"
            self._stats.errors["ledger_write"] += 1
            if self._metrics is not None:
                events.ledger_write_failed(self._metrics, reason)
            if self._stats.errors["ledger_write"] == 1:
                log.error("the usage ledger could not be written (%s: %s); its rows are kept and written again "
                          "with the next commit, and the checkpoints wait for them", reason, exc)
            return False
        return True

    def caught_up(self, aside: bool = False) -> None:
        """The history is read and its rows written: a ledger marked as filling holds it all now.
        ``aside``: ccotel run follows live sessions; the totals are made again in a thread
        (Ledger.end_filling_aside), and the rows written meanwhile wait for it (``record``)."""
        if self.ledger is None or self.ledger.pending:
            return
        try:
            if not self.ledger.still_filling():  # (not coverage(): it counts the calls)
                return
            if aside:
                self.ledger.end_filling_aside()
            else:
                self.ledger.filling(None)
        except (sqlite3.Error, LedgerError) as exc:  # the mark stays: reports read every transcript (never wrong)
            log.debug("usage ledger still marked as filling: %s", exc)

    def remember(self, key: str, usage: Usage) -> None:
        """The usage a call's span was built (or corrected) with."""
        self._counted.remember(key, usage)

    def counted(self, key: str) -> Usage | None:
        """The usage a call was counted with: this process's, else the ledger's (after a restart)."""
        before = self._counted.get(key)
        if before is None and self.ledger is not None:
            try:
                found = self.ledger.call_usage(key)
            except sqlite3.Error:
                found = None
            before = found[1] if found is not None else None
        return before


class _Counted:
    """Call key -> the usage its span was built with, for the most recent calls (bounded: a
    correction of an older one asks the ledger). Up to _MAX of them stay in memory for as long as
    the process runs: each usage is kept as its seven counts packed (89 bytes), not as a Usage
    (~330: a dataclass's dict), read back as an equal Usage.

    _MAX covers the calls built since the last commit (a backfill commits about once a second, so
    the ledger holds every older one) several times over; more only pins memory, long-lived
    entries spread over the whole heap (bench/NOTES.md, peak RSS)."""

    _MAX = 1 << 14

    def __init__(self) -> None:
        self._usage: OrderedDict[str, bytes | Usage] = OrderedDict()

    def get(self, key: str) -> Usage | None:
        kept = self._usage.get(key)
        if isinstance(kept, bytes):
            return Usage(*_PACKED.unpack(kept))
        return kept

    def remember(self, key: str, usage: Usage) -> None:
        self._usage[key] = _pack(usage)
        self._usage.move_to_end(key)
        if len(self._usage) > self._MAX:
            self._usage.popitem(last=False)


_PACKED = struct.Struct("7q")


def _pack(usage: Usage) -> bytes | Usage:
    """The seven counts of a usage packed; itself if one is not an int of a signed 64-bit range."""
    counts = (usage.input_tokens, usage.output_tokens, usage.cache_read_input_tokens,
              usage.cache_creation_input_tokens, usage.cache_creation_5m, usage.cache_creation_1h,
              usage.reasoning_tokens)
    if not all(type(n) is int for n in counts):
        return usage
    try:
        return _PACKED.pack(*counts)
    except struct.error:
        return usage
