"""Tests of ccotel/commands/: check, doctor, report (and its ledger sums), sessions, trace, relay."""
