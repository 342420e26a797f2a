"""Tests of tests/support/ itself: ccusage, Phoenix and Prometheus as the suite uses them."""
