"""``ccotel doctor``: what an operator needs checked, each finding ok / warn / fail with what to do.

Checks, in order: the roots (there, readable, how many transcripts, what cannot be read), the
Claude Code versions and line types and fields in the newest lines of each transcript (their tails
only), the state dir (permissions, the database opened read-only, the lock), the trace backend
(reachable, what it answers an empty export), the metrics port (free, a ccotel, something else) and
Claude Code's own telemetry (a Prometheus port clash, traces sent twice).

Doctor changes nothing: it creates no state dir, lock or database file (SQLite opened read-only
would create ``-wal``/``-shm`` files, owned by whoever runs doctor: it is opened immutable when
they are absent), takes no lock (a lock is seen in /proc/locks; only where that cannot be read is
it probed with a shared non-blocking flock released at once) and sends the backend no span.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import errno
import fcntl
import http.client
import ipaddress
import os
import pwd
import shlex
import socket
import sqlite3
import stat
import sys
import urllib.parse
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TextIO

import orjson

from ccotel.export.result import REASON_THROTTLED, ExportResult, Outcome
from ccotel.export.sinks import OtlpSettings, otlp_settings
from ccotel.export.transport import HttpTransport
from ccotel.read.discover import classify, default_roots, within_root
from ccotel.records import FileKind
from ccotel.rules import transcript as rules
from ccotel.rules.versions import VersionStanding, judge_version, parse_version
from ccotel.store.sqlite import LOCK_NAME, SCHEMA_VERSION
from ccotel.store.state import default_state_dir

__all__ = ["Level", "Finding", "DoctorConfig", "RootScan", "Sample", "LockProbe", "add_arguments", "run",
           "config_from_args", "diagnose", "scan_root", "read_tail", "probe_lock", "render_text", "exit_status",
           "MANAGED_SETTINGS", "CLAUDE_CODE_PROMETHEUS_PORT"]

#: Claude Code's managed settings on Linux (the administrators' file; its ``env`` wins over the user's).
MANAGED_SETTINGS = "/etc/claude-code/managed-settings.json"
#: The OpenTelemetry Prometheus exporter's default port, which Claude Code's metrics use.
CLAUDE_CODE_PROMETHEUS_PORT = 9464
DEFAULT_METRICS_ADDR = "127.0.0.1:9477"  # cli.py's --metrics-addr default
TAIL_BYTES = 32 * 1024  # read from the end of each transcript; grown while it holds no whole line
MAX_TAIL_BYTES = 4 << 20  # a line longer than this (a 1.3 MB tool output is real) is not sampled
SAMPLE_LINES = 20  # newest lines per file
LIST_AT_MOST = 6  # paths named in a message; --json lists them all
TELEMETRY_KEYS = ("CLAUDE_CODE_ENABLE_TELEMETRY", "OTEL_METRICS_EXPORTER", "OTEL_TRACES_EXPORTER",
                  "OTEL_EXPORTER_PROMETHEUS_PORT", "OTEL_EXPORTER_PROMETHEUS_HOST", "OTEL_EXPORTER_OTLP_ENDPOINT",
                  "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
                  "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")


class Level(enum.IntEnum):
    OK = 0
    WARN = 1
    FAIL = 2

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class Finding:
    check: str  # roots, versions, format, state, traces, metrics, telemetry
    level: Level
    subject: str  # what it is about: a root, the state dir, an endpoint, an address
    message: str
    fix: str = ""  # what to do; empty when nothing is to be done
    data: Mapping[str, object] = field(default_factory=dict)  # the numbers and full lists, for --json

    def as_dict(self) -> dict[str, object]:
        return {"check": self.check, "level": self.level.label, "subject": self.subject, "message": self.message,
                "fix": self.fix, "data": dict(self.data)}


@dataclass(frozen=True)
class DoctorConfig:
    roots: tuple[str, ...]
    state_dir: str | None  # None: --state-dir none
    metrics_addr: str | None  # None: --metrics-addr none
    traces_exporter: str  # otlp | console | none
    env: Mapping[str, str]
    managed_settings: str = MANAGED_SETTINGS
    timeout_s: float = 3.0
    proc_locks: str = "/proc/locks"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Doctor's own options (--root and --state-dir come from cli.py's common options)."""
    parser.add_argument("--json", action="store_true", help="findings as JSON, for machines")
    parser.add_argument("--metrics-addr", default=DEFAULT_METRICS_ADDR,
                        help="the --metrics-addr ccotel run is (or will be) given; 'none' if disabled")
    parser.add_argument("--traces-exporter", choices=("otlp", "console", "none"), default="otlp",
                        help="the --traces-exporter ccotel run is given; otlp checks the OTEL_EXPORTER_OTLP_* backend")
    parser.add_argument("--timeout", type=float, default=3.0, metavar="S",
                        help="seconds to wait for the trace backend and the metrics port (default 3)")


