"""Delivery stage: which spans are in flight, which owners are done, where checkpoints may move.

Checkpoint rule: a file's offset moves past a line only when every span built from it was
acknowledged (or dropped for good). Lines of a turn still open (or not yet delivered) are
re-read after a restart; spans of it already delivered are not sent again (state.acked). In a
fleet sharing one state, a span goes out from the one host whose claim on its id won (``take``);
one another host claimed and has not delivered is held here, its owner not done, and claimed
again every ``ELSEWHERE_EVERY_S`` (``take_over``) until that host delivered it or its lease ran
out (it died: the span is this host's to send now, postgres.py).
``acknowledge`` runs on the export thread; everything else on the pipeline's thread; the lock
keeps the two apart.

Following live, acknowledgements arrive a few spans at a time and a transaction each cost more
than the spans themselves: with ``coalesce`` set they are kept here and written with the
pipeline thread's next commit (``take_acked``), after the usage ledger rows of their spans.
A SIGKILL before that loses only their acknowledgement: the lines are read again and the spans
sent again with the same ids, counted once (the counters go in the same transaction).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet

from ccotel.assemble.digests import digest64
from ccotel.assemble.model import Owner, Turn
from ccotel.export.result import ExportResult
from ccotel.metrics import events
from ccotel.metrics.counters import Metrics
from ccotel.records import SpanRecord
from ccotel.run.reader import Reader
from ccotel.store.state import PERMANENT, Claimed, Commit, State, anchor_of

__all__ = ["Delivery", "ELSEWHERE_EVERY_S"]

ELSEWHERE_EVERY_S = 1.0  # spans another host claimed are claimed again this often


class Delivery:
    def __init__(self, state: State | None, metrics: Metrics | None, clock: Callable[[], int]) -> None:
        self.state = state
        self.metrics = metrics
        self.clock = clock
        self.lock = threading.RLock()
        self.acked_before: set[int] = state.acked() if state is not None else set()
        self.owners: dict[str, Owner] = {}  # not done yet: open, or spans not all acknowledged
        self._inflight: dict[int, tuple[Owner, bool]] = {}
        self._owners_by_path: dict[str, dict[str, int]] = {}  # path -> {owner token: first offset}
        self._maybe_done: set[str] = set()  # owners to look at in the next commit
        self._replays: list[tuple[str, int, str]] = []  # copies seen of what an open owner holds
        self.traces_behind = False  # spans were let go: read again from the trace cursor (runner)
        # owners of history (not counted) whose spans were let go: still not counted when read again
        self.not_live: set[str] = set()
        self.last_export_ns = 0
        self.coalesce = False  # acknowledgements wait for the pipeline thread's next commit (live)
        # A first start following live sessions while it catches up (livefirst.py): each file's size
        # when this process started. An owner whose first line lies past it was written since: live,
        # counted, though the first catch-up has not ended (None: only ``counting`` decides).
        self.started_sizes: dict[str, int] | None = None
        self._acked: list[tuple[int, str]] = []  # acknowledged, not committed yet (coalesce)
        # claimed by another host, not delivered yet: span id -> (owner, span, anchor of its file)
        self._elsewhere: dict[int, tuple[Owner, SpanRecord, int]] = {}
        self._elsewhere_at = 0.0
        self._saved = {"delivered": 0, "own": 0}  # Metrics.changes of these channels as last committed

    # -- handing spans over ------------------------------------------------------

    def register(self, owner: Owner, counting: bool) -> None:
        """Track an owner until it is done: its first line in each file holds that file's checkpoint."""
        with self.lock:
            if owner.token not in self.owners:
                self.owners[owner.token] = owner
                owner.live = owner.live or ((counting or self._written_since_start(owner))
                                            and owner.token not in self.not_live)
            for path, off in owner.first_offsets.items():
                self._owners_by_path.setdefault(path, {})[owner.token] = off
            self._maybe_done.add(owner.token)

    def _written_since_start(self, owner: Owner) -> bool:
        sizes = self.started_sizes
        if sizes is None or not owner.first_offsets:
            return False
        path, offset = next(iter(owner.first_offsets.items()))
        return offset >= sizes.get(path, 0)

    def history_in_flight(self) -> list[tuple[str, int]]:
        """(token, anchor of its first file) of the closed owners read as history (not counted)
        whose spans are not all final: their offsets are not committed yet, so a restart would
        read them again. (An open one is not among them: its lines from now on are live, and it
        counts once they come.)"""
        with self.lock:
            return [(token, anchor_of(next(iter(owner.first_offsets))) if owner.first_offsets else PERMANENT)
                    for token, owner in self.owners.items() if not owner.live and owner.closed]

    def take(self, owner: Owner, spans: Sequence[SpanRecord]) -> list[SpanRecord]:
        """The spans of an owner about to be sent: those not delivered before a restart, now in
        flight, and counted at once (metrics never wait for the trace backend). Those another
        host claimed and has not delivered are held (``take_over``)."""
        fresh = [s for s in spans if s.span_id not in self.acked_before]  # not delivered before a restart
        claimed, anchor = self._claimed(owner, fresh)
        with self.lock:
            for span in fresh:
                if span.span_id in claimed.elsewhere:
                    owner.pending += 1  # its owner (and its file's checkpoint) waits for that host
                    self._elsewhere[span.span_id] = (owner, span, anchor)
            return self._in_flight(owner, fresh, claimed.mine)

    def take_over(self) -> list[SpanRecord]:
        """The spans held for other hosts (at most every ELSEWHERE_EVERY_S): those delivered since
        are final here too, not sent nor counted; those whose host's lease ran out are this
        host's now: in flight and counted, as ``take`` returns them."""
        if self.state is None or not self._elsewhere or time.monotonic() - self._elsewhere_at < ELSEWHERE_EVERY_S:
            return []
        self._elsewhere_at = time.monotonic()
        with self.lock:
            by_anchor: dict[int, list[int]] = {}
            for span_id, (_owner, _span, anchor) in self._elsewhere.items():
                by_anchor.setdefault(anchor, []).append(span_id)
        out: list[SpanRecord] = []
        for anchor, ids in by_anchor.items():
            claimed = self.state.claim(ids, anchor)
            with self.lock:
                for span_id in ids:
                    if span_id in claimed.elsewhere or span_id not in self._elsewhere:
                        continue
                    owner, span, _anchor = self._elsewhere.pop(span_id)
                    owner.pending -= 1
                    if span_id in claimed.mine:
                        out += self._in_flight(owner, [span], claimed.mine)
                    elif owner.pending == 0:
                        self._maybe_done.add(owner.token)  # the other host delivered it
        return out

    def _in_flight(self, owner: Owner, spans: Sequence[SpanRecord], mine: AbstractSet[int]) -> list[SpanRecord]:
        """Those of the owner's ``spans`` in ``mine``, now in flight and counted; the caller holds the lock."""
        out = []
        for span in spans:
            if span.span_id not in mine:
                continue  # another host of the fleet sends and counts it (a synced copy of its file)
            owner.pending += 1
            self._inflight[span.span_id] = (owner, owner.live)
            out.append(span)
            if self.metrics is not None and owner.live:
                self.metrics.observe_span(span, span.span_id)  # counted now, not on delivery
        return out

    def _claimed(self, owner: Owner, spans: Iterable[SpanRecord]) -> tuple[Claimed, int]:
        """The span ids this process may send, and the anchor they were claimed with: a shared
        state (PostgreSQL) gives each to the first host that claims it; one on this host alone
        (SQLite, or none) gives them all."""
        ids = [s.span_id for s in spans]
        path = next(iter(owner.first_offsets), None)
        anchor = anchor_of(path) if path is not None else PERMANENT
        if self.state is None or not ids:
            return Claimed(frozenset(ids)), anchor
        return self.state.claim(ids, anchor), anchor

    def acknowledge(self, spans: Sequence[SpanRecord], result: ExportResult | None = None, others: int = 0,
                    exported: bool = True) -> None:
        """These spans are final (called from the export thread): the backend took them, or
        ``result.drops`` says how many it rejected (or could not be encoded), by reason. Dropped
        spans will never be delivered either, so checkpoints move past both; only delivered
        ones count in ccotel_spans_exported, the rest in ccotel_spans_dropped by reason.

        Their ids and the counters they feed are committed at once, in one transaction, so a
        crash right after cannot make a restart send them again or count them twice. ``others``:
        spans of this batch another source owns (an agent registry's): counted the same way.
        ``exported=False``: records never sent (a usage correction, spans/correction.py), final
        once counted: neither exported nor an export.
        """
        commit = Commit()
        settled: list[int] = []
        with self.lock:
            for span, owner, live in self._released(spans):
                if owner.pending == 0:
                    self._maybe_done.add(owner.token)
                commit.acked.append((span.span_id, owner.token))
                if live:
                    settled.append(span.span_id)
            if self.metrics is not None and settled:
                self.metrics.settle(settled)  # counted when built; now final, so checkpointed
            delivered = len(commit.acked) + others if exported else 0
            for reason, n in result.drops if result is not None else ():
                n = min(n, delivered)
                delivered -= n
                if self.metrics is not None and n:
                    events.spans_dropped(self.metrics, reason, n)
            if self.metrics is not None and delivered:
                events.spans_exported(self.metrics, delivered)
            if exported and (delivered or result is None):
                self.last_export_ns = self.clock()
            if self.state is None or not commit.acked:
                return
            # Every acknowledgement goes through the ones kept back: a commit of the counters
            # takes all of them (take_acked), since the counters hold every settled count.
            self._acked += commit.acked
            if not self.coalesce:
                out = Commit()
                self.take_acked(out)
                self.state.commit(out)

    def take_acked(self, commit: Commit) -> None:
        """Add the acknowledgements kept back (``coalesce``) to ``commit``, with the counters they
        settled: taken under the lock, so the ids and the counts they fed are written together.
        The delivered counters also when they changed without an acknowledgement to keep (spans
        of another source, counted on delivery): every count settled under this lock has its
        ids here or already written, so they are always safe to write."""
        with self.lock:
            changed = self.metrics is not None and self.metrics.changes("delivered") != self._saved["delivered"]
            if not self._acked and not changed:
                return
            commit.acked += self._acked
            self._acked = []
            if self.metrics is not None:
                self._saved["delivered"] = self.metrics.changes("delivered")  # before the snapshot: never later
                commit.counters.update(self.metrics.snapshot("delivered"))

    def stop_coalescing(self) -> None:
        """Acknowledgements are committed as they come again (on the export thread), and those held
        back are committed now: their ids and the delivered counts only, no offsets (a read that
        was stopped must not pass over its lines; a restart skips the spans it delivered)."""
        commit = Commit()
        with self.lock:
            self.coalesce = False
            self.take_acked(commit)
            if self.state is not None and not commit.empty():
                self.state.commit(commit)

    def unsent(self, spans: list[SpanRecord]) -> None:
        """The trace queue is full (the backend is away): reading and counting go on, the spans
        are let go. Their owners hold the trace cursor (the file checkpoints) where it is, and
        ``traces_behind`` tells the runner to read them again once the backend has caught up."""
        with self.lock:
            for _span, owner, live in self._released(spans):
                owner.unsent = True
                if not live:
                    self.not_live.add(owner.token)
            if self.metrics is not None:
                self.metrics.let_go(s.span_id for s in spans)
        self.traces_behind = True

    def _released(self, spans: Iterable[SpanRecord]) -> Iterator[tuple[SpanRecord, Owner, bool]]:
        """The spans of these that were in flight, with their owner (one span fewer pending) and
        whether it counts; the caller holds the lock."""
        for span in spans:
            found = self._inflight.pop(span.span_id, None)
            if found is None:
                continue
            owner, live = found
            owner.pending -= 1
            yield span, owner, live

    # -- committing --------------------------------------------------------------

    def finish_owners(self, commit: Commit) -> set[str]:
        """Owners whose every span was acknowledged are done: their digests go into the commit.
        Returns the files whose checkpoint they may have held."""
        moved: set[str] = set()
        with self.lock:
            work, self._maybe_done = list(self._maybe_done), set()
            while work:
                token = work.pop()
                owner = self.owners.get(token)
                if owner is None or not _done(owner):
                    continue
                del self.owners[token]
                for path in owner.first_offsets:
                    blocking = self._owners_by_path.get(path)
                    if blocking is not None:
                        blocking.pop(token, None)
                        if not blocking:
                            del self._owners_by_path[path]
                moved.update(owner.first_offsets)
                commit.done_owners.append(token)
                anchors = [anchor_of(p) for p in owner.first_offsets] or [PERMANENT]
                commit.calls.extend((digest64(k), a) for k in owner.call_keys for a in anchors)
                if isinstance(owner, Turn) and owner.prompt_uuid:
                    commit.prompts.extend((digest64(owner.prompt_uuid), a) for a in anchors)
                if owner.parent is not None:
                    work.append(owner.parent.token)  # a subagent finished: its parent turn may be done
        return moved

    def checkpoint_offsets(self, commit: Commit, moved: set[str], reader: Reader) -> None:
        """Offsets of the files read since the last commit, or whose blocking owner just finished."""
        for log_ in reader.logs:
            if log_.tailer.offset != log_.saved_offset:
                log_.saved_offset = log_.tailer.offset
                commit.offsets[log_.path] = (log_.tailer.identity, log_.saved_offset, log_.saved_offset,
                                             log_.tailer.checkpoint_marker())
        paths, reader.dirty = reader.dirty | moved, set()
        for path in paths:
            st = reader.files.get(path)
            if st is None:
                continue
            blocking = self._owners_by_path.get(path)
            safe = min(min(blocking.values()) if blocking else 1 << 62, st.tailer.offset)
            if safe != st.saved_offset or st.read_to != st.saved_read_to:
                st.saved_offset, st.saved_read_to = safe, st.read_to
                commit.offsets[path] = (st.tailer.identity, safe, st.read_to, st.tailer.checkpoint_marker())

    def anchor_replays(self, commit: Commit, replays: list[tuple[str, int, str]]) -> None:
        """A copy in another file holds the calls and prompts it replays too: they are kept while
        either file is there. Only for what is committed already: a digest of an owner still open
        (a file read again from its start) is committed with that owner, and a row for it now
        would make a restart take the owner's own lines for a copy."""
        self._replays.extend(replays)
        if not self._replays:
            return
        open_ = self.open_digests()
        waiting = []
        for kind, digest, path in self._replays:
            if digest in open_:
                waiting.append((kind, digest, path))
            else:
                (commit.calls if kind == "call" else commit.prompts).append((digest, anchor_of(path)))
        self._replays = waiting

    def open_digests(self) -> set[int]:
        """Digests of the calls and prompts of owners not done yet (not committed)."""
        with self.lock:
            owners = list(self.owners.values())
        out = {digest64(k) for o in owners for k in o.call_keys}
        out.update(digest64(o.prompt_uuid) for o in owners if isinstance(o, Turn) and o.prompt_uuid)
        return out

    def write(self, commit: Commit) -> None:
        """Commit, with the "read" counters if anything else is written (they go with the offsets)
        and the "own" counters whenever they changed (with nothing else if need be): a failure
        counted after the last checkpoint is kept by the next commit, and by a stop."""
        if self.state is None:
            return
        if self.metrics is not None:
            if not commit.empty():
                commit.counters.update(self.metrics.snapshot("read"))
            own = self.metrics.changes("own")
            if own != self._saved["own"] or not commit.empty():
                self._saved["own"] = own  # read before the snapshot: a change in between is written again
                commit.counters.update(self.metrics.snapshot("own"))
        if not commit.empty():
            self.state.commit(commit)


def _done(owner: Owner, depth: int = 0) -> bool:
    if owner.pending > 0 or owner.unsent or owner.waiting or depth > 16:
        return False
    if not owner.closed and owner.first_offsets:
        return False
    return all(_done(child, depth + 1) for child in owner.children)
