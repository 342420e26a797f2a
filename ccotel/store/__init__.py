"""Storage: checkpoints and counter totals, and the usage ledger.

The state is one interface (state.py) with two backends, SQLite on one host (sqlite.py) and
PostgreSQL for a fleet (postgres.py); backends.py opens the one a location names. The usage
ledger is SQLite beside the state (ledger.py, its rows made of spans in ledger_rows.py) or
PostgreSQL for a fleet (postgres_ledger.py)."""
