"""Where a Claude config dir keeps its transcripts: the one place that knows the ``projects/`` layout
(docs/format.md section 1), relative to ``<root>/projects``:

    <proj>/<session>.jsonl                          main conversation
    <proj>/<session>/subagents/agent-<id>.jsonl     2.1.x subagent (+ agent-<id>.meta.json)
    <proj>/agent-<id>.jsonl                         2.0.x flat subagent file

``<proj>`` is the session's cwd with every character but letters and digits made ``-``. Older versions
mangled it differently, so a session's directory is looked for, never computed, when its files are
searched; ``project_dir_of`` is the name the current rule gives a cwd, for grouping by project.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence

__all__ = ["AGENT_PREFIX", "META_SUFFIX", "SUBAGENTS", "agent_meta", "agent_transcript", "main_transcripts",
           "project_dir_of", "projects_dir", "subagents_dir"]

PROJECTS = "projects"
SUBAGENTS = "subagents"
AGENT_PREFIX = "agent-"
META_SUFFIX = ".meta.json"
_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]")


def projects_dir(root: str) -> str:
    """``<root>/projects``: every transcript of a config dir is under it."""
    return os.path.join(root, PROJECTS)


def main_transcripts(roots: Sequence[str], session_id: str) -> Iterator[tuple[str, str]]:
    """(root, path) of each ``projects/<dir>/<id>.jsonl`` of the session, roots in order and their
    project directories by name, each looked for only when the one before has been taken."""
    for root in roots:
        projects = projects_dir(root)
        try:
            dirs = sorted(os.listdir(projects))
        except OSError:
            continue
        for d in dirs:
            path = os.path.join(projects, d, f"{session_id}.jsonl")
            if os.path.isfile(path):
                yield root, path


def subagents_dir(main_transcript: str) -> str:
    """The 2.1.x subagents directory of a session, beside its main transcript."""
    return os.path.join(main_transcript[: -len(".jsonl")], SUBAGENTS)


def agent_transcript(subagents: str, agent_id: str) -> str:
    return os.path.join(subagents, f"{AGENT_PREFIX}{agent_id}.jsonl")


def agent_meta(subagents: str, agent_id: str) -> str:
    """A 2.1.x subagent's meta.json (agentType, description, toolUseId, spawnDepth)."""
    return os.path.join(subagents, f"{AGENT_PREFIX}{agent_id}{META_SUFFIX}")


def project_dir_of(cwd: str | None) -> str | None:
    """The ``projects/<dir>`` name Claude Code gives a cwd: every non-alphanumeric becomes '-'."""
    return _NOT_ALNUM.sub("-", cwd) if cwd else None
