"""Running: the pipeline wired (read -> assemble -> spans -> export -> checkpoint), the loops that
drive it, the catch-up workers, and how it stops."""
