"""The roots check: each root there and readable, how many transcripts it holds, and what ccotel
cannot read in it, with the owner and the command that would let it.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from collections.abc import Sequence

from ccotel.commands.doctor.finding import Finding, Level
from ccotel.commands.doctor.root_scan import Denied, RootScan, RootState
from ccotel.commands.doctor.wording import LIST_AT_MOST, counted, listing, user_name

__all__ = ["check_roots"]


def check_roots(scans: Sequence[RootScan]) -> list[Finding]:
    out: list[Finding] = []
    for s in scans:
        out.extend(_root_findings(s))
    # One root says it on its own; of several, say when none of them has anything.
    if len(scans) > 1 and all(s.state is not RootState.OK or not s.samples for s in scans) and not any(
            f.level is Level.FAIL for f in out):
        out.append(Finding("roots", Level.WARN, ", ".join(s.root for s in scans),
                           "no transcript under any root: ccotel has nothing to read yet",
                           "if Claude Code writes elsewhere (its CLAUDE_CONFIG_DIR), give that dir with --root or "
                           "CLAUDE_CONFIG_DIR; otherwise run Claude Code once"))
    return out


def _root_findings(s: RootScan) -> list[Finding]:
    elsewhere = ("if Claude Code writes elsewhere (its CLAUDE_CONFIG_DIR), give that dir with --root or "
                 "CLAUDE_CONFIG_DIR")
    if s.state is RootState.MISSING:
        return [Finding("roots", Level.WARN, s.root, "does not exist",
                        f"{elsewhere}; otherwise ccotel run picks it up once Claude Code has created it "
                        "(it looks again every 2 minutes)")]
    if s.state is RootState.NOT_A_DIR:
        return [Finding("roots", Level.FAIL, s.root, "is not a directory", elsewhere)]
    if s.state is RootState.UNREADABLE:
        return [Finding("roots", Level.FAIL, s.root, f"cannot be read ({s.error})", _access_fix(s.denied),
                        {"denied": [dataclasses.asdict(d) for d in s.denied]})]
    if s.state is RootState.NO_PROJECTS:
        return [Finding("roots", Level.WARN, s.root, "has no projects/ directory: no transcript written here yet",
                        f"{elsewhere}; otherwise ccotel run reads projects/ once Claude Code has created it")]
    counts = {"sessions": s.sessions, "subagents": s.subagents}
    out = []
    if s.sessions + s.subagents == 0:
        out.append(Finding("roots", Level.WARN, s.root, "projects/ holds no transcript yet", "", counts))
    else:
        out.append(Finding("roots", Level.OK, s.root, f"{s.sessions} session and {s.subagents} subagent transcripts "
                           "readable", "", counts))
    if s.denied:
        dirs = [d for d in s.denied if d.is_dir]
        files = [d for d in s.denied if not d.is_dir]
        # What ccotel run does with them: discover's walk passes over a directory it cannot list
        # without a word; tail counts a file it cannot open.
        effects = []
        if dirs:
            effects.append(f"{counted(len(dirs), 'directory', 'directories')} ccotel cannot list: the transcripts in "
                           "them are never seen, and nothing counts them")
        if files:
            effects.append(f"{counted(len(files), 'file', 'files')} ccotel cannot open: skipped, each counted once in "
                           "ccotel_parse_errors_total{reason=\"unreadable\"}")
        out.append(Finding("roots", Level.FAIL, s.root,
                           f"permission denied: {'; '.join(effects)}: {listing(d.path for d in s.denied)}",
                           _access_fix(s.denied), {"denied": [dataclasses.asdict(d) for d in s.denied]}))
    if s.not_utf8:
        out.append(Finding("roots", Level.WARN, s.root,
                           f"{counted(len(s.not_utf8), 'directory or transcript', 'directories or transcripts')} "
                           "named in bytes that are not UTF-8; ccotel reads nothing there (ccotel run counts each "
                           f"in ccotel_parse_errors_total{{reason=\"path_not_utf8\"}}): {listing(s.not_utf8)}",
                           "rename them to UTF-8 (convmv -r -f latin1 -t utf8 --notest <dir>, with the right "
                           "source encoding), or move them out of the root",
                           {"not_utf8": list(s.not_utf8)}))
    if s.outside:
        out.append(Finding("roots", Level.WARN, s.root,
                           f"{len(s.outside)} transcript symlinks lead outside the root; ccotel never reads "
                           f"outside its roots: {listing(s.outside)}",
                           "copy or move those transcripts under the root, or add their directory as a --root",
                           {"outside": list(s.outside)}))
    return out


def _access_fix(denied: Sequence[Denied]) -> str:
    """Who owns what cannot be read and the two ways out: run ccotel as that user, or grant read."""
    me = user_name(os.geteuid())
    owners = []
    for d in denied:
        try:
            owners.append(user_name(os.stat(d.path).st_uid))
        except OSError:
            continue
    targets = " ".join(shlex.quote(d.path) for d in denied[:LIST_AT_MOST])
    if denied[LIST_AT_MOST:]:
        targets += " ..."
    others = sorted(set(owners) - {me})
    if not others:
        return f"they are {me}'s but not readable: chmod -R u+rX {targets}"
    return (f"run ccotel as {', '.join(others)} (the user Claude Code writes as), or let {me} read them: "
            f"setfacl -R -m u:{me}:rX {targets}")
