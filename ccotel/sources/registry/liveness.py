"""Is an agent's process still at work, and is it over: its pid still running as the same process
(the start time says so: pids are reused), the Claude Code session it runs (its live
``sessions/<pid>.json``, or the one a killed process left behind), and its outcome.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ccotel.read.discover import OutsideRoot
from ccotel.read.procs import below, pid_alive, proc_start, session_files, start_wall_ns
from ccotel.sources.registry.agents import SPAWN_SLACK_NS, Agent, Outcome, SessionLink, settled

__all__ = ["check_processes", "outcome_of"]


def check_processes(agents: Iterable[Agent], roots: tuple[str, ...], now: int, outside: OutsideRoot) -> None:
    """Processes of agents at work: still running, the same process? Their sessions, while
    the sessions files are there (a clean exit removes them)."""
    files: list[tuple[str, dict[str, Any]]] | None = None
    for agent in agents:
        entry, front = agent.entry, agent.front
        if settled(agent) or agent.in_flight or entry is None or entry.pid is None or front is None:
            continue
        if front.status != "in-progress":
            continue
        if _same_process(agent, entry.pid, front.started_ns):
            agent.gone_since_ns = None
            if agent.session is None or agent.session.how != "process":
                files = session_files(roots, outside) if files is None else files
                agent.session = _live_session(entry.pid, files) or agent.session
        elif agent.gone_since_ns is None:
            agent.gone_since_ns = now
            if agent.session is None:
                files = session_files(roots, outside) if files is None else files
                agent.session = _left_behind(agent, entry.pid, files, now)


def outcome_of(agent: Agent, now: int, kill_grace_ns: int) -> str | None:
    """done or failed as its front matter says, killed once its process has been gone for
    ``kill_grace_ns`` while its Status still says in-progress; None while it is at work."""
    front = agent.front
    assert front is not None
    if front.status in (Outcome.DONE, Outcome.FAILED):
        return front.status
    if front.status == "in-progress" and agent.gone_since_ns is not None \
            and now - agent.gone_since_ns >= kill_grace_ns:
        return Outcome.KILLED
    return None


def _same_process(agent: Agent, pid: int, started_ns: int | None) -> bool:
    if agent.pid_start is not None:
        return pid_alive(pid, agent.pid_start)  # the process first seen under this pid
    start = proc_start(pid)
    if start is None or not pid_alive(pid, start):
        return False
    wall = start_wall_ns(start)
    if started_ns is not None and wall is not None and wall > started_ns + SPAWN_SLACK_NS:
        return False  # started well after the agent: the pid was reused after its process died
    agent.pid_start = start
    return True


def _live_session(pid: int, files: list[tuple[str, dict[str, Any]]]) -> SessionLink | None:
    for root, doc in files:
        spid, start = doc["pid"], doc.get("procStart")
        if not pid_alive(spid, str(start) if start is not None else None):
            continue
        if below(spid, pid):
            return SessionLink(doc["sessionId"], "process", root)
    return None


def _left_behind(agent: Agent, pid: int, files: list[tuple[str, dict[str, Any]]], now: int) -> SessionLink | None:
    """A SIGKILLed Claude Code leaves its sessions/<pid>.json: the agent's pid, started while
    the agent ran (and, if seen running, with its start time)."""
    started = agent.front.started_ns if agent.front is not None else None
    for root, doc in files:
        if doc["pid"] != pid:
            continue
        start = doc.get("procStart")
        if agent.pid_start is not None and str(start) != agent.pid_start:
            continue
        at = doc.get("startedAt")
        at_ns = int(at) * 1_000_000 if isinstance(at, (int, float)) else None
        if started is not None and (at_ns is None or not started - SPAWN_SLACK_NS <= at_ns <= now):
            continue
        return SessionLink(doc["sessionId"], "left_behind", root)
    return None
