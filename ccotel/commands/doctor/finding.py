"""What each check reports: a finding, ok / warn / fail, and what to do about it. The worst level
decides the exit status.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["Level", "Finding", "exit_status"]


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


def exit_status(findings: Iterable[Finding]) -> int:
    return 1 if any(f.level is Level.FAIL for f in findings) else 0
