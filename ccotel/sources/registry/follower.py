"""The follower of one registry directory (``Registry``), polled by the run loop: it reads what
changed (files.py), judges the agents that are over (liveness.py), counts them once across
restarts and hands out their spans until the backend has them (telemetry.py); and ``ccotel run``'s
options for it. What the registry is: the package's docstring.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from ccotel.read.discover import OutsideRoot
from ccotel.read.regular import open_regular
from ccotel.records import SpanRecord
from ccotel.sources.registry.agents import Agent, Outcome, agent_times, settled, waits_for_entry
from ccotel.sources.registry.files import (
    ACTIVE_PIDS,
    HEAD_BYTES,
    JSON_BYTES,
    RESPONSES,
    AgentEntry,
    dir_sig,
    file_sig,
    parse_active_pids,
    parse_front_matter,
)
from ccotel.sources.registry.liveness import check_processes, outcome_of
from ccotel.sources.registry.telemetry import BAD_INPUT, Counter, count, span
from ccotel.store.state import anchor_of

__all__ = ["Registry"]

log = logging.getLogger("ccotel.registry")

_CHECK_EVERY_NS = 1_000_000_000  # processes and sessions files are looked at once a second at most
_RESEND_AFTER_NS = 5_000_000_000  # spans the trace queue refused are offered again after this long


class Registry:
    """Follows one registry directory; ``poll`` is called every tick of the run loop.

    ``marks``: the state's marks (``State.marks()``); ``take_commit`` returns the marks to commit
    with the next checkpoint (in the same transaction as the counters: that is what makes "once"
    hold across restarts) and the ``.md`` paths that are gone (``Commit.forget_files``: their
    marks go with them). ``acknowledge`` (any thread) is told of spans the backend took;
    ``unsent`` of spans the trace queue refused."""

    def __init__(self, directory: str, roots: tuple[str, ...], metrics: Counter | None, marks: set[str],
                 clock: Callable[[], int] = time.time_ns, kill_grace_ns: int = 5_000_000_000) -> None:
        self.directory = os.path.abspath(directory)
        self.roots = roots
        self.metrics = metrics
        self.clock = clock
        self.kill_grace_ns = kill_grace_ns
        self.pids_path = os.path.join(self.directory, ACTIVE_PIDS)
        self.responses = os.path.join(self.directory, RESPONSES)
        self._seen_mark = f"registry:seen:{self.directory}"
        self._marks = {m for m in marks if m.startswith("registry:")}
        self.first_sighting = self._seen_mark not in self._marks
        # A registry never seen before: what was over before now is history (traced, not counted).
        self._watch_start_ns: int | None = clock() if self.first_sighting else None
        self._first_check_ns: int | None = None
        self._outside = OutsideRoot()  # sessions/<pid>.json linked out of a root: said once (the pipeline counts them)
        self.entries: dict[str, AgentEntry] = {}
        self.agents: dict[str, Agent] = {}
        self._pids_sig: tuple[int, int, int] | None = None
        self._pids_retry = False
        self._dir_sig: tuple[int, int] | None = None
        self._relist = False  # list the directory once more after a change (see _scan_responses)
        self._present: set[str] = set()  # agent ids with an .md file, as last listed
        self._new_marks: list[tuple[str, int]] = []
        self._gone: list[str] = []
        self._in_flight: dict[int, str] = {}  # span id -> agent id
        self._lock = threading.RLock()  # acknowledge runs on the export thread (and marks)
        self._checked_ns = 0
        self._forget_marks_of_deleted_files()

    # -- the run loop's side ---------------------------------------------------------------------

    def poll(self, now: int | None = None) -> list[SpanRecord]:
        """Read what changed, judge the agents that are over; the spans to emit."""
        now = self.clock() if now is None else now
        self._read_pids()
        self._scan_responses()
        for agent_id in self._present:
            agent = self.agents[agent_id]
            if not settled(agent):
                self._read_md(agent)
        if now - self._checked_ns >= _CHECK_EVERY_NS:
            self._checked_ns = now
            if self._first_check_ns is None:
                self._first_check_ns = now
            check_processes(self.agents.values(), self.roots, now, self._outside)
        return self._judge(now)

    def take_commit(self) -> tuple[list[tuple[str, int]], list[str]]:
        """(marks to commit, ``.md`` paths gone): for ``Commit.marks`` and ``Commit.forget_files``."""
        with self._lock:
            marks, self._new_marks = self._new_marks, []
        gone, self._gone = self._gone, []
        return marks, gone

    def acknowledge(self, spans: Sequence[SpanRecord]) -> int:
        """These spans are final (the backend took them or dropped them for good): not sent again.
        Returns how many of them were this registry's (counted with the batch's export result)."""
        own = 0
        with self._lock:
            for span in spans:
                agent_id = self._in_flight.pop(span.span_id, None)
                if agent_id is not None:
                    own += 1
                agent = self.agents.get(agent_id) if agent_id is not None else None
                if agent is None:
                    continue
                agent.in_flight, agent.sent = False, True
                self._mark(f"registry:sent:{agent.md_path}", agent.md_path)
        return own

    def unsent(self, spans: Iterable[SpanRecord], now: int | None = None) -> None:
        """The trace queue did not take these (the backend is away): offered again later."""
        now = self.clock() if now is None else now
        with self._lock:
            for span in spans:
                agent_id = self._in_flight.pop(span.span_id, None)
                agent = self.agents.get(agent_id) if agent_id is not None else None
                if agent is not None:
                    agent.in_flight, agent.resend_at_ns = False, now + _RESEND_AFTER_NS

    def gauges(self) -> dict[str, float]:
        running = sum(1 for a in list(self.agents.values())
                      if a.judged is None and a.front is not None and a.front.status == "in-progress")
        return {"ccotel_registry_agents_in_progress": float(running)}

    # -- reading ---------------------------------------------------------------------------------

    def _read_pids(self) -> None:
        sig = file_sig(self.pids_path)
        if sig is None or (sig == self._pids_sig and not self._pids_retry):
            return
        retry_same = sig == self._pids_sig
        self._pids_sig = sig
        try:
            with open_regular(self.pids_path) as f:
                data = f.read(JSON_BYTES + 1)
        except OSError:
            self._bad("unreadable", once=retry_same)
            self._pids_retry = not retry_same
            return
        entries: dict[str, AgentEntry] = {}
        errors = ["too_large"]
        if len(data) <= JSON_BYTES:
            entries, errors = parse_active_pids(data)
        whole = not entries and bool(errors)
        for reason in errors:
            self._bad(reason, once=retry_same)
        # A bad read is tried once more at the next poll (a writer mid-write, within the
        # timestamp granularity), then waits for the next change.
        self._pids_retry = whole and not retry_same
        if whole:
            return
        self.entries = entries
        for agent_id, entry in entries.items():
            self._agent(agent_id).entry = entry
        if self.first_sighting:
            self._mark(self._seen_mark, self.pids_path)

    def _scan_responses(self) -> None:
        """New .md files (the directory changed), and files that are gone. Listed once more at the
        poll after a change: a file created within the same tick of the file system's clock as the
        listing leaves the directory's mtime as it was. Only listed files are looked at: the
        registry keeps entries whose .md is long gone."""
        sig = dir_sig(self.responses)
        if sig is None or (sig == self._dir_sig and not self._relist):
            return
        self._relist = sig != self._dir_sig
        self._dir_sig = sig
        try:
            names = os.listdir(self.responses)
        except OSError:
            return
        present = {n[:-3] for n in names if n.endswith(".md") and len(n) > 3}
        self._present = present
        for agent_id in sorted(present):
            self._agent(agent_id)
        for agent_id, agent in list(self.agents.items()):
            if agent_id not in present and agent.md_sig is not None and not os.path.lexists(agent.md_path):
                self._forget(agent)

    def _agent(self, agent_id: str) -> Agent:
        agent = self.agents.get(agent_id)
        if agent is None:
            md_path = os.path.join(self.responses, os.path.basename(agent_id) + ".md")
            agent = self.agents[agent_id] = Agent(agent_id, md_path)
            if f"registry:judged:{md_path}" in self._marks:
                agent.judged = "before"  # judged in an earlier run; its span may still be owed
            agent.sent = f"registry:sent:{md_path}" in self._marks
        return agent

    def _read_md(self, agent: Agent) -> None:
        sig = file_sig(agent.md_path)
        if sig is None or (sig == agent.md_sig and not agent.md_retry):
            return
        retry_same = sig == agent.md_sig
        agent.md_sig, agent.md_mtime_ns = sig, sig[2]
        try:
            with open_regular(agent.md_path) as f:
                head = f.read(HEAD_BYTES)
        except OSError:
            self._bad("unreadable", once=retry_same)
            agent.md_retry = not retry_same
            return
        found = parse_front_matter(head)
        if isinstance(found, str):
            self._bad(found, once=retry_same)
            agent.md_retry = not retry_same
            return
        agent.md_retry = False
        if found.status not in (None, "in-progress", Outcome.DONE, Outcome.FAILED):
            self._bad("unknown_status", once=retry_same)
        if found.status is not None and found.started_ns is None:
            self._bad("bad_timestamp", once=retry_same)
        agent.front = found
        if found.status != "in-progress":
            agent.gone_since_ns = None

    # -- judging ---------------------------------------------------------------------------------

    def _judge(self, now: int) -> list[SpanRecord]:
        spans = []
        for agent in self.agents.values():
            if settled(agent) or agent.in_flight or agent.front is None:
                continue
            judged = outcome_of(agent, now, self.kill_grace_ns)
            if judged is None or waits_for_entry(agent, now):
                continue
            if agent.judged is None:
                agent.judged = judged
                self._count(agent, judged, now)
            if agent.sent or now < agent.resend_at_ns:
                continue
            record = span(agent, judged, now, self.directory, self.agents)
            with self._lock:
                agent.in_flight = True
                self._in_flight[record.span_id] = agent.agent_id
            spans.append(record)
        return spans

    def _count(self, agent: Agent, outcome: str, now: int) -> None:
        """Once per agent: the mark is committed with the counters, in one transaction."""
        if not self._mark(f"registry:judged:{agent.md_path}", agent.md_path):
            return  # counted (or seen as history) in an earlier run
        if self.metrics is None or self._history(agent, outcome):
            return  # over before ccotel watched: history, traced but not counted
        count(self.metrics, agent, outcome, now)

    def _history(self, agent: Agent, outcome: str) -> bool:
        """Over before ccotel first watched this registry: gone at the first look at the processes,
        or ended before."""
        if self._watch_start_ns is None:
            return False
        if outcome == Outcome.KILLED:
            return agent.gone_since_ns is not None and agent.gone_since_ns == self._first_check_ns
        return agent_times(agent, self._watch_start_ns)[1] < self._watch_start_ns

    # -- marks and bad input ---------------------------------------------------------------------

    def _mark(self, mark: str, anchor_path: str) -> bool:
        with self._lock:
            if mark in self._marks:
                return False
            self._marks.add(mark)
            self._new_marks.append((mark, anchor_of(anchor_path)))
            return True

    def _forget(self, agent: Agent) -> None:
        """Its .md is gone: so are its marks (the state drops them with the file)."""
        del self.agents[agent.agent_id]
        self._present.discard(agent.agent_id)
        self._gone.append(agent.md_path)
        with self._lock:
            self._marks.discard(f"registry:judged:{agent.md_path}")
            self._marks.discard(f"registry:sent:{agent.md_path}")

    def _forget_marks_of_deleted_files(self) -> None:
        """Marks of .md files deleted while ccotel did not run (only if the directory is there:
        an unmounted registry is not a deletion)."""
        if not os.path.isdir(self.responses):
            return
        prefix = os.path.join(self.responses, "")
        for mark in sorted(self._marks):
            kind, _, path = mark[len("registry:"):].partition(":")
            if kind in ("judged", "sent") and path.startswith(prefix) and not os.path.lexists(path):
                self._marks.discard(mark)
                if path not in self._gone:
                    self._gone.append(path)

    def _bad(self, reason: str, once: bool) -> None:
        """Bad input, counted once per state of the file (not at every retry)."""
        if once:
            return
        log.debug("registry %s: %s", self.directory, reason)
        if self.metrics is not None:
            self.metrics.inc(BAD_INPUT, reason)
