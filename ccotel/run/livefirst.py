"""History never delays the present: ``ccotel run`` follows the live sessions while it catches up.

A first start on a large history reads it for a while (minutes for several GB). The sessions
written shortly before the start (``RECENT_S``) are read first, with the session groups that may
share API calls with them (shard.py: the same order of copies, so the same spans), and from then on
whatever the watcher reports in a file this process owns is read at once: between two sessions of
the one-process catch-up (``Pipeline.backfill``'s ``between``), and while catch-up workers read the
rest (catchup.py). Nothing is read by two readers: a session not read yet, or in a worker's shard,
is *held* (its reports are kept back); once it is read (the worker done, the caller's checkpoint
taken over) it is followed like the others: a worker's part as soon as it is done, so a session that
becomes live while held waits for its part, and a long live session too large to be read here is
its worker's first part.
A session read to its end before a restart is held by no one unless its shard has something else to
read: a recent one's shard is read here, an old one's goes to a worker.

Counting stays as docs/durability.md says: on a first start the history (every byte on disk at the
start) goes to traces only; an owner whose first line was written since counts
(``Delivery.started_sizes``), whoever reads it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ccotel.read.discover import Checkpoint, size_of, unread_bytes
from ccotel.read.layout import projects_dir
from ccotel.read.shard import Group, head_keys, plan_shards
from ccotel.records import FileKind, TranscriptFile
from ccotel.run.pipeline import Pipeline

if TYPE_CHECKING:
    from ccotel.read.watch import Watcher  # watchdog: loaded by ccotel run, which makes the watcher

__all__ = ["LiveFirst", "RECENT_S", "LIVE_MAX_BYTES"]

# A session written this long before the start is live: read first, then followed.
RECENT_S = 15 * 60
# At most this much history (or a quarter of what is to read) is read first for the live sessions:
# a history written just now (a copied config dir) is all recent, and must still be split.
LIVE_MAX_BYTES = 64 << 20

# Turns finished by time (runner.TICK_EVERY_S's job once live) are looked for at most this often.
TICK_EVERY_S = 0.25

_Key = tuple[str, str, str | None]  # (root, project, session id; None: a project's flat 2.0.x agent files)


def _key(root: str, tf: TranscriptFile) -> _Key:
    return root, tf.project, None if tf.kind is FileKind.FLAT_AGENT else tf.session_id


def _keys(group: Group) -> set[_Key]:
    return {_key(root, tf) for root, tf in group}


class LiveFirst:
    """The live sessions of one ``ccotel run`` catch-up: which are read first, which files this
    process reads as the watcher reports them, which wait (held) until their catch-up is done."""

    def __init__(self, pipeline: Pipeline, watcher: Watcher, now_s: float | None = None) -> None:
        self.pipeline = pipeline
        self.watcher = watcher
        self.since_s = (time.time() if now_s is None else now_s) - RECENT_S
        self._held: set[_Key] = set()
        self._held_flat: set[tuple[str, str]] = set()  # (root, project) of held flat agent files
        self._deferred: set[str] = set()
        # A new session file whose head is a held session's (shard.head_keys) is a copy of it (Claude
        # Code copies a session's history into a new file under a new sessionId, then goes on there):
        # read after the original, as shard.py keeps them, so its copied calls are known as such.
        self._heads: dict[tuple[str, str], _Key] = {}  # a held session's head keys
        self._waiting: dict[str, _Key] = {}  # a copy's path -> the held session it waits for
        self._done_parts: list[list[Group]] = []  # read by a worker, not taken over yet
        self._ticked = 0.0
        self._tops = {projects_dir(r) for r in pipeline.options.roots}
        if not pipeline.detectors.counting():  # a first start: what is on disk now is history
            pipeline.delivery.started_sizes = {tf.path: size_of(tf.path) for _r, tf in pipeline.discover()}

    # -- which sessions first ----------------------------------------------------

    def recent(self, group: Group) -> float:
        """The newest mtime of a group's files if written within RECENT_S of the start, else 0."""
        newest = 0.0
        for _root, tf in group:
            try:
                newest = max(newest, os.stat(tf.path).st_mtime)
            except OSError:
                continue
        return newest if newest >= self.since_s else 0.0

    def live_shards(self, groups: list[Group], shards: list[list[int]],
                    weights: list[int]) -> tuple[list[list[int]], list[list[int]]]:
        """Of the shards (indices into ``groups``, each with something to read) holding a recent
        session, the most recent first: those read here first, within LIVE_MAX_BYTES (or a quarter
        of the total to read), and the others (a long session written just now: a worker reads
        each first, then it is followed here, ``adopt``). A recent session read to its end before
        a restart counts too: its shard's other sessions may share calls with it, so whoever
        follows it reads them."""
        cap = min(LIVE_MAX_BYTES, sum(weights) // 4)
        ranked = []
        for members in shards:
            newest = max((self.recent(groups[i]) for i in members), default=0.0)
            if newest:
                ranked.append((-newest, members))
        chosen: list[list[int]] = []
        others: list[list[int]] = []
        taken = 0
        for _neg, members in sorted(ranked, key=lambda r: r[0]):
            size = sum(weights[i] for i in members)
            if taken + size <= cap or not chosen and size <= LIVE_MAX_BYTES:
                chosen.append(members)
                taken += size
            else:
                others.append(members)
        return chosen, others

    def order(self, groups: list[Group], checkpoints: Mapping[str, Checkpoint]) -> list[Group]:
        """The one-process catch-up's order: the live sessions (with the groups that may share
        calls with them, in their own order) first, then the rest as it was. Every group is held
        until ``between`` says it was read."""
        weights = [sum(unread_bytes(tf.path, checkpoints) for _r, tf in g) for g in groups]
        unread = [i for i, w in enumerate(weights) if w]
        first: list[int] = []
        sub = [groups[i] for i in unread]
        heads: dict[tuple[str, str], int] = {}
        shards = [[unread[j] for j in members] for members in plan_shards(sub, [weights[i] for i in unread], heads)]
        self.note_heads(sub, heads)
        if any(self.recent(groups[i]) for i in unread):
            first = sorted(i for members in self.live_shards(groups, shards, weights)[0] for i in members)
        chosen = set(first)
        ordered = [groups[i] for i in first] + [g for i, g in enumerate(groups) if i not in chosen]
        self.hold(ordered)
        return ordered

    # -- who reads what ----------------------------------------------------------

    def hold(self, groups: Iterable[Group]) -> None:
        """These sessions are read by a catch-up (this process's, later, or a worker's): their
        files' reports wait until ``release``."""
        for group in groups:
            for root, tf in group:
                if tf.kind is FileKind.FLAT_AGENT:
                    self._held_flat.add((root, tf.project))
                self._held.add(_key(root, tf))

    def note_heads(self, groups: list[Group], heads: Mapping[tuple[str, str], int]) -> None:
        """``heads``: plan_shards' head keys of these groups (by index), to know their copies by."""
        for key, i in heads.items():
            main = next(((root, tf) for root, tf in groups[i] if tf.kind is FileKind.MAIN), None)
            if key[0] != "unknown" and main is not None:
                self._heads[key] = _key(*main)

    def release(self, groups: Iterable[Group]) -> None:
        """These sessions are read (this process follows them from here) and reports kept back
        for them are read now."""
        for group in groups:
            self._held -= _keys(group)
            self._held_flat -= {(root, tf.project) for root, tf in group if tf.kind is FileKind.FLAT_AGENT}
        kept, self._deferred = self._deferred, set()
        self._take(kept)

    def adopt(self, groups: list[Group]) -> None:
        """A catch-up worker has read these sessions (its part is done, others may still run). If
        one of them is live (written since shortly before the start), this process takes over what
        the worker wrote of them and follows them from here; else they wait for the take-over of
        every part at once, after the workers (what it holds is then not held beside them), unless
        a copy of one of them comes first (``_adopt_awaited``)."""
        awaited = set(self._waiting.values())
        if not any(self.recent(group) or _keys(group) & awaited for group in groups):
            self._done_parts.append(groups)  # taken over at once if a copy of one of them comes
            return
        self._take_over(groups)

    def _adopt_awaited(self) -> None:
        """The parts a worker has read that hold a session a copy waits for: taken over now."""
        awaited = set(self._waiting.values())
        parts = [p for p in self._done_parts if any(_keys(g) & awaited for g in p)]
        self._done_parts = [p for p in self._done_parts if all(p is not q for q in parts)]
        for part in parts:  # (release reads what waited, which may come here again: these are gone)
            self._take_over(part)

    def _take_over(self, part: list[Group]) -> None:
        """What a worker wrote of these sessions, taken over; followed from here."""
        self.pipeline.adopt_state({tf.path for group in part for _r, tf in group})
        self.release(part)

    def between(self, group: Group) -> None:
        """Pipeline.backfill's hook: a session was read; read what the watcher reported."""
        self.release([group])
        self.poll(0.0)

    def poll(self, wait_s: float) -> None:
        """Read what changed in the files this process owns (waiting up to ``wait_s`` for a report),
        and close the turns time has finished (a final answer after its quiet)."""
        self._take(self.watcher.wait(wait_s))
        now = time.monotonic()
        if now - self._ticked >= TICK_EVERY_S:
            self._ticked = now
            self.pipeline.tick_turns()

    def end(self) -> None:
        """The catch-up is over: what was kept back goes to the live loop (runner.follow)."""
        self._held.clear()
        self._held_flat.clear()
        self._heads.clear()
        self._waiting.clear()
        self._done_parts.clear()
        for path in self._deferred:
            self.watcher.mark(path)
        self._deferred.clear()

    def _take(self, paths: Iterable[str]) -> None:
        ready = []
        for path in paths:
            if self._mine(path):
                ready.append(path)
            else:
                self._deferred.add(path)
        if ready:
            self.pipeline.poll(sorted(ready))
        if self._waiting and self._done_parts:
            self._adopt_awaited()

    def _mine(self, path: str) -> bool:
        """A transcript this process may read now: followed already, or new and of no held session.
        Directories, meta.json files and deleted paths wait for the live loop (which forgets and
        rescans); a root's top directory (the watcher names it at its start) would be all of them."""
        if path in self.pipeline.files:
            return os.path.exists(path)
        if not path.endswith(".jsonl") or path in self._tops or not os.path.isfile(path):
            return False
        found = self.pipeline.reader.classify(path)
        if found is None:
            return False
        root, tf = found
        if tf.kind is FileKind.FLAT_AGENT:
            return (root, tf.project) not in self._held_flat
        if _key(root, tf) in self._held or (root, tf.project, None) in self._held:
            return False
        if tf.kind is FileKind.MAIN and self._heads:
            heads = head_keys(path)
            if heads == [("unknown", "")]:
                return False  # nothing to tell a copy by yet (a file just created): its next lines say
            original = self._copied(heads)
            if original is not None:
                self._waiting[path] = original
                return False
        self._waiting.pop(path, None)
        return True

    def _copied(self, heads: list[tuple[str, str]]) -> _Key | None:
        """The held session a new session file with these head keys is a copy of, if any."""
        for key in heads:
            original = self._heads.get(key)
            if original is not None and original in self._held:
                return original
        return None
