"""``ccotel check <session-id|path>``: should an orchestrator ``--resume`` this session?

Reads one main transcript (only under the roots) and answers with findings, each with a stable
code (``rules.FindingCode``), whether it blocks a resume, a message and its evidence: no assistant
record (after probes at 0, 50 and 150 ms: the CLI may not have flushed its first answer yet), a
trailing orphaned tool_use on a version whose resume does not repair it, a stall, a dangling
parentUuid or compact ``logicalParentUuid``, a first line that is not a message, a cwd or worktree
gone, a live process (resuming would make a second writer) or two, and, for a session known on disk
whose transcript is not there, why (swept, never persisted, missing). The rules are rules/transcript.py's,
the same the detectors count with. Exit status 0: fine to resume; 1: do not resume; 2: refused.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import orjson

from ccotel.assemble.assembler import Assembler
from ccotel.assemble.closing import STALL_TIMEOUT_NS, Timeouts
from ccotel.commands.options import add_stall_timeout
from ccotel.read import evidence
from ccotel.read.discover import classify, within_root
from ccotel.read.layout import SessionIdError, UnknownSession, default_roots, resolve_session_id
from ccotel.read.parse import parse_line
from ccotel.read.procs import pid_alive, read_session_pids
from ccotel.read.tail import Tailer
from ccotel.records import Entry, FileKind, TranscriptFile
from ccotel.rules import transcript as rules
from ccotel.rules.transcript import Finding, FindingCode

__all__ = ["Health", "CheckError", "PROBES_S", "add_arguments", "check_session", "find_transcript", "render", "run"]

# When the file has no assistant record yet, look again: the CLI writes its first answer a moment
# after the prompt line, and an orchestrator asks right after its process exits (the flush race).
PROBES_S = (0.0, 0.05, 0.15)


class CheckError(Exception):
    """The argument was refused or names no transcript."""


class _NotFound(CheckError):
    """A well-formed id with no transcript under the roots (the evidence may still know it)."""


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
    version: str | None = None
    probes: int = 0
    findings: list[Finding] = field(default_factory=list)

    @property
    def resumable(self) -> bool:
        return not any(f.blocks for f in self.findings)

    def add(self, finding: Finding) -> None:
        self.findings.append(finding)
        if finding.blocks:
            self.problems.append(finding.message)

    def as_dict(self) -> dict[str, object]:
        doc = asdict(self)
        doc["findings"] = [f.as_dict() for f in self.findings]
        return {**doc, "resumable": self.resumable}


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
    try:
        session_id = resolve_session_id(arg, roots)  # the whole id, or a unique prefix of 8 characters or more
    except UnknownSession as exc:
        raise _NotFound(str(exc)) from None  # the evidence may still know a whole id (check_session)
    except SessionIdError as exc:  # malformed, or ambiguous: which session was meant is not ours to guess
        raise CheckError(str(exc)) from None
    for root in roots:
        for path in evidence.transcripts_of((root,), session_id):
            if within_root(root, path):
                return path
    raise _NotFound(f"no transcript for session {session_id} under {', '.join(roots)}")


@dataclass
class _Read:
    """What check reads of a transcript, kept across probes."""

    tf: TranscriptFile
    tailer: Tailer
    asm: Assembler
    chain: list[rules.ChainLine] = field(default_factory=list)
    first_type: str | None = None
    last_cwd: str | None = None
    worktrees: list[tuple[str, str]] = field(default_factory=list)  # (path, what named it)


def _read_more(h: Health, r: _Read) -> None:
    res = r.tailer.read(accept_unterminated=True)
    for line in res.lines:
        parsed = parse_line(line.data, line.offset)
        h.bad_lines += len(parsed.errors)
        for entry in parsed.entries:
            _take(h, r, entry, line.data)


def _take(h: Health, r: _Read, entry: Entry, raw: bytes) -> None:
    h.lines += 1
    if r.first_type is None:
        r.first_type = entry.type
    if rules.is_assistant_record(entry):
        h.has_assistant_record = True
    h.version = entry.version or h.version
    r.last_cwd = entry.cwd or r.last_cwd
    r.chain.append(rules.ChainLine(entry.type, entry.uuid, entry.parent_uuid, entry.logical_parent_uuid,
                                   entry.subtype))
    if entry.type in ("relocated", "worktree-state"):
        r.worktrees += _worktree_paths(raw)
    r.asm.add(entry, r.tf)


def _worktree_paths(raw: bytes) -> list[tuple[str, str]]:
    """The directories a ``relocated`` (relocatedCwd) or ``worktree-state`` (worktreePath) line names."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return []
    if not isinstance(doc, dict):
        return []
    out = []
    if isinstance(p := doc.get("relocatedCwd"), str):
        out.append((p, "relocated.relocatedCwd"))
    ws = doc.get("worktreeSession")
    if isinstance(ws, dict) and isinstance(p := ws.get("worktreePath"), str):
        out.append((p, "worktree-state.worktreeSession.worktreePath"))
    return out


