"""Tests of ccotel as a whole, across packages: bad input, crashes, faults, the counting model, property
tests, a fleet on PostgreSQL, totals against ccusage, the docs."""