def config_from_args(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> DoctorConfig:
    """The roots and state dir resolved as the other commands do (cli.py ``_options``, ``_state``)."""
    env = dict(os.environ) if env is None else env
    state_dir = getattr(args, "state_dir", None)
    metrics_addr = getattr(args, "metrics_addr", DEFAULT_METRICS_ADDR)
    return DoctorConfig(
        roots=tuple(getattr(args, "root", None) or default_roots(dict(env))),
        state_dir=None if state_dir == "none" else (state_dir or default_state_dir(dict(env))),
        metrics_addr=None if metrics_addr == "none" else metrics_addr,
        traces_exporter=getattr(args, "traces_exporter", "otlp"),
        env=env,
        timeout_s=getattr(args, "timeout", 3.0),
    )


def run(args: argparse.Namespace) -> int:
    """``ccotel doctor [--json]``: 0 when nothing failed, 1 when something did."""
    findings = diagnose(config_from_args(args))
    if getattr(args, "json", False):
        doc = {"status": max((f.level for f in findings), default=Level.OK).label,
               "exit_status": exit_status(findings), "findings": [f.as_dict() for f in findings]}
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        render_text(findings, sys.stdout)
    return exit_status(findings)


def exit_status(findings: Iterable[Finding]) -> int:
    return 1 if any(f.level is Level.FAIL for f in findings) else 0


def diagnose(cfg: DoctorConfig) -> list[Finding]:
    scans = [scan_root(root) for root in cfg.roots]
    telemetry, prometheus_ports = check_claude_code_telemetry(cfg)
    return [*check_roots(scans), *check_versions(scans), *check_format(scans), *check_state(cfg),
            *check_traces(cfg), *check_metrics(cfg, prometheus_ports), *telemetry]


# -- roots ---------------------------------------------------------------------------------------


class RootState(enum.Enum):
    OK = "ok"
    MISSING = "missing"
    NOT_A_DIR = "not_a_dir"
    UNREADABLE = "unreadable"
    NO_PROJECTS = "no_projects"


@dataclass(frozen=True)
class Sample:
    """What doctor looks at in one of the newest lines of a transcript."""

    version: str | None
    type: str | None
    fields: tuple[str, ...]


@dataclass(frozen=True)
class Denied:
    path: str
    is_dir: bool
    reason: str


@dataclass(frozen=True)
class RootScan:
    root: str
    state: RootState
    error: str = ""
    sessions: int = 0  # main transcripts
    subagents: int = 0  # 2.1.x subagents/ files and 2.0.x flat agent files
    denied: tuple[Denied, ...] = ()  # directories and files that could not be read
    outside: tuple[str, ...] = ()  # symlinks leaving the root: never read
    samples: tuple[tuple[str, tuple[Sample, ...]], ...] = ()  # (transcript, its newest lines)
    unparsed: int = 0  # sampled lines that are not one JSON object (a line being written, glued objects)


def scan_root(root: str) -> RootScan:
    """Walk ``root/projects`` as discover.scan does, but say what could not be read."""
    if not os.path.lexists(root):
        return RootScan(root, RootState.MISSING)
    if not os.path.isdir(root):
        return RootScan(root, RootState.NOT_A_DIR)
    try:
        os.listdir(root)
    except OSError as exc:
        return RootScan(root, RootState.UNREADABLE, exc.strerror or str(exc), denied=(Denied(root, True, _why(exc)),))
    projects = os.path.join(root, "projects")
    if not os.path.isdir(projects) or not within_root(root, projects):
        return RootScan(root, RootState.NO_PROJECTS)
    denied: list[Denied] = []
    outside: list[str] = []
    samples: list[tuple[str, tuple[Sample, ...]]] = []
    counts = {FileKind.MAIN: 0, FileKind.SUBAGENT: 0, FileKind.FLAT_AGENT: 0}
    unparsed = 0

    def walk_error(exc: OSError) -> None:
        denied.append(Denied(str(exc.filename), True, _why(exc)))

    for dirpath, dirnames, filenames in os.walk(projects, onerror=walk_error, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            tf = classify(root, path) if name.endswith(".jsonl") else None
            if tf is None:
                continue
            if os.path.islink(path) and not within_root(root, path):
                outside.append(path)
                continue
            try:
                lines = read_tail(path)
            except OSError as exc:
                denied.append(Denied(path, False, _why(exc)))
                continue
            if lines is None:
                continue  # not a regular file (a FIFO named .jsonl): discover reads none either
            counts[tf.kind] += 1
            sampled, bad = _samples(lines)
            unparsed += bad
            samples.append((path, sampled))
    return RootScan(root, RootState.OK, sessions=counts[FileKind.MAIN],
                    subagents=counts[FileKind.SUBAGENT] + counts[FileKind.FLAT_AGENT], denied=tuple(denied),
                    outside=tuple(outside), samples=tuple(samples), unparsed=unparsed)


def _why(exc: OSError) -> str:
    return "permission denied" if exc.errno in (errno.EACCES, errno.EPERM) else (exc.strerror or str(exc))


def read_tail(path: str, size: int = TAIL_BYTES, max_size: int = MAX_TAIL_BYTES,
              lines: int = SAMPLE_LINES) -> list[bytes] | None:
    """The newest whole lines of a file (at most ``lines``), reading only its end: ``size`` bytes,
    four times more while that holds no whole line, up to ``max_size``. None if not a regular file.
    The last line may be one still being written (it then does not parse)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not block doctor
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        end = st.st_size
        while True:
            start = max(end - size, 0)
            pieces = os.pread(fd, end - start, start).split(b"\n")
            # After the last newline: nothing, or a line still being written (or a file without a
            # final newline): sampled, but it does not count as the whole line the window must hold.
            last = pieces.pop()
            if start > 0:
                pieces = pieces[1:]  # the first piece is the end of a line that began before the window
            whole = [p for p in pieces if p.strip()]
            if whole or start == 0 or size >= max_size:
                return (whole + ([last] if last.strip() else []))[-lines:]
            size = min(size * 4, max_size)
    finally:
        os.close(fd)


def _samples(lines: Sequence[bytes]) -> tuple[tuple[Sample, ...], int]:
    out = []
    bad = 0
    for line in lines:
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            bad += 1
            continue
        if not isinstance(obj, dict):
            bad += 1
            continue
        version, kind = obj.get("version"), obj.get("type")
        out.append(Sample(version if isinstance(version, str) else None, kind if isinstance(kind, str) else None,
                          tuple(str(k) for k in obj)))
    return tuple(out), bad


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
            effects.append(f"{_count(len(dirs), 'directory', 'directories')} ccotel cannot list: the transcripts in "
                           "them are never seen, and nothing counts them")
        if files:
            effects.append(f"{_count(len(files), 'file', 'files')} ccotel cannot open: skipped, each counted once in "
                           "ccotel_parse_errors_total{reason=\"unreadable\"}")
        out.append(Finding("roots", Level.FAIL, s.root,
                           f"permission denied: {'; '.join(effects)}: {_listing(d.path for d in s.denied)}",
                           _access_fix(s.denied), {"denied": [dataclasses.asdict(d) for d in s.denied]}))
    if s.outside:
        out.append(Finding("roots", Level.WARN, s.root,
                           f"{len(s.outside)} transcript symlinks lead outside the root; ccotel never reads "
                           f"outside its roots: {_listing(s.outside)}",
                           "copy or move those transcripts under the root, or add their directory as a --root",
                           {"outside": list(s.outside)}))
    return out


def _count(n: int, one: str, many: str) -> str:
    return "" if n == 0 else f"1 {one}" if n == 1 else f"{n} {many}"


def _listing(paths: Iterable[str]) -> str:
    items = list(paths)
    shown = ", ".join(items[:LIST_AT_MOST])
    return shown + (f" and {len(items) - LIST_AT_MOST} more (--json lists them)" if len(items) > LIST_AT_MOST else "")


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _access_fix(denied: Sequence[Denied]) -> str:
    """Who owns what cannot be read and the two ways out: run ccotel as that user, or grant read."""
    me = _user(os.geteuid())
    owners = []
    for d in denied:
        try:
            owners.append(_user(os.stat(d.path).st_uid))
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


# -- versions and format --------------------------------------------------------------------------


def check_versions(scans: Sequence[RootScan]) -> list[Finding]:
    """The Claude Code versions in the sampled lines, grouped by where they stand against the matrix."""
    files: dict[str, set[str]] = defaultdict(set)
    for s in scans:
        for path, samples in s.samples:
            for sample in samples:
                if sample.version:
                    files[sample.version].add(path)
    sampled = sum(len(s.samples) for s in scans)
    if not files:
        if sampled:
            return [Finding("versions", Level.WARN, "transcripts", f"no version field in the newest lines of "
                            f"{sampled} transcripts", "nothing to do unless this is a Claude Code release that "
                            "dropped the field: then its lines are read as an unknown format")]
        return []
    by_standing: dict[VersionStanding, list[str]] = defaultdict(list)
    notes: dict[VersionStanding, dict[str, None]] = defaultdict(dict)  # ordered, unique
    for version in sorted(files, key=_version_key):
        verdict = judge_version(version)
        by_standing[verdict.standing].append(version)
        for note in verdict.notes:
            notes[verdict.standing][note] = None
    out = []
    for standing in VersionStanding:
        versions = by_standing.get(standing)
        if not versions:
            continue
        listed = ", ".join(f"{v} ({_count(len(files[v]), 'file', 'files')})" for v in versions)
        level = Level.OK if standing is VersionStanding.TESTED else Level.WARN
        fix = "" if level is Level.OK else _version_fix(standing)
        out.append(Finding("versions", level, "Claude Code", f"{listed}: {'; '.join(notes[standing])}", fix,
                           {"standing": standing.value, "versions": {v: len(files[v]) for v in versions}}))
    return out


def _version_key(version: str) -> tuple[int, tuple[int, ...], str]:
    parsed = parse_version(version)
    return (0, parsed, version) if parsed is not None else (1, (), version)


def _version_fix(standing: VersionStanding) -> str:
    if standing is VersionStanding.NEWER:
        return ("watch ccotel_format_unknown_total{version=...} once ccotel runs, and update ccotel when a "
                "release tested with this Claude Code version is out")
    if standing is VersionStanding.OLDER:
        return "nothing to do for history; update Claude Code for sessions to come"
    return "nothing to do; ccotel_format_unknown_total counts what ccotel does not know"


def check_format(scans: Sequence[RootScan]) -> list[Finding]:
    """Line types and top-level fields of the sampled lines that rules.py does not know."""
    types: dict[str, set[str]] = defaultdict(set)  # type -> versions
    type_lines: dict[str, int] = defaultdict(int)
    fields: dict[str, set[str]] = defaultdict(set)  # "type.field" -> versions
    lines = 0
    for s in scans:
        for _path, samples in s.samples:
            for sample in samples:
                lines += 1
                if sample.type is None:
                    continue
                version = sample.version or "unknown"
                if sample.type not in rules.KNOWN_LINE_TYPES:
                    types[sample.type].add(version)
                    type_lines[sample.type] += 1
                    continue
                known = rules.KNOWN_FIELDS[sample.type]
                for name in sample.fields:
                    if name not in known:
                        fields[f"{sample.type}.{name}"].add(version)
    if not lines:
        return []
    files = sum(len(s.samples) for s in scans)
    if not types and not fields:
        return [Finding("format", Level.OK, "transcripts", f"every line type and field of the {lines} newest lines "
                        f"of {files} transcripts is known", "", {"lines": lines, "files": files})]
    fix = ("nothing breaks: ccotel reads what it knows, and counts the rest in ccotel_format_unknown_total "
           "(kind=\"line_type\" / \"field\"); a ccotel release tested with that Claude Code version may read more")
    out = []
    if types:
        listed = ", ".join(f"{t} ({_count(type_lines[t], 'line', 'lines')}, version {', '.join(sorted(types[t]))})"
                           for t in sorted(types))
        per_type = {t: {"lines": type_lines[t], "versions": sorted(v)} for t, v in types.items()}
        out.append(Finding("format", Level.WARN, "transcripts", f"line types ccotel does not know: {listed}", fix,
                           {"line_types": per_type, "lines": lines, "files": files}))
    if fields:
        listed = ", ".join(f"{f} (version {', '.join(sorted(fields[f]))})" for f in sorted(fields))
        out.append(Finding("format", Level.WARN, "transcripts", f"top-level fields ccotel does not know: {listed}",
                           fix, {"fields": {f: sorted(v) for f, v in fields.items()}, "lines": lines,
                                 "files": files}))
    return out


# -- state ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LockProbe:
    exists: bool  # the lock file is there
    held: bool  # a process holds the flock
    holder: int | None  # the pid holding it (from /proc/locks), else the pid written in the file
    pid_alive: bool
    how: str  # "proc-locks" or "flock-probe"


def check_state(cfg: DoctorConfig) -> list[Finding]:
    d = cfg.state_dir
    if d is None:
        return [Finding("state", Level.WARN, "--state-dir none", "no checkpoints: every start reads, sends and "
                        "counts the whole history again", "give ccotel a state dir (the default is "
                        f"{default_state_dir(dict(cfg.env))}) unless that is what you want")]
    if not os.path.lexists(d):
        return [_state_to_create(d)]
    if not os.path.isdir(d):
        return [Finding("state", Level.FAIL, d, "is not a directory: ccotel run and backfill refuse to start (exit 1)",
                        "remove it or give another --state-dir")]
    return [_state_dir_access(d), *_state_db(d), _state_lock(d, cfg.proc_locks)]


def _state_to_create(d: str) -> Finding:
    parent = os.path.dirname(os.path.abspath(d))
    while not os.path.exists(parent) and parent != os.path.dirname(parent):
        parent = os.path.dirname(parent)
    if os.path.isdir(parent) and os.access(parent, os.W_OK | os.X_OK):
        return Finding("state", Level.OK, d, "does not exist yet: ccotel run creates it (mode 0700) at its first "
                       "start, which reads the whole history")
    return Finding("state", Level.FAIL, d, f"does not exist and cannot be created: {parent} is not writable by "
                   f"{_user(os.geteuid())}; ccotel run and backfill refuse to start (exit 1)",
                   f"create it for the user ccotel runs as (mkdir -m 700 -p {shlex.quote(d)}), or give another "
                   "--state-dir")


def _state_dir_access(d: str) -> Finding:
    st = os.stat(d)
    mode = stat.S_IMODE(st.st_mode)
    me = os.geteuid()
    data = {"mode": f"{mode:04o}", "owner": _user(st.st_uid)}
    if not os.access(d, os.W_OK | os.X_OK):
        return Finding("state", Level.FAIL, d, f"cannot be written by {_user(me)} (owner {_user(st.st_uid)}, mode "
                       f"{mode:04o}): ccotel run and backfill refuse to start (exit 1)",
                       f"run ccotel as {_user(st.st_uid)}, or give another --state-dir", data)
    if mode != 0o700:
        if st.st_uid != me and me != 0:
            return Finding("state", Level.FAIL, d, f"mode {mode:04o} and owned by {_user(st.st_uid)}: ccotel run "
                           "cannot make it private (0700) and refuses to start (exit 1)",
                           f"run ccotel as {_user(st.st_uid)}, or chmod 700 {shlex.quote(d)} as them", data)
        return Finding("state", Level.WARN, d, f"mode {mode:04o}, not 0700: others can read which transcripts exist "
                       "(ccotel run makes it 0700 when it starts)", f"chmod 700 {shlex.quote(d)}", data)
    return Finding("state", Level.OK, d, f"writable, mode 0700, owner {_user(st.st_uid)}", "", data)


def _state_db(d: str) -> list[Finding]:
    path = os.path.join(d, "state.db")
    if not os.path.exists(path):
        return [Finding("state", Level.OK, path, "no database yet: the first start reads (and sends) the whole "
                        "history")]
    size = sum(os.path.getsize(path + s) for s in ("", "-wal") if os.path.exists(path + s))
    # Read-only SQLite creates missing -wal/-shm files (as the user running doctor): when no ccotel
    # left them there, open the file as immutable instead; nothing is being written to it then.
    live = os.path.exists(path + "-wal") and os.path.exists(path + "-shm")
    uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro" + ("" if live else "&immutable=1")
    try:
        db = sqlite3.connect(uri, uri=True, timeout=1.0)
    except sqlite3.Error as exc:
        return [_db_unreadable(path, exc)]
    try:
        problems = [row[0] for row in db.execute("PRAGMA quick_check(3)")]
        if problems != ["ok"]:
            return [Finding("state", Level.WARN, path, f"fails SQLite's quick check ({'; '.join(problems)}): the next "
                            "ccotel run moves it aside (state.db.corrupt-<time>) and reads the history again; traces "
                            "are sent again with the same ids, counters start from the rebuilt totals",
                            "nothing to do (or restore a backup of it before the next start)", {"bytes": size})]
        schema = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        checkpointed = db.execute("SELECT COUNT(*) FROM files").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError) and "no such table" not in str(exc):
            return [_db_unreadable(path, exc)]
        return [Finding("state", Level.WARN, path, f"is not a ccotel state database ({exc}): the next ccotel run "
                        "moves it aside and reads the history again", "nothing to do, or give another --state-dir",
                        {"bytes": size})]
    finally:
        db.close()
    data = {"bytes": size, "schema": schema[0] if schema else None, "files_checkpointed": checkpointed}
    if schema is None or str(schema[0]) != str(SCHEMA_VERSION):
        return [Finding("state", Level.FAIL, path, f"schema {schema[0] if schema else 'missing'}, this ccotel knows "
                        f"{SCHEMA_VERSION}: ccotel run and backfill refuse it",
                        "use the ccotel version that wrote it, or give another --state-dir", data)]
    return [Finding("state", Level.OK, path, f"opens read-only, schema {SCHEMA_VERSION}, {size / 1e6:.1f} MB, "
                    f"{checkpointed} files checkpointed", "", data)]


def _db_unreadable(path: str, exc: BaseException) -> Finding:
    return Finding("state", Level.FAIL, path, f"cannot be opened read-only ({exc}): ccotel run and backfill refuse "
                   "to start (exit 1)", "run ccotel (and doctor) as the user who owns the state dir, or give "
                   "another --state-dir")


def _state_lock(d: str, proc_locks: str) -> Finding:
    path = os.path.join(d, LOCK_NAME)
    probe = probe_lock(path, proc_locks)
    data = dataclasses.asdict(probe)
    if not probe.exists:
        return Finding("state", Level.OK, path, "no lock file: no ccotel has run on this state dir", "", data)
    if probe.held:
        who = f"pid {probe.holder}" if probe.holder else "a process whose pid is not known"
        cmd = _cmdline(probe.holder) if probe.holder else ""
        return Finding("state", Level.OK, path, f"held by {who}{f' ({cmd})' if cmd else ''}: a ccotel runs on this "
                       "state dir; a second ccotel run or backfill on it would exit 75",
                       "", data)
    last = f" (last held by pid {probe.holder})" if probe.holder else ""
    return Finding("state", Level.OK, path, f"free: no ccotel runs on this state dir{last}", "", data)


def probe_lock(path: str, proc_locks: str = "/proc/locks") -> LockProbe:
    """Whether a process holds the flock on ``path``, without taking it: /proc/locks names the
    holder. Where it cannot be read, a shared non-blocking flock is tried and released at once (a
    ccotel starting in that instant would see the state dir locked)."""
    try:
        st = os.stat(path)
    except OSError:
        return LockProbe(False, False, None, False, "none")
    written = _pid_in(path)
    holders = _flock_holders(proc_locks, st.st_dev, st.st_ino)
    if holders is not None:
        holder = holders[0] if holders else written
        return LockProbe(True, bool(holders), holder, _alive(holder), "proc-locks")
    held = _flock_probe(path)
    return LockProbe(True, held, written, _alive(written), "flock-probe")


def _pid_in(path: str) -> int | None:
    try:
        with open(path, "rb") as f:
            text = f.read(64).decode("ascii", "replace").split()
        return int(text[0]) if text else None
    except (OSError, ValueError):
        return None


def _flock_holders(proc_locks: str, dev: int, ino: int) -> list[int] | None:
    """Pids holding a FLOCK on (dev, ino) per /proc/locks ("1: FLOCK ADVISORY WRITE <pid> <maj>:<min>:<ino>
    0 EOF", major and minor in hex; waiters are "1: -> FLOCK ..."). None when it cannot be read."""
    try:
        with open(proc_locks, encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    want = (os.major(dev), os.minor(dev), ino)
    pids = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 6 or parts[1] != "FLOCK":
            continue
        try:
            major, minor, inode = parts[5].split(":")
            if (int(major, 16), int(minor, 16), int(inode)) == want:
                pids.append(int(parts[4]))
        except ValueError:
            continue
    return pids


def _flock_probe(path: str) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        return exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
    finally:
        os.close(fd)  # releases the shared lock, if it was taken
    return False


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read(4096).split(b"\0")
    except OSError:
        return ""
    text = " ".join(a.decode("utf-8", "replace") for a in args if a)
    return text if len(text) <= 100 else text[:99] + "…"


# -- trace backend ------------------------------------------------------------------------------


_BACKEND_FIX = ("start the backend, or point ccotel at one: OTEL_EXPORTER_OTLP_ENDPOINT (base URL) or "
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (full URL), OTEL_EXPORTER_OTLP_PROTOCOL=grpc|http/protobuf; "
                "for metrics only, --traces-exporter none. Meanwhile ccotel run keeps up to 20,000 spans and "
                "sends them once it answers")


def check_traces(cfg: DoctorConfig) -> list[Finding]:
    if cfg.traces_exporter != "otlp":
        return [Finding("traces", Level.OK, f"--traces-exporter {cfg.traces_exporter}",
                        "spans go to no backend" if cfg.traces_exporter == "none" else "spans are printed on stdout")]
    env, out = _supported_protocol(cfg.env)
    settings = otlp_settings(env)
    subject = f"{settings.endpoint} ({settings.protocol})"
    try:
        host, port = _endpoint_address(settings)
    except ValueError as exc:
        return [*out, Finding("traces", Level.FAIL, subject, f"not an endpoint ccotel can use ({exc})", _BACKEND_FIX)]
    try:
        with socket.create_connection((host, port), timeout=cfg.timeout_s):
            pass
    except OSError as exc:
        return [*out, Finding("traces", Level.FAIL, subject, f"nothing accepts connections on {host}:{port} "
                              f"({exc.strerror or exc}): spans cannot be delivered", _BACKEND_FIX,
                              {"endpoint": settings.endpoint, "protocol": settings.protocol})]
    result = _empty_export(settings, cfg.timeout_s)
    data = {"endpoint": settings.endpoint, "protocol": settings.protocol, "outcome": result.outcome.value,
            "answer": result.message}
    if result.outcome is Outcome.OK:
        return [*out, Finding("traces", Level.OK, subject, "reachable: it accepted an empty export", "", data)]
    level = Level.WARN if result.reason == REASON_THROTTLED else Level.FAIL
    return [*out, Finding("traces", level, subject, f"reachable, but it refused an empty export: {result.message}",
                          _answer_fix(settings, result), data)]


def _supported_protocol(env: Mapping[str, str]) -> tuple[dict[str, str], list[Finding]]:
    """ccotel speaks grpc and http/protobuf; anything else falls back to http/protobuf (export.py)."""
    out = dict(env)
    findings = []
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        value = out.get(name, "").strip()
        if value and value not in ("grpc", "http/protobuf"):
            findings.append(Finding("traces", Level.WARN, f"{name}={value}", "a protocol ccotel does not speak: "
                                    "it sends http/protobuf instead", f"set {name}=http/protobuf or grpc, as the "
                                    "backend expects"))
            out[name] = "http/protobuf"
    return out, findings


def _endpoint_address(settings: OtlpSettings) -> tuple[str, int]:
    ep = settings.endpoint
    url = urllib.parse.urlsplit(ep if "://" in ep else f"http://{ep}")
    if url.scheme not in ("http", "https"):
        raise ValueError(f"scheme {url.scheme!r}")
    default = 443 if url.scheme == "https" else 4317 if settings.protocol == "grpc" else 80
    return url.hostname or "localhost", url.port or default  # .port raises ValueError on a bad one


def _empty_export(settings: OtlpSettings, timeout_s: float) -> ExportResult:
    """Send an empty ExportTraceServiceRequest (zero bytes in protobuf) the way ccotel sends spans."""
    config = dataclasses.replace(settings.transport, timeout_s=timeout_s)
    if settings.protocol == "grpc":
        try:
            from ccotel.export.transport import GrpcTransport

            transport: HttpTransport | GrpcTransport = GrpcTransport(config)
        except (ImportError, OSError) as exc:
            return ExportResult.retry("connection", f"cannot set up gRPC: {exc}")
    else:
        transport = HttpTransport(config)
    try:
        return transport.send(b"", 0)
    finally:
        transport.close()


def _answer_fix(settings: OtlpSettings, result: ExportResult) -> str:
    text = result.message
    if "HTTP 404" in text or "UNIMPLEMENTED" in text:
        if settings.protocol == "grpc":
            return ("this is not an OTLP/gRPC trace service: check the port (4317 is the usual OTLP/gRPC one) or "
                    "set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf if it speaks HTTP")
        return ("wrong path: OTLP/HTTP traces go to /v1/traces. OTEL_EXPORTER_OTLP_ENDPOINT is the base URL (ccotel "
                "adds /v1/traces), OTEL_EXPORTER_OTLP_TRACES_ENDPOINT the full URL")
    if "HTTP 401" in text or "HTTP 403" in text or "UNAUTHENTICATED" in text or "PERMISSION_DENIED" in text:
        return "the backend wants credentials: OTEL_EXPORTER_OTLP_HEADERS=\"Authorization=Bearer <token>\""
    if "HTTP 415" in text or "HTTP 400" in text:
        return ("it does not take OTLP protobuf here: check the endpoint, or OTEL_EXPORTER_OTLP_PROTOCOL=grpc if "
                "the port speaks gRPC")
    if "SSL" in text or "certificate" in text.lower():
        return "TLS failed: OTEL_EXPORTER_OTLP_CERTIFICATE=<CA file>, or http:// if the backend has no TLS"
    if result.reason == REASON_THROTTLED:
        return "the backend is throttling: ccotel waits as long as it asks; nothing to do unless it lasts"
    return _BACKEND_FIX


# -- metrics port -------------------------------------------------------------------------------


def check_metrics(cfg: DoctorConfig, claude_code_ports: Mapping[int, Sequence[str]]) -> list[Finding]:
    if cfg.metrics_addr is None:
        return [Finding("metrics", Level.OK, "--metrics-addr none", "metrics are not served")]
    addr = cfg.metrics_addr
    host, _, port_text = addr.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"  # as cli.py's _metrics_server
    try:
        port = int(port_text)
        if not 0 < port < 65536:
            raise ValueError
    except ValueError:
        return [Finding("metrics", Level.FAIL, addr, "not host:port", "--metrics-addr 127.0.0.1:9477")]
    out = []
    if not _is_loopback(host):
        out.append(Finding("metrics", Level.WARN, addr, f"binds {host}: anyone who can reach it reads /metrics "
                           "(ccotel binds the loopback by default)", "--metrics-addr 127.0.0.1:" + str(port) +
                           " and scrape it from this host, unless exposing it is meant"))
    if port in claude_code_ports:
        out.append(Finding("metrics", Level.FAIL, addr, f"Claude Code's own Prometheus exporter listens on port {port} "
                           f"too ({', '.join(claude_code_ports[port])}): whichever starts second cannot serve",
                           "--metrics-addr 127.0.0.1:9477 (ccotel's default), or move Claude Code's with "
                           "OTEL_EXPORTER_PROMETHEUS_PORT"))
    elif port == CLAUDE_CODE_PROMETHEUS_PORT:
        out.append(Finding("metrics", Level.WARN, addr, f"{port} is the port Claude Code's own Prometheus exporter "
                           "takes when its telemetry is turned on (OTEL_METRICS_EXPORTER=prometheus)",
                           "--metrics-addr 127.0.0.1:9477 (ccotel's default)"))
    out.append(_port_finding(addr, host, port, cfg.timeout_s))
    return out


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _port_finding(addr: str, host: str, port: int, timeout_s: float) -> Finding:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        return Finding("metrics", Level.FAIL, addr, f"cannot resolve {host} ({exc})", "--metrics-addr 127.0.0.1:9477")
    family, kind, proto, _, sockaddr = infos[0]
    with socket.socket(family, kind, proto) as sock:
        # As the HTTP server ccotel starts (prometheus_client): SO_REUSEADDR, so a port in TIME_WAIT is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(sockaddr)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                return Finding("metrics", Level.FAIL, addr, f"ccotel run cannot listen there ({exc.strerror or exc})",
                               "--metrics-addr with an address of this host and a port above 1023 "
                               "(127.0.0.1:9477 is the default)")
        else:
            return Finding("metrics", Level.OK, addr, "free: ccotel run can serve /metrics there")
    who = _who_serves(host, port, timeout_s)
    if who.startswith("ccotel"):
        return Finding("metrics", Level.OK, addr, f"already served by a running {who}", "",
                       {"in_use_by": "ccotel"})
    return Finding("metrics", Level.FAIL, addr, f"in use by {who}: ccotel run could not serve /metrics there",
                   "stop it, or give ccotel another --metrics-addr (127.0.0.1:9477 is the default)",
                   {"in_use_by": who})


def _who_serves(host: str, port: int, timeout_s: float) -> str:
    """What answers GET /metrics on a port in use: ccotel (its build info), Claude Code, or something else."""
    target = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    conn = http.client.HTTPConnection(target, port, timeout=timeout_s)
    try:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        body = resp.read(1 << 20).decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as exc:
        return f"something that does not answer HTTP ({type(exc).__name__})"
    finally:
        conn.close()
    for line in body.splitlines():
        if line.startswith("ccotel_build_info{"):
            version = line.partition('version="')[2].partition('"')[0]
            return f"ccotel {version}".strip()
    if "claude_code_" in body:
        return "Claude Code's own Prometheus exporter"
    return f"another HTTP server (GET /metrics: {resp.status}, no ccotel_build_info)"


# -- Claude Code's own telemetry ----------------------------------------------------------------


@dataclass(frozen=True)
class _EnvSource:
    name: str  # "the environment" or a settings file
    env: Mapping[str, str]


def check_claude_code_telemetry(cfg: DoctorConfig) -> tuple[list[Finding], dict[int, list[str]]]:
    """Claude Code's telemetry as its settings would set it for each root: the environment, then
    the root's settings.json and settings.local.json ``env``, then the managed settings (which win).
    Returns the findings and the ports its Prometheus exporter would take, with where that is set."""
    findings: list[Finding] = []
    managed, bad = _settings_env(cfg.managed_settings)
    findings += bad
    ports: dict[int, list[str]] = defaultdict(list)
    said: set[str] = set()
    enabled = False
    environment = _EnvSource("the environment", {k: v for k, v in cfg.env.items() if k in TELEMETRY_KEYS})
    for root in cfg.roots:
        sources = [environment]
        for name in ("settings.json", "settings.local.json"):
            found, bad = _settings_env(os.path.join(root, name))
            findings += bad
            sources += found
        sources += managed
        merged: dict[str, tuple[str, str]] = {}  # key -> (value, where)
        for source in sources:
            for key, value in source.env.items():
                merged[key] = (value, source.name)
        on = merged.get("CLAUDE_CODE_ENABLE_TELEMETRY")
        if on is None or not _truthy(on[0]):
            continue
        enabled = True
        for finding in _telemetry_findings(cfg, root, merged, ports):
            if finding.message not in said:  # the environment and managed settings apply to every root
                said.add(finding.message)
                findings.append(finding)
    if not enabled:
        findings.append(Finding("telemetry", Level.OK, "Claude Code", "its own telemetry is off (no "
                                "CLAUDE_CODE_ENABLE_TELEMETRY in the environment, the roots' settings or managed "
                                "settings): no port or backend shared with ccotel"))
    return findings, {port: sorted(set(where)) for port, where in ports.items()}


def _settings_env(path: str) -> tuple[list[_EnvSource], list[Finding]]:
    try:
        with open(path, "rb") as f:
            doc = orjson.loads(f.read())
    except FileNotFoundError:
        return [], []
    except (OSError, orjson.JSONDecodeError) as exc:
        reason = _why(exc) if isinstance(exc, OSError) else f"not JSON: {exc}"
        return [], [Finding("telemetry", Level.WARN, path, f"cannot be read ({reason}): Claude Code's telemetry "
                            "settings there are not known to doctor", "")]
    env = doc.get("env") if isinstance(doc, dict) else None
    if not isinstance(env, dict):
        return [], []
    return [_EnvSource(path, {k: str(v) for k, v in env.items() if k in TELEMETRY_KEYS})], []


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _telemetry_findings(cfg: DoctorConfig, root: str, merged: Mapping[str, tuple[str, str]],
                        ports: dict[int, list[str]]) -> list[Finding]:
    """Claude Code's telemetry is on for ``root`` (merged: key -> (value, where it is set))."""
    env = {k: v for k, (v, _) in merged.items()}
    out = [Finding("telemetry", Level.OK, "Claude Code", f"its own telemetry is on for {root} "
                   f"(CLAUDE_CODE_ENABLE_TELEMETRY from {merged['CLAUDE_CODE_ENABLE_TELEMETRY'][1]})", "",
                   {"root": root, "set_in": {k: where for k, (_, where) in merged.items()}})]
    metrics = [m.strip() for m in env.get("OTEL_METRICS_EXPORTER", "").split(",")]
    if "prometheus" in metrics:
        try:
            port = int(env.get("OTEL_EXPORTER_PROMETHEUS_PORT") or CLAUDE_CODE_PROMETHEUS_PORT)
        except ValueError:
            port = CLAUDE_CODE_PROMETHEUS_PORT
        where = merged["OTEL_METRICS_EXPORTER"][1]
        ports[port].append(where)
        out.append(Finding("telemetry", Level.OK, "Claude Code", f"serves its own Prometheus metrics on port {port} "
                           f"(OTEL_METRICS_EXPORTER=prometheus from {where})", "", {"port": port}))
    traces = [t.strip() for t in env.get("OTEL_TRACES_EXPORTER", "").split(",")]
    if "otlp" in traces and cfg.traces_exporter == "otlp":
        theirs = otlp_settings(_supported_protocol(env)[0])
        ours = otlp_settings(_supported_protocol(cfg.env)[0])
        if _same_backend(theirs, ours):
            out.append(Finding("telemetry", Level.WARN, ours.endpoint, "Claude Code sends its own traces to the "
                               f"backend ccotel sends to (OTEL_TRACES_EXPORTER=otlp from "
                               f"{merged['OTEL_TRACES_EXPORTER'][1]}): each turn is there twice, as Claude Code's "
                               "spans and as ccotel's, with different ids",
                               "keep one: unset OTEL_TRACES_EXPORTER for Claude Code, or tell them apart by "
                               "service.name (ccotel's is \"ccotel\")", {"claude_code": theirs.endpoint}))
    return out


def _same_backend(a: OtlpSettings, b: OtlpSettings) -> bool:
    try:
        (ha, pa), (hb, pb) = _endpoint_address(a), _endpoint_address(b)
    except ValueError:
        return False
    return pa == pb and (ha == hb or _is_local(ha) and _is_local(hb))


def _is_local(host: str) -> bool:
    return _is_loopback(host) or host in ("0.0.0.0", "::")


# -- output --------------------------------------------------------------------------------------


def render_text(findings: Sequence[Finding], out: TextIO) -> None:
    """A table for people: level, check, what was found and, under it, what to do."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(file=out, width=None if out.isatty() else 120)  # 80 columns off a terminal fold every path
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False, expand=False)
    table.add_column("", no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("finding", overflow="fold")
    style = {Level.OK: "green", Level.WARN: "yellow", Level.FAIL: "bold red"}
    for f in findings:
        cell = Text()
        cell.append(f.subject, style="bold")
        cell.append(f": {f.message}")
        if f.fix:
            cell.append(f"\n→ {f.fix}", style="cyan")
        table.add_row(Text(f.level.label.upper() if f.level is Level.FAIL else f.level.label, style=style[f.level]),
                      f.check, cell)
    fails = sum(f.level is Level.FAIL for f in findings)
    warns = sum(f.level is Level.WARN for f in findings)
    verdict = (f"{fails} failed" if fails else "nothing failed") + (f", {warns} warnings" if warns else "")
    with console.capture() as captured:
        console.print(table)
        console.print(Text(verdict, style=style[Level.FAIL if fails else Level.WARN if warns else Level.OK]))
    # rich pads every cell to its column's width: no trailing blanks in a log or a diff
    out.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))