def check_session(arg: str, roots: tuple[str, ...], stall_s: float = STALL_TIMEOUT_NS / 1e9, now_ns: int | None = None,
                  probes: Sequence[float] = PROBES_S, sleep: Callable[[float], None] = time.sleep,
                  clock: Callable[[], float] = time.monotonic) -> Health:
    started = clock()
    try:
        path = find_transcript(arg, roots)
    except _NotFound:
        absent = _absent(arg, roots, now_ns)
        if absent is None:
            raise
        return absent
    root = next(r for r in roots if within_root(r, path))
    tf = classify(root, path)
    assert tf is not None and tf.session_id is not None
    health = Health(session_id=tf.session_id, path=path)
    r = _Read(tf, Tailer(path), Assembler(Timeouts(stall_ns=int(stall_s * 1e9))))
    for at in probes:
        if health.probes and health.has_assistant_record:
            break
        sleep(max(started + at - clock(), 0.0))
        health.probes += 1
        _read_more(health, r)
    now = now_ns if now_ns is not None else time.time_ns()
    _process(health, root, tf.session_id)
    _turn(health, r, tf.session_id, now, stall_s, probes)
    _chain(health, r)
    _places(health, r)
    return health


def _process(h: Health, root: str, session_id: str) -> None:
    procs = read_session_pids((root,)).get(session_id, ())
    if not procs:
        return
    live = [pid for pid, start in procs if pid_alive(pid, start)]
    h.process = "running" if live else "gone"
    files = [os.path.join(root, "sessions", f"{pid}.json") for pid, _ in procs]
    if len(live) > 1:
        h.add(Finding(FindingCode.CONCURRENT_WRITERS, True,
                      f"{len(live)} live Claude Code processes write this transcript", tuple(files)))
    elif live:
        h.add(Finding(FindingCode.SESSION_LIVE, True,
                      f"process {live[0]} still runs this session: a resume would be a second writer", tuple(files)))


def _turn(h: Health, r: _Read, session_id: str, now: int, stall_s: float, probes: Sequence[float]) -> None:
    if not h.has_assistant_record:
        h.add(Finding(FindingCode.NO_ASSISTANT_RECORD, True,
                      "no assistant record: a ghost session, its transcript has nothing to resume",
                      (f"{h.lines} records, none an assistant line, after {h.probes} reads "
                       f"at {', '.join(f'{p * 1000:.0f}' for p in probes[:h.probes])} ms",)))
    turn = r.asm.current_turn(session_id)
    if turn is None:
        return
    h.idle_seconds = max(now - turn.last_ns, 0) / 1e9
    owes = bool(turn.open_tools) or turn.awaiting_model
    h.stalled = owes and h.idle_seconds >= stall_s and h.process != "running"
    if turn.open_tools and h.process != "running" and (h.process == "gone" or h.stalled):
        h.ends_in_orphaned_tool_use = True
        h.orphaned_tool_use_ids = sorted(turn.open_tools)
        blocks = rules.orphan_blocks_resume(h.version)
        msg = ("ends in an orphaned tool_use: the process died during a tool call" if blocks else
               f"ends in an orphaned tool_use; Claude Code {h.version} repairs it on resume (nothing is lost)")
        h.add(Finding(FindingCode.TRAILING_ORPHANED_TOOL_USE, blocks, msg,
                      tuple(f"tool_use {t} has no tool_result" for t in h.orphaned_tool_use_ids)
                      + (f"version {h.version}", f"process {h.process}")))
    elif h.stalled:
        h.add(Finding(FindingCode.STALLED, True,
                      "stalled: a reply is owed and the file has been silent past the stall timeout",
                      (f"idle {h.idle_seconds:.0f}s >= {stall_s:.0f}s",)))


def _chain(h: Health, r: _Read) -> None:
    on_resume = rules.resume_chain(r.chain)
    blocks = rules.broken_chain_blocks(h.version)
    dangling = rules.dangling_parents(r.chain)
    if dangling:
        on = [d for d in dangling if d[0] in on_resume]
        h.add(Finding(FindingCode.BROKEN_PARENT_CHAIN, blocks and bool(on),
                      f"{len(dangling)} line(s) name a parentUuid that is not in the file"
                      + (" (on the branch a resume loads)" if on else " (off the branch a resume loads)"),
                      tuple(f"line {u} -> parent {p}" for u, p in dangling[:10])))
    lost = rules.dangling_logical_parents(r.chain)
    if lost:
        on = [d for d in lost if d[0] in on_resume]
        h.add(Finding(FindingCode.COMPACT_LOGICAL_PARENT_MISSING, blocks and bool(on),
                      "a compact_boundary names a logicalParentUuid that is not in the file",
                      tuple(f"compact_boundary {u} -> logicalParentUuid {p}" for u, p in lost[:10])))
    first = rules.first_line_blocks(r.first_type, h.version)
    if first is not None:
        effect = ("`claude --resume` of this version may answer \"No conversation found\" "
                  "(anthropics/claude-code#62851, seen with 2.1.143)" if first else
                  "this version resumes it with the whole history (tested from 2.1.197); "
                  "versions before 2.1.197 may answer \"No conversation found\"")
        h.add(Finding(FindingCode.FIRST_LINE_NOT_MESSAGE, first,
                      f"the first line is a {r.first_type!r} line, not a message: {effect}",
                      (f"line 1 type {r.first_type}", f"version {h.version}")))


