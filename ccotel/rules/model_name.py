"""The model a call is reported and priced under: a module of its own, with no imports, so a
report the ledger answers alone loads it without rules/transcript.py (and records.py, which slow its start)."""

from __future__ import annotations

__all__ = ["SYNTHETIC_MODEL", "reported_model"]

# The model of lines Claude Code wrote itself (all versions: "No response requested." after an
# interrupt or a repair, API error lines): never a call to price.
SYNTHETIC_MODEL = "<synthetic>"


def reported_model(model: str | None) -> str | None:
    """The model a call is reported and priced under (None for synthetic lines)."""
    return model if model and model != SYNTHETIC_MODEL else None
