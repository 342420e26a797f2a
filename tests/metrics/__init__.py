"""Tests of ccotel/metrics/: the Prometheus counters, the counted events, the GenAI metrics."""
