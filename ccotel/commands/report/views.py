"""The names ``ccotel report``'s command line takes for its views and week starts (rows.py sums
them; the command's parser is built before anything is summed)."""

from __future__ import annotations

__all__ = ["VIEWS", "WEEKDAYS"]

VIEWS = ("daily", "weekly", "monthly", "session", "project")
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
