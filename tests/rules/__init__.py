"""Tests of ccotel/rules/: the transcript rules and the reading of a Claude Code version."""
