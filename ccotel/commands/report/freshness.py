"""Whether the usage ledger is current: no transcript under the roots written since its last
write (less a grace for turns still open then). Kept apart from the ledger's sums: a report with a
kept answer (kept.py) asks this and nothing else."""

from __future__ import annotations

import os

from ccotel.read.layout import projects_dir

TYPE_CHECKING = False  # typing is not loaded on this path: mypy reads this block, Python does not
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["REREAD_GRACE_NS", "written_since"]

# Files written this long before the ledger's last write are read again from the transcripts: a
# turn still open then (its calls not yet finished) is in the file, not yet in the ledger.
REREAD_GRACE_NS = 15 * 60 * 1_000_000_000


def written_since(roots: Sequence[str], since_ns: int) -> bool:
    """False if no transcript under ``roots`` was modified at or after ``since_ns``: then
    ``gather`` reads nothing from the transcripts and the ledger answers alone. Every ``.jsonl``
    under ``<root>/projects`` (directories entered as discover.scan enters them: not through a
    symlink) is looked at, a superset of the transcripts; one that cannot be stat'ed counts as
    written (the transcripts are read then, which is never wrong, only slower)."""
    stack = [projects_dir(root) for root in roots]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                entries = list(it)
        except OSError:
            continue  # scan reads nothing from a directory it cannot list either
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            if is_dir:
                if not entry.is_symlink():
                    stack.append(entry.path)
            elif entry.name.endswith(".jsonl"):
                try:
                    if entry.stat().st_mtime_ns >= since_ns:
                        return True
                except OSError:
                    return True
    return False
