"""Metrics: counters from the spans and detectors, served to Prometheus and as GenAI metrics over OTLP."""