def _places(h: Health, r: _Read) -> None:
    gone_trees = [(p, what) for p, what in dict.fromkeys(r.worktrees) if not os.path.isdir(p)]
    if gone_trees:
        h.add(Finding(FindingCode.WORKTREE_MISSING, True, "the session's worktree no longer exists",
                      tuple(f"{what} {p}: no such directory" for p, what in gone_trees)))
    if r.last_cwd and not os.path.isdir(r.last_cwd) and r.last_cwd not in {p for p, _ in gone_trees}:
        h.add(Finding(FindingCode.CWD_MISSING, True, "the session's working directory no longer exists",
                      (f"cwd {r.last_cwd} (last line with a cwd): no such directory",)))
    moved = [p for p, what in r.worktrees if what.startswith("relocated") and os.path.isdir(p)]
    if moved:
        msg = f"the session moved to {moved[-1]}: resume it from there"
        h.add(Finding(FindingCode.TRANSCRIPT_RELOCATED, False, msg, (f"relocated.relocatedCwd {moved[-1]}",)))


_ABSENT_CODES = {
    rules.Absence.SWEPT: (FindingCode.TRANSCRIPT_SWEPT, "the transcript was deleted by Claude Code's retention sweep"),
    rules.Absence.RELOCATED: (FindingCode.TRANSCRIPT_RELOCATED, "the transcript is under another project dir"),
    rules.Absence.NOT_PERSISTED: (FindingCode.TRANSCRIPT_NOT_PERSISTED,
                                  "the session ran without writing a transcript (--no-session-persistence or "
                                  "CLAUDE_CODE_SKIP_PROMPT_HISTORY): it cannot be resumed"),
    rules.Absence.MISSING: (FindingCode.TRANSCRIPT_MISSING, "the transcript is gone (not by the retention sweep)"),
}


def _absent(session_id: str, roots: tuple[str, ...], now_ns: int | None) -> Health | None:
    """A session known on disk without its transcript: why, from the evidence (None: unknown id)."""
    found = evidence.known_sessions(roots).get(session_id)
    if found is None:
        return None
    now_s = (now_ns if now_ns is not None else time.time_ns()) / 1e9
    retention = min(evidence.retention_of(r) for r in roots)
    reason = rules.absent_reason(elsewhere=False, last_seen_s=found.last_seen_s, now_s=now_s,
                                 retention=retention, had_transcript=found.had_transcript)
    code, msg = _ABSENT_CODES[reason]
    h = Health(session_id=session_id, path="")
    age = f"last seen {(now_s - found.last_seen_s) / 86400:.1f} days ago" if found.last_seen_s else "age unknown"
    h.add(Finding(code, True, msg, (*found.sources, age, f"cleanupPeriodDays {retention}",
                                    "no projects/*/" + session_id + ".jsonl under " + ", ".join(roots))))
    if found.pids:
        h.process = "running" if any(pid_alive(p, s) for p, s in found.pids) else "gone"
    return h


def render(h: Health) -> str:
    verdict = "OK to resume" if h.resumable else "do NOT resume"
    lines = [f"session {h.session_id}: {verdict}",
             f"  transcript  {h.path or '(none)'} ({h.lines} records, {h.bad_lines} bad)",
             f"  assistant   {'yes' if h.has_assistant_record else 'none'}",
             f"  process     {h.process}", f"  idle        {_idle(h.idle_seconds)}"]
    if h.orphaned_tool_use_ids:
        lines.append(f"  orphaned    {', '.join(h.orphaned_tool_use_ids)}")
    for f in h.findings:
        lines.append(f"  {'BLOCKS' if f.blocks else 'warning':<10}  {f.code.value}: {f.message}")
        lines += [f"              {e}" for e in f.evidence]
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", help="a session id, a unique prefix of one (at least 8 characters), or the path "
                        "of its transcript (under a root)")
    parser.add_argument("--json", action="store_true", help="print the health and findings as JSON")
    add_stall_timeout(parser, "seconds a tool call or a reply may be owed before the session counts as stalled")


def run(args: argparse.Namespace) -> int:
    roots = tuple(getattr(args, "root", None) or default_roots())
    try:
        health = check_session(args.session, roots, stall_s=args.stall_timeout)
    except CheckError as exc:
        sys.stderr.write(f"ccotel check: {exc}\n")
        return 2
    out = orjson.dumps(health.as_dict(), option=orjson.OPT_INDENT_2).decode() if args.json else render(health)
    sys.stdout.write(out + "\n")
    return 0 if health.resumable else 1


def _idle(seconds: float) -> str:
    """``112d 14h (9721418 s)``: readable, and the seconds --json gives (idle_seconds)."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    d, rest = divmod(s, 86400)
    h, rest = divmod(rest, 3600)
    m = rest // 60
    readable = f"{d}d {h}h" if d else (f"{h}h {m:02d}m" if h else f"{m}m {rest % 60:02d}s")
    return f"{readable} ({s} s)"
