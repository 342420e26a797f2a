"""The versions and format checks, on the lines the root scan sampled: the Claude Code versions
against the tested matrix (rules/versions.py), and the line types and top-level fields
rules/transcript.py does not know.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from ccotel.commands.doctor.finding import Finding, Level
from ccotel.commands.doctor.root_scan import RootScan
from ccotel.commands.doctor.wording import counted
from ccotel.rules import transcript as rules
from ccotel.rules.versions import VersionStanding, judge_version, parse_version

__all__ = ["check_versions", "check_format"]


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
        listed = _listed(versions, files)
        level = Level.OK if standing is VersionStanding.TESTED else Level.WARN
        fix = "" if level is Level.OK else _version_fix(standing)
        out.append(Finding("versions", level, "Claude Code", f"{listed}: {'; '.join(notes[standing])}", fix,
                           {"standing": standing.value, "versions": {v: len(files[v]) for v in versions}}))
    return out


_LISTED = 4  # more versions than this read as a range (--json has each with its file count)


def _listed(versions: Sequence[str], files: dict[str, set[str]]) -> str:
    """``2.1.330 (3 files)``, or for many ``35 versions, 1.0.17 to 2.1.42 (107 files)``: issue 28's
    12-line list of 35 versions said no more than its range."""
    if len(versions) <= _LISTED:
        return ", ".join(f"{v} ({counted(len(files[v]), 'file', 'files')})" for v in versions)
    total = len(set().union(*(files[v] for v in versions)))
    return f"{len(versions)} versions, {versions[0]} to {versions[-1]} ({counted(total, 'file', 'files')})"


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
    """Line types and top-level fields of the sampled lines that rules/transcript.py does not know."""
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
        listed = ", ".join(f"{t} ({counted(type_lines[t], 'line', 'lines')}, version {', '.join(sorted(types[t]))})"
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
