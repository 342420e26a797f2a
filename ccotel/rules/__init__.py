"""The rules of the Claude Code transcript: a leaf every stage asks (no ccotel imports but records)."""
