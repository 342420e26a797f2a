"""Opening the usage ledger for a writer's start: a damaged ``ledger.db`` is set aside (the rule the
state follows: aside.py) and a new one started, which the caller fills from the transcripts still
on disk (runner.fill_ledger). Only a writer does this, once per start: a report never moves a file."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ccotel.store.aside import set_aside
from ccotel.store.ledger import Ledger, LedgerCorrupt, LedgerError

__all__ = ["open_or_rebuild"]

log = logging.getLogger("ccotel.state")


def open_or_rebuild(path: str, roots: Sequence[str]) -> tuple[Ledger, str | None]:
    """The ledger at ``path``, checked; if it is damaged, the one started in its place and where the
    damaged file went. LedgerError: it cannot be used (another schema version, not writable)."""
    try:
        return Ledger(path, roots, verify=True), None
    except LedgerCorrupt as exc:
        damage = str(exc).removeprefix(f"{path}: ")
    try:
        aside = set_aside(path)
    except OSError as exc:
        raise LedgerError(f"{path} is damaged ({damage}) and cannot be moved aside: {exc}") from None
    ledger = Ledger(path, roots)
    log.error("the usage ledger %s is damaged (%s); set it aside as %s and started a new one, filled from the "
              "transcripts still on disk: usage older than those transcripts (deleted by Claude Code's cleanup) "
              "is gone from reports unless %s is recovered (sqlite3 .recover)", path, damage, aside, aside)
    return ledger, aside
