"""The commands: one module per ``ccotel`` command, named after it."""
