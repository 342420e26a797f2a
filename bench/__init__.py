"""Benchmarks for ccotel: a corpus generator (``bench.corpus``) and one runner (``bench.run``).

See bench/NOTES.md for what is measured, the numbers and the profile findings.
"""
