"""The Claude Code versions ccotel is tested against, and what is known of the others.

``TESTED_CLAUDE_CODE_VERSIONS`` is the live-CLI matrix of the test suite (``tests/harness/install.py``
``VERSIONS``; a test keeps the two equal, since the package cannot import its tests). What is said of
a version outside it comes from docs/format.md (sections 1b and 4.2): public transcripts of
Claude Code 1.0.17 to 2.1.237 are read by the tests, the real CLI only in the matrix.

``parse_version`` is the one reading of a version string, for these verdicts and for the rules that
depend on a version (rules/transcript.py), so that all of them compare versions alike.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

__all__ = ["TESTED_CLAUDE_CODE_VERSIONS", "VersionStanding", "VersionVerdict", "parse_version", "judge_version"]

#: Oldest first: every scenario is recorded with the real CLI of each (tests/fixtures).
TESTED_CLAUDE_CODE_VERSIONS: tuple[str, ...] = ("2.1.197", "2.1.330", "2.1.332")

# MAJOR.MINOR[.PATCH] of ASCII digits, then nothing or a suffix that is not more of the number.
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?(?![\d.])", re.ASCII)

# Versions whose transcripts the tests read (public ones, shared/realdata), the CLI matrix aside.
_REALDATA_RANGE = ((1, 0, 17), (2, 1, 237))


class VersionStanding(enum.Enum):
    TESTED = "tested"  # in the matrix
    OLDER = "older"  # older than the oldest tested
    BETWEEN = "between"  # between two tested versions
    NEWER = "newer"  # newer than the newest tested
    UNREADABLE = "unreadable"  # not a dotted version number


@dataclass(frozen=True)
class VersionVerdict:
    version: str
    standing: VersionStanding
    #: What is known of this version's transcripts, for the operator: the first says where it
    #: stands, the others (older versions) what their format does not record or records elsewhere.
    notes: tuple[str, ...]

    @property
    def note(self) -> str:
        return "; ".join(self.notes)


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """A Claude Code version as (major, minor, patch), the one reading every rule compares:
    '2.1.330' -> (2, 1, 330). A missing patch is 0 ('2.1' -> (2, 1, 0)), so that versions compare
    as numbers; a pre-release or build suffix is ignored ('2.2.0-beta.1' -> (2, 2, 0)), and so is
    white space around it. None when absent or not a version ('', 'abc', '2', '2.1.3.4')."""
    if not text:
        return None
    m = _VERSION.match(text.strip())
    if m is None:
        return None
    major, minor, patch = m.groups()
    try:
        return int(major), int(minor), int(patch or 0)
    except ValueError:  # a number of more digits than int() reads: a line's version is any string
        return None


def judge_version(version: str, tested: tuple[str, ...] = TESTED_CLAUDE_CODE_VERSIONS) -> VersionVerdict:
    """Where ``version`` stands against the tested matrix, with what is known of its format."""
    parsed = parse_version(version)
    matrix = sorted(v for v in (parse_version(t) for t in tested) if v is not None)
    if version in tested:
        return VersionVerdict(version, VersionStanding.TESTED, ("in the tested matrix",))
    if parsed is None or not matrix:
        return VersionVerdict(version, VersionStanding.UNREADABLE, (
            "not a version number: its lines are read like any other, unknown fields and line types are "
            "counted in ccotel_format_unknown_total",))
    oldest, newest = ".".join(map(str, matrix[0])), ".".join(map(str, matrix[-1]))
    if parsed > matrix[-1]:
        return VersionVerdict(version, VersionStanding.NEWER, (
            f"newer than {newest}, the newest tested: not tested yet, ccotel counts unknown fields/line types "
            "in ccotel_format_unknown_total",))
    if parsed < matrix[0]:
        return VersionVerdict(version, VersionStanding.OLDER,
                              (f"older than {oldest}, the oldest tested: an older format", *_older_notes(parsed)))
    return VersionVerdict(version, VersionStanding.BETWEEN, (
        f"between the tested {oldest} and {newest}: not tested itself",
        *_realdata_notes(parsed)))


def _realdata_notes(v: tuple[int, ...]) -> tuple[str, ...]:
    low, high = _REALDATA_RANGE
    if low <= v <= high:
        return ("ccotel's tests read public transcripts of 1.0.17 to 2.1.237",)
    return ()


def _older_notes(v: tuple[int, ...]) -> tuple[str, ...]:
    """What docs/format.md records of the older formats that changes what ccotel can see."""
    notes = list(_realdata_notes(v))
    if v < (2, 0):
        notes.append("1.0.x wrote subagent lines inline in the parent file")
    elif v < (2, 1):
        notes.append("2.0.x wrote flat agent-<id>.jsonl files beside the session")
    if (2, 1, 12) <= v <= (2, 1, 29):
        notes.append("2.1.12-2.1.29 mostly never wrote a response's final output_tokens: output token counts "
                     "from them are low, the true count is not in the file")
    return tuple(notes)
