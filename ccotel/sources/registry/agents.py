"""What the registry knows of one agent: its entry and front matter as last read, its process and
session as last seen, and where it is on the way to being judged, counted and sent. What every
part of the registry asks of an agent (its type, depth, parent, times) is answered here, once.
"""

from __future__ import annotations

from dataclasses import dataclass

from ccotel.sources.registry.files import AgentEntry, FrontMatter

__all__ = ["SPAWN_SLACK_NS", "ENTRY_WAIT_NS", "Agent", "Outcome", "SessionLink", "agent_depth", "agent_parent",
           "agent_times", "agent_type", "settled", "waits_for_entry"]

SPAWN_SLACK_NS = 60_000_000_000  # a process started this long after the agent's Started is another one
# An agent whose .md is there and whose .active-pids.json entry is not yet waits this long for it
# before it is judged: its type (a label of counters counted once) comes from the entry alone.
ENTRY_WAIT_NS = 60_000_000_000


class Outcome:
    DONE = "done"
    FAILED = "failed"
    KILLED = "killed"


@dataclass(frozen=True)
class SessionLink:
    """The Claude Code session an agent ran, and how it was found."""

    session_id: str
    how: str  # process (its live sessions/<pid>.json) | left_behind (a killed process's file)
    root: str


@dataclass
class Agent:
    """What is known of one agent (mutable: the follower's own bookkeeping)."""

    agent_id: str
    md_path: str
    entry: AgentEntry | None = None
    front: FrontMatter | None = None
    md_sig: tuple[int, int, int] | None = None  # (inode, size, mtime_ns) of the last read
    md_retry: bool = False  # the last read was bad: read again at the next poll
    md_mtime_ns: int = 0
    pid_start: str | None = None  # the pid's start time, as first seen running
    gone_since_ns: int | None = None  # its process was first seen gone (or another) then
    session: SessionLink | None = None
    judged: str | None = None  # the outcome, once judged
    sent: bool = False  # its span is final (delivered or dropped by the backend)
    in_flight: bool = False
    resend_at_ns: int = 0
    unlisted_since_ns: int | None = None  # first judged over while it had no entry (see ENTRY_WAIT_NS)


def waits_for_entry(agent: Agent, now: int) -> bool:
    """Over, but not listed in .active-pids.json yet: its type would be a guess (``agent``), and the
    counters it goes to cannot move it later, so it waits for its entry, at most ENTRY_WAIT_NS."""
    if agent.entry is not None:
        return False
    if agent.unlisted_since_ns is None:
        agent.unlisted_since_ns = now
    return now - agent.unlisted_since_ns < ENTRY_WAIT_NS


def settled(agent: Agent) -> bool:
    """Judged and its span final: nothing more to do for it."""
    return agent.judged is not None and agent.sent


def agent_times(agent: Agent, now: int) -> tuple[int, int]:
    """Started to Ended; a killed agent (no Ended) ends at its output's last change."""
    front = agent.front
    started = front.started_ns if front is not None else None
    ended = front.ended_ns if front is not None else None
    start = started if started is not None else agent.md_mtime_ns or now
    end = ended if ended is not None else min(max(agent.md_mtime_ns, start), now)
    return start, end


def agent_type(agent: Agent) -> str:
    return (agent.entry.agent_type if agent.entry is not None else None) or "agent"


def agent_depth(agent: Agent) -> int | None:
    if agent.entry is not None and agent.entry.depth is not None:
        return agent.entry.depth
    return agent.front.depth if agent.front is not None else None


def agent_parent(agent: Agent) -> str | None:
    if agent.entry is not None and agent.entry.parent_id is not None:
        return agent.entry.parent_id
    return agent.front.parent if agent.front is not None else None
