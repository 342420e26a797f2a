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

# re, typing and collections are not loaded by this module (the report's kept answers start with it,
# and re alone costs that start more than anything else): mypy reads this block, Python does not
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

__all__ = ["AGENT_PREFIX", "META_SUFFIX", "SESSION_ID", "SUBAGENTS", "AmbiguousSession", "SessionIdError",
           "UnknownSession", "agent_meta", "agent_transcript", "default_roots", "is_utf8", "main_transcripts",
           "match_session_id",
           "project_dir_of", "projects_dir", "resolve_session_id", "session_ids", "shown", "subagents_dir"]

PROJECTS = "projects"
SUBAGENTS = "subagents"
AGENT_PREFIX = "agent-"
META_SUFFIX = ".meta.json"
_NOT_ALNUM = r"[^A-Za-z0-9]"
#: A session id as a command takes it, or a prefix of one: at least 8 characters (what `ccotel
#: sessions` prints), nothing that could name a path (no separator, no dot).
SESSION_ID = r"^[0-9A-Za-z][0-9A-Za-z_-]{7,63}$"  # a pattern for re (which keeps it compiled)
_MIN_PREFIX = 8
_CANDIDATES_SHOWN = 10


def default_roots(env: dict[str, str] | None = None) -> list[str]:
    """$CLAUDE_CONFIG_DIR (comma-separated allowed, like ccusage) or ~/.claude."""
    env = dict(os.environ) if env is None else env
    given = [p.strip() for p in env.get("CLAUDE_CONFIG_DIR", "").split(",") if p.strip()]
    if given:  # (only commas, as empty: the default, not no root at all)
        return [os.path.abspath(os.path.expanduser(p)) for p in given]
    return [os.path.join(os.path.expanduser("~"), ".claude")]


def projects_dir(root: str) -> str:
    """``<root>/projects``: every transcript of a config dir is under it."""
    return os.path.join(root, PROJECTS)


def is_utf8(name: str) -> bool:
    """A name (or path) as os.fsdecode gave it encodes to UTF-8: it holds no surrogate-escaped
    byte. A file or directory whose name does not is not read (discover.PathNotUtf8): no
    checkpoint, ledger row, span or JSON output could hold its path."""
    if name.isascii():
        return True
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown(path: str) -> str:
    """A path whose name is not UTF-8 as a log line, an error or JSON can hold it: its bytes that
    are not UTF-8 escaped (``\\xe9``). A lone surrogate breaks whatever encodes it strictly."""
    return path if is_utf8(path) else os.fsencode(path).decode("utf-8", "backslashreplace")


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
            if is_utf8(d) and os.path.isfile(path):
                yield root, path


class SessionIdError(ValueError):
    """A session argument refused: path-like or malformed (nothing was read for it)."""


class UnknownSession(SessionIdError):
    """A well-formed id or prefix that no main transcript under the roots has."""


class AmbiguousSession(SessionIdError):
    """A prefix that several sessions under the roots share."""


def session_ids(roots: Sequence[str]) -> set[str]:
    """The id of every ``projects/<dir>/<id>.jsonl`` under the roots (names only: nothing is read)."""
    ids: set[str] = set()
    for root in roots:
        projects = projects_dir(root)
        try:
            dirs = os.listdir(projects)
        except OSError:
            continue
        for d in filter(is_utf8, dirs):
            try:
                names = os.listdir(os.path.join(projects, d))
            except OSError:  # a file, or unreadable
                continue
            ids.update(n[: -len(".jsonl")] for n in names
                       if n.endswith(".jsonl") and not n.startswith(AGENT_PREFIX) and is_utf8(n))
    return ids


def match_session_id(arg: str, ids: Iterable[str]) -> str:
    """The one id of ``ids`` that is ``arg`` or starts with it. Raises SessionIdError when ``arg``
    is not a session id or a prefix of at least 8 characters, UnknownSession when no id matches,
    AmbiguousSession (naming the candidates) when several do."""
    _refuse_malformed(arg)
    found = sorted({i for i in ids if i.startswith(arg)})
    if arg in found:
        return arg  # a whole id is never ambiguous, even when it is also a prefix of another
    if not found:
        raise UnknownSession(f"unknown session {_given(arg, quote=False)}")
    if len(found) > 1:
        more = ", ..." if len(found) > _CANDIDATES_SHOWN else ""
        raise AmbiguousSession(f"ambiguous: {_given(arg, quote=False)} matches "
                               f"{', '.join(found[:_CANDIDATES_SHOWN])}{more}")
    return found[0]


def _given(arg: str, quote: bool = True) -> str:
    """The argument as a message shows it: cut past 40 characters (a message is a line of a
    terminal, whatever was pasted), quoted when it may not be an id at all."""
    head = repr(arg[:40]) if quote else arg[:40]
    return head if len(arg) <= 40 else f"{head}... ({len(arg):,} characters)"


def _refuse_malformed(arg: str) -> None:
    import re

    if not re.match(SESSION_ID, arg):
        raise SessionIdError(f"{_given(arg)} is not a session id (give the id, or at least its first {_MIN_PREFIX} "
                             "characters)")


def resolve_session_id(arg: str, roots: Sequence[str]) -> str:
    """A session id, or a unique prefix of one (at least 8 characters), -> the whole id of a main
    transcript under the roots: the rule of every command that takes a session id (check, trace).
    The argument is checked before anything is listed, so a path-like or malformed one never
    reaches the filesystem."""
    _refuse_malformed(arg)
    try:
        return match_session_id(arg, session_ids(roots))
    except UnknownSession as exc:
        raise UnknownSession(f"{exc} under {', '.join(roots)}") from None


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
    import re

    return re.sub(_NOT_ALNUM, "-", cwd) if cwd else None
