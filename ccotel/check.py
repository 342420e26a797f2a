"""``ccotel check <session-id|path>``: should an orchestrator ``--resume`` this session?

Reads one main transcript (only under the roots) and says whether it has an assistant record
(a ghost session has none), whether it ends in an orphaned tool_use (the process died during
a tool call), whether it is stalled (owes a reply and silent past the stall timeout), and
whether its Claude Code process still runs. Exit status 0: fine to resume; 1: do not resume;
2: refused or not found.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import asdict, dataclass, field

from . import rules
from .assemble import Assembler, Timeouts
from .discover import classify, within_root
from .parse import parse_line
from .procs import any_alive, read_session_pids
from .records import FileKind
from .tail import Tailer

__all__ = ["Health", "check_session", "find_transcript", "CheckError"]

_SESSION_ID = re.compile(r"^[0-9A-Za-z][0-9A-Za-z_-]{7,63}$")


class CheckError(Exception):
    """The argument was refused or names no transcript."""


@dataclass
class Health:
    session_id: str
    path: str
    lines: int = 0
    has_assistant_record: bool = False
    ends_in_orphaned_tool_use: bool = False
    orphaned_tool_use_ids: list[str] = field(default_factory=list)
    stalled: bool = False
    process: str = "unknown"  # running | gone | unknown
    idle_seconds: float = 0.0
    bad_lines: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def resumable(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "resumable": self.resumable}


def find_transcript(arg: str, roots: tuple[str, ...]) -> str:
    """A session id or a transcript path -> the path of a main transcript inside a root."""
    if os.sep in arg or arg.endswith(".jsonl"):
        path = os.path.abspath(arg)
        for root in roots:
            if within_root(root, path):
                tf = classify(root, path)
                if tf is not None and tf.kind is FileKind.MAIN and os.path.isfile(path):
                    return path
        raise CheckError(f"{arg}: not a main session transcript under {', '.join(roots)}")
    if not _SESSION_ID.match(arg):
        raise CheckError(f"{arg!r} is not a session id")
    for root in roots:
        projects = os.path.join(root, "projects")
        try:
            dirs = sorted(os.listdir(projects))
        except OSError:
            continue
        for d in dirs:
            path = os.path.join(projects, d, f"{arg}.jsonl")
            if os.path.isfile(path) and within_root(root, path):
                return path
    raise CheckError(f"no transcript for session {arg} under {', '.join(roots)}")


def check_session(arg: str, roots: tuple[str, ...], stall_s: float = 180.0, now_ns: int | None = None) -> Health:
    path = find_transcript(arg, roots)
    root = next(r for r in roots if within_root(r, path))
    tf = classify(root, path)
    assert tf is not None and tf.session_id is not None
    health = Health(session_id=tf.session_id, path=path)
    timeouts = Timeouts(stall_ns=int(stall_s * 1e9))
    asm = Assembler(timeouts)
    res = Tailer(path).read(accept_unterminated=True)
    for line in res.lines:
        parsed = parse_line(line.data, line.offset)
        health.bad_lines += len(parsed.errors)
        for entry in parsed.entries:
            health.lines += 1
            if rules.is_assistant_record(entry):
                health.has_assistant_record = True
            asm.add(entry, tf)
    now = now_ns if now_ns is not None else time.time_ns()
    pids = read_session_pids((root,))
    if tf.session_id in pids:
        health.process = "running" if any_alive(pids[tf.session_id]) else "gone"
    turn = asm.current_turn(tf.session_id)
    if turn is not None:
        health.idle_seconds = max(now - turn.last_ns, 0) / 1e9
        owes = bool(turn.open_tools) or turn.awaiting_model
        health.stalled = owes and health.idle_seconds >= stall_s and health.process != "running"
        if turn.open_tools and health.process != "running" and (health.process == "gone" or health.stalled):
            health.ends_in_orphaned_tool_use = True
            health.orphaned_tool_use_ids = sorted(turn.open_tools)
    if not health.has_assistant_record:
        health.problems.append("no assistant record: a ghost session, its transcript has nothing to resume")
    if health.ends_in_orphaned_tool_use:
        health.problems.append("ends in an orphaned tool_use: the process died during a tool call")
    elif health.stalled:
        health.problems.append("stalled: a reply is owed and the file has been silent past the stall timeout")
    return health


def render(h: Health) -> str:
    verdict = "OK to resume" if h.resumable else "do NOT resume"
    lines = [f"session {h.session_id}: {verdict}", f"  transcript  {h.path} ({h.lines} records, {h.bad_lines} bad)",
             f"  assistant   {'yes' if h.has_assistant_record else 'none'}",
             f"  process     {h.process}", f"  idle        {h.idle_seconds:.0f}s"]
    if h.orphaned_tool_use_ids:
        lines.append(f"  orphaned    {', '.join(h.orphaned_tool_use_ids)}")
    lines += [f"  problem     {p}" for p in h.problems]
    return "\n".join(lines)
