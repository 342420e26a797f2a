"""Tests of ccotel/export/: the OTLP encoder, the transport, export results, a backend away, Phoenix."""
