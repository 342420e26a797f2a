"""ccotel top: the live view of running sessions (view: the terminal view; rows: what a row says)."""
