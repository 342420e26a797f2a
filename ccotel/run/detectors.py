"""Detectors: one-off events no span stands for, counted once across restarts (state marks).

A ghost session: a main session file with prompts and no assistant record of any kind, idle
past the stall timeout while no Claude Code process of it runs (rules.is_assistant_record is
the one ghost rule, shared with ``ccotel check``). A missing subagent transcript: a subagent
named by its parent (toolUseResult.agentId or meta.json) whose transcript never appeared.
Events are counted only once ccotel has caught up (``counting``): history read on a first start
goes to traces only, and the subagents and sessions it left without a transcript are marked at the
first catch-up, uncounted.

An absent transcript is classified by the same rule ``ccotel check`` reports with
(``rules.absent_reason`` over ``evidence.py``): a followed main transcript that is deleted, and a
session known on disk (sessions/<pid>.json, history.jsonl, transcript remnants) with no transcript,
once no process of it runs and its evidence is older than the stall timeout. Only a real loss counts
as a missing transcript; a retention sweep (``transcript_swept``), a move to another project dir
(``transcript_relocated``) and a run without persistence (``not_persisted``) are reset reasons of
their own.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

from ccotel.assemble.assembler import Assembler
from ccotel.metrics import events
from ccotel.metrics.counters import Metrics
from ccotel.read import evidence
from ccotel.read.discover import OutsideRoot
from ccotel.read.procs import Proc, any_alive, read_session_pids
from ccotel.records import BadInput, FileKind
from ccotel.rules import transcript as rules
from ccotel.run.reader import FileState
from ccotel.store.state import PERMANENT, State, anchor_of

__all__ = ["Detectors", "CAUGHT_UP", "HISTORY_OWNER"]

CAUGHT_UP = "caught_up"  # the mark of the first catch-up: from then on, and after any restart, events count
HISTORY_OWNER = "history:"  # + an owner's token: read before CAUGHT_UP, not final when it was committed
_SCAN_NS = 60 * 10 ** 9  # at most one scan of the evidence a minute (it lists every project dir)


class Detectors:
    def __init__(self, roots: tuple[str, ...], assembler: Assembler, clock: Callable[[], int],
                 metrics: Metrics | None, state: State | None, stall_ns: int) -> None:
        self.roots = roots
        self.assembler = assembler
        self.clock = clock
        self.metrics = metrics
        self.stall_ns = stall_ns
        self.caught_up = False
        self.state = state
        self.marks: set[str] = state.marks() if state is not None else set()
        self._new_marks: list[tuple[str, int]] = []  # (mark, anchor): committed with the next checkpoint
        self._ghost_candidates: set[str] = set()  # main files with prompts and no assistant record yet
        self._agent_files: set[tuple[str | None, str]] = set()  # (session, agent id) with a transcript
        self._pids: dict[str, tuple[Proc, ...]] = {}
        self._pids_read_ns = 0
        self._mtimes: dict[str, float] = {}  # main transcript -> mtime when last read (the sweep goes by it)
        self._gone: list[tuple[str, str, float | None]] = []  # deleted main transcripts: (session, path, mtime)
        self._histories: dict[str, evidence.HistoryIndex] = {}
        # side files linked out of the root: counted as the reader counts transcripts that are
        self._outside = OutsideRoot(self._count_bad_input)
        self._scanned_ns: int | None = None
        self._first_catch_up = False  # this process did the very first catch-up: what it read was history

    def counting(self) -> bool:
        """Events are counted once ccotel has caught up, or from the start after a restart."""
        return self.caught_up or CAUGHT_UP in self.marks

    def catch_up_done(self, history_owners: Iterable[tuple[str, int]] = (),
                      files: dict[str, FileState] | None = None) -> None:
        """The first catch-up is complete. ``history_owners``: (token, anchor of its file) of the
        owners read as history whose spans are not all final yet. CAUGHT_UP is committed with the
        next checkpoint, and their offsets later: a restart in between reads them again after the
        mark, so each is marked as history too (HISTORY_OWNER), in the same transaction as
        CAUGHT_UP; the mark goes when its file is forgotten. So are the subagents history named
        whose transcript is not there (``files``: the files followed, for their marks' anchors)."""
        if not self.caught_up and CAUGHT_UP not in self.marks:
            for token, anchor in history_owners:
                self._mark(HISTORY_OWNER + token, anchor)
            self._first_catch_up = True
            self._history_agents(files or {}, self.assembler.unseen_agents())
            # Sessions already without their transcript before this first start are history too:
            # marked absent now, uncounted (those still fresh or running are judged later, counted).
            self._scanned_ns = self.clock()
            self._judge_known(self._scanned_ns, files or {}, count=False)
        self.caught_up = True
        self._mark(CAUGHT_UP, PERMANENT)

    def _history_agents(self, files: dict[str, FileState], agents: Iterable[tuple[str, str, int]]) -> None:
        """Subagents named by history read on the very first start, their transcript not seen: traces
        only, so each gets its missing_agent mark now, uncounted (detect then finds it marked, and so
        does a restart, the mark being committed with CAUGHT_UP)."""
        for sid, agent_id, _named in agents:
            self._mark(f"missing_agent:{sid}:{agent_id}", _anchor_of_session(files, sid))

    def history_owners(self) -> set[str]:
        """Owners marked as history at the first catch-up (never counted, whenever read again)."""
        return {m[len(HISTORY_OWNER):] for m in self.marks if m.startswith(HISTORY_OWNER)}

    def take_marks(self) -> list[tuple[str, int]]:
        marks, self._new_marks = self._new_marks, []
        return marks

    def _mark(self, mark: str, anchor: int) -> bool:
        """Record a one-off event; True if this process counts it (a fleet's shared state: the
        first host to record it)."""
        if mark in self.marks:
            return False
        self.marks.add(mark)
        self._new_marks.append((mark, anchor))
        return self.state is None or self.state.claim_mark(mark, anchor)

    # -- what the reader saw -----------------------------------------------------

    def tracked(self, st: FileState) -> None:
        """A file is followed: a subagent's transcript is there (a meta.json may come first)."""
        if st.tf.agent_id is not None and os.path.exists(st.tf.path):
            self._agent_files.add((st.tf.session_id, st.tf.agent_id))

    def read(self, st: FileState) -> None:
        """A file was read: a main file with prompts and no assistant record may be a ghost."""
        tf = st.tf
        if tf.kind is FileKind.MAIN and st.has_user and not st.has_assistant and f"ghost:{tf.path}" not in self.marks:
            self._ghost_candidates.add(tf.path)
        if tf.kind is FileKind.MAIN and st.mtime_ns:
            self._mtimes[tf.path] = st.mtime_ns / 1e9  # from the read's own fstat: no stat more

    def forget(self, states: Iterable[FileState], marks: set[str]) -> None:
        """Files deleted; ``marks`` no file on disk holds any more."""
        for st in states:
            self._ghost_candidates.discard(st.tf.path)
            # A file that never held a line (nor part of one) is no transcript: its deletion loses no
            # session, so it is not judged (the session's other evidence still is, by _judge_known).
            held = st.read_to > 0 or st.partial_since_ns is not None
            if st.tf.kind is FileKind.MAIN and held and st.tf.session_id and \
                    f"absent:{st.tf.session_id}" not in self.marks:
                self._gone.append((st.tf.session_id, st.tf.path, self._mtimes.pop(st.tf.path, None)))
            if st.tf.agent_id is not None:
                self._agent_files.discard((st.tf.session_id, st.tf.agent_id))
        self.marks -= marks

    def detector_state(self, files: dict[str, FileState]) -> tuple[list[str], list[tuple[str, str, int]]]:
        """What the detectors still wait on: main files with prompts and no response yet, and
        named subagents whose transcript had no line (a catch-up worker hands them over)."""
        ghosts = [p for p in self._ghost_candidates if p in files and not files[p].has_assistant]
        return ghosts, self.assembler.unseen_agents()

    def adopt(self, files: dict[str, FileState], ghosts: list[str], agents: list[tuple[str, str, int]]) -> None:
        """Watch what catch-up workers read but, running no detectors, could not judge."""
        for path in ghosts:
            st = files.get(path)
            if st is not None and not st.has_assistant:
                st.has_user = True
                self._ghost_candidates.add(path)
        if self._first_catch_up:  # catch-up workers' share of the first catch-up: history too
            self._history_agents(files, agents)
        self.assembler.expect_agents(agents)

    # -- judging -----------------------------------------------------------------

    def alive(self, session_id: str) -> bool | None:
        """Is the Claude Code process writing this session still running? (sessions/<pid>.json)"""
        now = self.clock()
        if now - self._pids_read_ns > 1_000_000_000:
            self._pids_read_ns = now
            self._pids = read_session_pids(self.roots, self._outside)
        found = self._pids.get(session_id)
        if found is None:
            return None
        if any_alive(found):
            return True
        # Dead per a cached read: a resumed run may have replaced the file since. Act on a fresh one.
        self._pids = read_session_pids(self.roots, self._outside)
        self._pids_read_ns = now
        found = self._pids.get(session_id)
        return None if found is None else any_alive(found)

    def detect(self, now: int, files: dict[str, FileState]) -> None:
        for sid, agent_id in self.assembler.missing_agents(now, self.stall_ns):
            if (sid, agent_id) in self._agent_files or (None, agent_id) in self._agent_files:
                continue  # its transcript is there (its lines were read before this session state)
            if self._mark(f"missing_agent:{sid}:{agent_id}", _anchor_of_session(files, sid)):
                self._count(events.missing_transcript, "subagent")
        for path in list(self._ghost_candidates):
            st = files.get(path)
            if st is None or st.has_assistant:
                self._ghost_candidates.discard(path)
                continue
            if f"ghost:{path}" in self.marks or now - st.changed_ns < self.stall_ns:
                continue
            if self.alive(st.tf.session_id or "") is True:
                continue
            self._ghost_candidates.discard(path)
            if self._mark(f"ghost:{path}", anchor_of(path)):
                self._count_absence(rules.Absence.MISSING)
        self._judge_gone(now, files)
        if self._scanned_ns is None or now - self._scanned_ns >= min(self.stall_ns, _SCAN_NS):
            self._scanned_ns = now
            self._judge_known(now, files)

    def _retention(self) -> int:
        return min((evidence.retention_of(r, self._outside) for r in self.roots), default=rules.RETENTION_DAYS)

    def _judge_gone(self, now: int, files: dict[str, FileState]) -> None:
        """Followed main transcripts that were deleted: swept, relocated or lost (once each)."""
        gone, self._gone = self._gone, []
        if not gone:
            return
        followed = {st.tf.session_id for st in files.values() if st.tf.kind is FileKind.MAIN}  # once, not per file
        for sid, path, mtime in gone:
            if os.path.exists(path):
                continue
            # One mark per session whose transcript is absent, shared with _judge_known: the deletion and
            # the session the config dir still knows of (sessions/<pid>.json, history.jsonl) are one event.
            # No file holds it any more: PERMANENT, so state grows with the sessions Claude Code keeps
            # naming (its history.jsonl is never swept), not with what ccotel read.
            if not self._mark(f"absent:{sid}", PERMANENT):
                continue
            elsewhere = sid in followed or bool(evidence.transcripts_of(self.roots, sid))
            self._count_absence(rules.absent_reason(elsewhere=elsewhere, last_seen_s=mtime, now_s=now / 1e9,
                                                    retention=self._retention(), had_transcript=True))

    def _judge_known(self, now: int, files: dict[str, FileState], count: bool = True) -> None:
        """Sessions known on disk with no transcript: counted once their processes are gone and their
        evidence is older than the stall timeout (a live or fresh session may still write one).
        ``count=False``: marked only (history of the very first start)."""
        followed = {st.tf.session_id for st in files.values() if st.tf.kind is FileKind.MAIN}
        for sid, ev in evidence.known_sessions(self.roots, self._histories, self._outside).items():
            if sid in followed or f"absent:{sid}" in self.marks:
                continue
            if ev.last_seen_s is not None and now - ev.last_seen_s * 1e9 < self.stall_ns:
                continue
            if ev.pids and any_alive(tuple(ev.pids)):
                continue
            if evidence.transcripts_of(self.roots, sid):
                continue
            if self._mark(f"absent:{sid}", PERMANENT) and count:
                self._count_absence(rules.absent_reason(elsewhere=False, last_seen_s=ev.last_seen_s, now_s=now / 1e9,
                                                        retention=self._retention(), had_transcript=ev.had_transcript))

    def _count_absence(self, reason: rules.Absence) -> None:
        """A lost transcript is a missing transcript; what is legitimately absent has its own reason."""
        if reason is rules.Absence.MISSING:
            self._count(events.missing_transcript, "session")
        self._count(events.session_reset, reason.value, "transcript")

    def _count_bad_input(self, reason: BadInput) -> None:
        if self.metrics is not None:
            events.parse_error(self.metrics, reason)

    def _count(self, event: Callable[..., None], *labels: str) -> None:
        if self.metrics is not None and self.counting():
            event(self.metrics, *labels)


def _anchor_of_session(files: dict[str, FileState], session_id: str) -> int:
    """A session's mark goes with its main file."""
    for path, st in files.items():
        if st.tf.session_id == session_id and st.tf.kind is FileKind.MAIN:
            return anchor_of(path)
    return PERMANENT
