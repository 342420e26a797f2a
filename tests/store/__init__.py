"""Tests of ccotel/store/: the state on SQLite and PostgreSQL, the usage ledger."""
