"""Tests of ccotel/sources/: an orchestrator's agent registry and log lines."""
