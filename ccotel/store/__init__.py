"""Storage: checkpoints and counter totals (SQLite on one host, PostgreSQL for a fleet) and the usage ledger."""
