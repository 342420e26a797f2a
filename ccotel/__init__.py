"""ccotel: Claude Code transcripts to OpenTelemetry traces and Prometheus metrics."""

__version__ = "0.1.0"
