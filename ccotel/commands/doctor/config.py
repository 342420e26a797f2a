"""What doctor checks, resolved once from the command line and the environment: every check takes
this one record, so a test can point each of them at things it owns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ccotel.read.procs import PROC_LOCKS

__all__ = ["DoctorConfig", "MANAGED_SETTINGS"]

#: Claude Code's managed settings on Linux (the administrators' file; its ``env`` wins over the user's).
MANAGED_SETTINGS = "/etc/claude-code/managed-settings.json"


@dataclass(frozen=True)
class DoctorConfig:
    roots: tuple[str, ...]
    state_dir: str | None  # a dir or a postgresql:// URL; None: --state none
    metrics_addr: str | None  # None: --metrics-addr none
    traces_exporter: str  # otlp | console | none
    env: Mapping[str, str]
    managed_settings: str = MANAGED_SETTINGS
    timeout_s: float = 3.0
    proc_locks: str = PROC_LOCKS
