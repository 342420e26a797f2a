"""ccusage as an independent reading of Claude Code transcripts, and the realdata tree.

ccusage (npm ``ccusage`` + its native ``@ccusage/ccusage-<os>-<cpu>`` package, pinned
in :data:`CCUSAGE_VERSION`) is installed by ``python -m tests.support.install_ccusage``
into its own npm prefix ``tests/.node/ccusage/`` (gitignored by ``.node/``), with its
own ``package.json``, so an ``npm install --prefix tests/.node <other>`` for the Claude
Code CLI never prunes it.  This module uses the standard library only.

How ccusage is run (``ccusage claude session --help`` of 20.0.24):

- ``ccusage claude session --json --offline --timezone UTC``.  The ``claude``
  sub-command reads Claude Code data only (plain ``ccusage session`` also scans the
  home dirs of ~20 other agents and names sessions ``period``); ``--offline`` uses
  the pricing snapshot compiled into the binary instead of fetching LiteLLM's table
  from GitHub; ``--timezone UTC`` makes dates independent of the machine.
- ``CLAUDE_CONFIG_DIR=<dir>``: the only data dir read (it must contain
  ``projects/``); ``HOME``, ``XDG_CONFIG_HOME`` and ``XDG_CACHE_HOME`` point into a
  private temp dir so the machine's own ``~/.claude`` and ccusage config are never
  read; ``HTTP(S)_PROXY`` point at a dead loopback port so that any network attempt
  fails on the machine instead of leaving it.
- ccusage names a session after the FILE: ``projects/<project>/<stem>.jsonl`` is
  session ``<stem>``; ``projects/<project>/<session>/subagents/*.jsonl`` counts
  for ``<session>``.  It only reads regular files: a SYMLINKED ``.jsonl`` is
  silently skipped (its directory walk uses the entry's own file type), hence
  :func:`realdata_tree` copies by default.

The realdata mapping (:func:`realdata_layout`), one project dir per source repo
(``projects/<repo dir name>/``), sources under ``shared/realdata`` (read-only, never
copied into the repo):

- ``marot__spotter/test__fixtures__transcripts__<S>.jsonl`` -> ``<S>.jsonl``;
  ``..__<S>__subagents__agent-<A>.jsonl`` -> ``<S>/subagents/agent-<A>.jsonl``
  (also ``6c2214d7-…``, whose parent file was never saved: a session dir with a
  subagent file and no main file); ``short`` / ``subagent`` / ``tool_heavy`` ->
  the ``sessionId`` inside (55604662-…, 491e126e-…, d6e0bada-…).
- ``chiphuyen__sniffly`` and ``d-kimuson__claude-code-viewer``: the UUID at the end
  of the file name, which equals the ``sessionId`` inside.  ``ff71dbed-…`` (122 bytes,
  one ``summary`` line, no sessionId) keeps its name: a session with no usage.
- ``entireio__cli`` and ``theogbrand__napoli-matcha`` (``AA__BBBBBBBBBB__N__full.jsonl``,
  named by Entire checkpoint): the ``sessionId`` inside.  Two pairs share one
  sessionId: ``44__785715c3f5__2`` + ``84__324d6610f2__0`` (0cf3db51-…) and
  ``b0__2936744f3b__0`` + ``ee__cf21d297fe__0`` (b00b80af-…).  Each pair holds two
  disjoint, consecutive slices of one session (no common uuid or message id), so
  they are joined into ONE ``<sessionId>.jsonl`` (copied; slices in order of their
  first timestamp; a ``\\n`` is added after a slice that lacks a final newline),
  which is what Claude Code had on disk.  ``ea__59bf8d9e0b__2`` (b4dcf65c-…)
  re-contains all 34 uuid lines of ``ea__59bf8d9e0b__0`` (e1bc91d1-…) under its own
  sessionId: both are kept as two sessions, as on a real machine.

Result: 53 main session files + 12 subagent files in 54 session ids
(see ``EXPECTED_*`` below and ``tests/support/CCUSAGE_NOTES.md``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

__all__ = [
    "CCUSAGE_VERSION",
    "CcusageNotInstalled",
    "LayoutEntry",
    "ccusage_bin",
    "ccusage_prefix",
    "installed_ccusage_version",
    "realdata_dir",
    "realdata_layout",
    "realdata_tree",
    "run_ccusage",
    "run_ccusage_daily",
    "run_ccusage_sessions",
    "run_ccusage_view",
    "view_rows",
    "agent_progress_extras_by_day",
    "VIEW_FIELDS",
]

#: The one pin of the ccusage version (20.0.26 has no linux-x64 native package on npm).
CCUSAGE_VERSION = "20.0.24"

REPO_ROOT = Path(__file__).resolve().parents[2]
#: npm prefix of ccusage, separate from tests/.node's own package.json.
DEFAULT_PREFIX = REPO_ROOT / "tests" / ".node" / "ccusage"
PREFIX_ENV_VAR = "CCOTEL_CCUSAGE_PREFIX"
REALDATA_ENV_VAR = "CCOTEL_REALDATA_DIR"

#: Session ids of the realdata tree (main files and subagent-only dirs).
EXPECTED_SESSION_COUNT = 77
EXPECTED_MAIN_FILES = 76
EXPECTED_SUBAGENT_FILES = 44  # 2.1.x subagents/ files and 2.0.x flat agent files

_UUID_RE = re.compile(r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})")
# Raw copies of a ~/.claude/projects dir (procrypto, isaacmorgado, Smartagent-so): the path with
# '/' -> '__' (a leading '.claude' as '_claude'): a main file, a 2.1.x subagent file, or a 2.0.x
# flat agent file beside the session files.
_RAW_RE = re.compile(
    r"^_?(?:claude__)?projects__(?P<proj>.+?)__(?:(?P<sid>[0-9a-f-]{36})"
    r"(?:__subagents__(?P<agent>agent-[^/]+))?|(?P<flat>agent-[0-9a-f]+))\.jsonl$"
)
_SPOTTER_RE = re.compile(
    r"^test__fixtures__transcripts__(?P<sid>[0-9a-f-]{36})"
    r"(?:__subagents__(?P<agent>agent-[^/]+))?\.jsonl$"
)


class CcusageNotInstalled(RuntimeError):
    """ccusage is missing from the prefix or has another version."""


# -- installation ---------------------------------------------------------------


def ccusage_prefix() -> Path:
    override = os.environ.get(PREFIX_ENV_VAR)
    return Path(override) if override else DEFAULT_PREFIX


def ccusage_bin(prefix: Path | None = None) -> Path:
    return (prefix or ccusage_prefix()) / "node_modules" / ".bin" / "ccusage"


def installed_ccusage_version(prefix: Path | None = None) -> str | None:
    """``20.0.24`` from ``ccusage --version``, or None when absent or broken."""
    binary = ccusage_bin(prefix)
    if not binary.exists():
        return None
    try:
        out = subprocess.run(
            [str(binary), "--version"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=_private_env(Path(tempfile.gettempdir()) / "ccotel-ccusage-version-home"),
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"(\d+\.\d+\.\d+\S*)", out.stdout)
    return match.group(1) if out.returncode == 0 and match else None


# -- running ------------------------------------------------------------------------


def _private_env(home: Path, config_dir: Path | None = None) -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    home.mkdir(parents=True, exist_ok=True)
    dead_proxy = "http://127.0.0.1:9"  # discard port: refused at once, on this machine
    env.update(
        {
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_DATA_HOME": str(home / ".local" / "share"),
            "NO_COLOR": "1",
            "TZ": "UTC",
            "HTTP_PROXY": dead_proxy,
            "HTTPS_PROXY": dead_proxy,
            "ALL_PROXY": dead_proxy,
            "http_proxy": dead_proxy,
            "https_proxy": dead_proxy,
            "all_proxy": dead_proxy,
        }
    )
    if config_dir is not None:
        env["CLAUDE_CONFIG_DIR"] = str(config_dir)
    return env


def run_ccusage(
    args: Sequence[str],
    config_dir: Path,
    *,
    prefix: Path | None = None,
    timeout: float = 300.0,
    require_version: str | None = CCUSAGE_VERSION,
) -> Any:
    """Run ``ccusage <args>`` on ``config_dir`` with a private HOME; return parsed JSON.

    ``args`` must ask for JSON (``--json``).  Raises :class:`CcusageNotInstalled`,
    ``subprocess.TimeoutExpired`` after ``timeout`` s, or RuntimeError on failure.
    """
    binary = ccusage_bin(prefix)
    if not binary.exists():
        raise CcusageNotInstalled(
            f"no ccusage at {binary}: run `python -m tests.support.install_ccusage`"
        )
    if require_version is not None:
        found = installed_ccusage_version(prefix)
        if found != require_version:
            raise CcusageNotInstalled(
                f"{binary} is ccusage {found!r}, want {require_version}: "
                "run `python -m tests.support.install_ccusage`"
            )
    config_dir = Path(config_dir)
    if not (config_dir / "projects").is_dir():
        raise ValueError(f"{config_dir} has no projects/ dir")
    with tempfile.TemporaryDirectory(prefix="ccotel-ccusage-home-") as home:
        proc = subprocess.run(
            [str(binary), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=home,
            env=_private_env(Path(home), config_dir),
        )
    if proc.returncode != 0:
        raise RuntimeError(
            f"ccusage {' '.join(args)} exited {proc.returncode}: {proc.stderr[-2000:]}"
        )
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError as err:
        raise RuntimeError(f"ccusage printed no JSON: {proc.stdout[:500]!r}") from err


_TOTAL_KEYS = (
    "inputTokens",
    "outputTokens",
    "cacheCreationTokens",
    "cacheReadTokens",
    "totalTokens",
    "totalCost",
)


def run_ccusage_sessions(config_dir: Path, **kwargs: Any) -> dict[str, dict[str, Any]]:
    """Per-session totals as ccusage reports them.

    Runs ``ccusage claude session --json --offline --timezone UTC``.  Returns
    ``{sessionId: {inputTokens, outputTokens, cacheCreationTokens, cacheReadTokens,
    totalTokens, totalCost, models, projectPath, firstActivity, lastActivity,
    modelBreakdowns}}``.  ``inputTokens`` is ccusage's raw ``input_tokens`` (cache
    reads and writes are separate), ``models`` its ``modelsUsed`` (``<synthetic>``
    excluded).  Sessions without a usage line are absent.
    """
    body = run_ccusage(
        ["claude", "session", "--json", "--offline", "--timezone", "UTC"], config_dir, **kwargs
    )
    out: dict[str, dict[str, Any]] = {}
    for row in body.get("sessions", []):
        sid = row["sessionId"]
        if sid in out:
            raise ValueError(f"session {sid} reported twice (two projects?)")
        totals = {key: row.get(key) for key in _TOTAL_KEYS}
        totals["models"] = list(row.get("modelsUsed") or [])
        totals["projectPath"] = row.get("projectPath")
        totals["firstActivity"] = row.get("firstActivity")
        totals["lastActivity"] = row.get("lastActivity")
        totals["modelBreakdowns"] = list(row.get("modelBreakdowns") or [])
        out[sid] = totals
    return out


def run_ccusage_daily(config_dir: Path, **kwargs: Any) -> dict[str, dict[str, Any]]:
    """Per-day (UTC) totals: ``ccusage claude daily --json --offline --timezone UTC``.

    Returns ``{"YYYY-MM-DD": {inputTokens, ..., totalCost, models}}``.  Note that
    ccusage's daily path reads usage nested in ``agent_progress`` lines too, which
    the session path does not (see CCUSAGE_NOTES.md).
    """
    body = run_ccusage(
        ["claude", "daily", "--json", "--offline", "--timezone", "UTC"], config_dir, **kwargs
    )
    out: dict[str, dict[str, Any]] = {}
    for row in body.get("daily", []):
        totals = {key: row.get(key) for key in _TOTAL_KEYS}
        totals["models"] = list(row.get("modelsUsed") or [])
        out[row["date"]] = totals
    return out


#: ``ccusage claude <view> --json``: the list's name and each row's key field (20.0.24).
VIEW_FIELDS = {"daily": ("daily", "date"), "weekly": ("weekly", "week"), "monthly": ("monthly", "month"),
               "session": ("sessions", "sessionId")}


def run_ccusage_view(
    config_dir: Path, view: str, timezone: str = "UTC", extra: Sequence[str] = (), **kwargs: Any
) -> dict[str, Any]:
    """``ccusage claude <view> --json --offline --timezone <tz> [extra]``, as printed (the
    whole document: ``{<list name>: [rows], "totals": {...}}``)."""
    if view not in VIEW_FIELDS:
        raise ValueError(f"ccusage has no {view!r} view")
    body = run_ccusage(
        ["claude", view, "--json", "--offline", "--timezone", timezone, *extra], config_dir, **kwargs
    )
    if not isinstance(body, dict):
        raise RuntimeError(f"ccusage {view} printed {type(body).__name__}, not an object")
    return body


def view_rows(body: Mapping[str, Any], view: str) -> dict[str, dict[str, Any]]:
    """The rows of a ``run_ccusage_view`` document by their key (date, week, month, session id)."""
    name, key = VIEW_FIELDS[view]
    return {row[key]: row for row in body.get(name, [])}


def agent_progress_extras_by_day(config_dir: Path, timezone: str = "UTC") -> dict[str, tuple[int, int, int, int]]:
    """What ``ccusage claude daily`` adds per day (in ``timezone``) by reading agent_progress
    copies (CCUSAGE_NOTES.md finding 3): the assistant messages nested in ``progress`` lines whose
    (message.id, requestId) no assistant line of any file holds, once per key (largest
    output), by the day of the progress line. (input, output, cache creation, cache read)."""
    from datetime import datetime
    from zoneinfo import ZoneInfo

    zone = ZoneInfo(timezone)
    have: set[tuple[Any, Any]] = set()
    copies: dict[tuple[Any, Any], tuple[list[int], str]] = {}
    for path in sorted((Path(config_dir) / "projects").rglob("*.jsonl")):
        for obj in _iter_objects(path):
            if obj.get("type") == "assistant":
                msg = obj.get("message")
                if isinstance(msg, dict) and isinstance(msg.get("usage"), dict):
                    have.add((msg.get("id"), obj.get("requestId")))
                continue
            data = obj.get("data")
            if obj.get("type") != "progress" or not isinstance(data, dict) or data.get("type") != "agent_progress":
                continue
            inner = data.get("message")
            msg = inner.get("message") if isinstance(inner, dict) and inner.get("type") == "assistant" else None
            if not isinstance(msg, dict) or not isinstance(msg.get("usage"), dict) or msg.get("model") == "<synthetic>":
                continue
            usage = msg["usage"]
            row = [int(usage.get(k) or 0) for k in ("input_tokens", "output_tokens", "cache_creation_input_tokens",
                                                    "cache_read_input_tokens")]
            key = (msg.get("id"), inner.get("requestId"))
            old = copies.get(key)
            if old is None or row[1] > old[0][1]:
                stamp = datetime.fromisoformat(str(obj.get("timestamp")).replace("Z", "+00:00"))
                copies[key] = (row, stamp.astimezone(zone).date().isoformat())
    out: dict[str, list[int]] = {}
    for key, (row, day) in copies.items():
        if key not in have:
            into = out.setdefault(day, [0, 0, 0, 0])
            for i, v in enumerate(row):
                into[i] += v
    return {day: (a, b, c, d) for day, (a, b, c, d) in out.items()}


# -- realdata tree --------------------------------------------------------------------


def realdata_dir() -> Path:
    """``shared/realdata`` beside the repo (``$CCOTEL_REALDATA_DIR`` overrides)."""
    override = os.environ.get(REALDATA_ENV_VAR)
    return Path(override) if override else REPO_ROOT.parent / "shared" / "realdata"


@dataclass(frozen=True)
class LayoutEntry:
    """One file of the config-dir tree and the realdata file(s) it comes from."""

    dest: str  #: relative to the config dir, e.g. ``projects/marot__spotter/<S>.jsonl``
    sources: tuple[str, ...]  #: relative to realdata, in the order they are joined
    session_id: str
    repo: str  #: source repo dir name (= project dir name)
    agent: str | None = None  #: ``agent-<id>`` for a subagent file
    note: str = ""


def _iter_objects(path: Path) -> Iterator[dict[str, Any]]:
    """Every JSON object of a JSONL file, tolerating glued objects and bad lines."""
    decoder = json.JSONDecoder()
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            pos, end = 0, len(line)
            while pos < end:
                while pos < end and line[pos].isspace():
                    pos += 1
                if pos >= end:
                    break
                try:
                    obj, pos = decoder.raw_decode(line, pos)
                except json.JSONDecodeError:
                    break
                if isinstance(obj, dict):
                    yield obj


@cache
def _content_info(path: Path) -> tuple[tuple[str, ...], str | None]:
    """(distinct sessionIds in order of appearance, earliest timestamp)."""
    sids: dict[str, None] = {}
    first_ts: str | None = None
    for obj in _iter_objects(path):
        sid = obj.get("sessionId")
        if isinstance(sid, str) and sid:
            sids.setdefault(sid)
        ts = obj.get("timestamp")
        if isinstance(ts, str) and (first_ts is None or ts < first_ts):
            first_ts = ts
    return tuple(sids), first_ts


def realdata_layout(realdata: Path | None = None) -> list[LayoutEntry]:
    """Where each realdata transcript goes in a Claude config dir (see module doc)."""
    root = Path(realdata) if realdata else realdata_dir()
    if not root.is_dir():
        raise FileNotFoundError(f"no realdata dir at {root}")
    by_dest: dict[str, list[tuple[str, str, str, str | None, str]]] = {}
    for repo_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        repo = repo_dir.name
        for path in sorted(repo_dir.glob("*.jsonl")):
            rel = f"{repo}/{path.name}"
            content_sids, _ = _content_info(path)
            agent: str | None = None
            note = ""
            spotter = _SPOTTER_RE.match(path.name)
            raw = _RAW_RE.match(path.name)
            flat = False
            if spotter:
                sid = spotter.group("sid")
                agent = spotter.group("agent")
            elif raw and raw.group("flat"):
                if not content_sids:
                    continue
                sid, agent, flat = content_sids[0], raw.group("flat"), True
                note = "2.0.x flat agent file; its session from the lines"
            elif raw:
                sid = raw.group("sid")
                agent = raw.group("agent")
            elif path.name.endswith("__full.jsonl") or not _UUID_RE.search(path.name):
                # Entire checkpoints and fixture names: the sessionId inside.
                if not content_sids:
                    continue  # nothing names a session: leave it out
                sid = content_sids[0]
                note = "sessionId read from the file"
            else:
                sid = _UUID_RE.findall(path.name)[-1]
            if content_sids and content_sids != (sid,):
                raise ValueError(f"{rel}: name says {sid}, lines say {content_sids}")
            if not content_sids:
                note = "no sessionId inside; named after the file"
            project = f"projects/{repo}"
            if flat:
                dest = f"{project}/{agent}.jsonl"
            else:
                dest = (
                    f"{project}/{sid}/subagents/{agent}.jsonl" if agent else f"{project}/{sid}.jsonl"
                )
            by_dest.setdefault(dest, []).append((rel, sid, repo, agent, note))
    layout = []
    for dest, items in sorted(by_dest.items()):
        # Slices of one session: join them in order of their first timestamp.
        items.sort(key=lambda item: (_content_info(root / item[0])[1] or "", item[0]))
        rel0, sid, repo, agent, note = items[0]
        if len(items) > 1:
            note = "slices of one session joined: " + " + ".join(i[0] for i in items)
        layout.append(
            LayoutEntry(
                dest=dest,
                sources=tuple(i[0] for i in items),
                session_id=sid,
                repo=repo,
                agent=agent,
                note=note,
            )
        )
    return layout


def realdata_tree(
    dest: Path,
    *,
    realdata: Path | None = None,
    mode: str = "copy",
) -> Path:
    """Lay out the realdata transcripts under ``dest`` as a Claude config dir.

    ``dest/projects/<repo>/<sessionId>.jsonl`` and
    ``dest/projects/<repo>/<sessionId>/subagents/agent-<id>.jsonl`` (mapping in the
    module docstring and :func:`realdata_layout`).  ``mode="copy"`` (default; ccusage
    skips symlinked files) or ``"symlink"`` (joined slices are still copies).
    ``dest`` must be outside the repo (a temp dir): realdata is never committed.
    Returns ``dest``.
    """
    if mode not in ("copy", "symlink"):
        raise ValueError("mode must be 'copy' or 'symlink'")
    root = Path(realdata) if realdata else realdata_dir()
    dest = Path(dest)
    if dest.resolve().is_relative_to(REPO_ROOT.resolve()):
        raise ValueError(f"{dest} is inside the repo: use a temp dir")
    for entry in realdata_layout(root):
        target = dest / entry.dest
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists() or target.is_symlink():
            target.unlink()
        if len(entry.sources) == 1 and mode == "symlink":
            target.symlink_to(root / entry.sources[0])
        elif len(entry.sources) == 1:
            shutil.copyfile(root / entry.sources[0], target)
        else:
            with open(target, "wb") as out:
                for rel in entry.sources:
                    data = (root / rel).read_bytes()
                    out.write(data)
                    if data and not data.endswith(b"\n"):
                        out.write(b"\n")
    return dest


def layout_table(layout: Sequence[LayoutEntry]) -> str:
    """The mapping as a Markdown table (used for CCUSAGE_NOTES.md)."""
    rows = ["| dest (under the config dir) | source(s) under realdata |", "|---|---|"]
    for entry in layout:
        rows.append(f"| `{entry.dest}` | {' + '.join(f'`{s}`' for s in entry.sources)} |")
    return "\n".join(rows)


def summarize_sessions(sessions: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Sum of the per-session token fields (for quick sanity checks)."""
    total: dict[str, Any] = {key: 0 for key in _TOTAL_KEYS}
    for row in sessions.values():
        for key in _TOTAL_KEYS:
            total[key] += row.get(key) or 0
    return total
