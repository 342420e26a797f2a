"""``ccotel doctor``: what an operator needs checked, each finding ok / warn / fail with what to do.

Checks, in order: the roots (there, readable, how many transcripts, what cannot be read), the
Claude Code versions and line types and fields in the newest lines of each transcript (their tails
only), the state dir (permissions, the database opened read-only, the lock), the trace backend
(reachable, what it answers an empty export), the metrics port (free, a ccotel, something else) and
Claude Code's own telemetry (a Prometheus port clash, traces sent twice).

Doctor changes nothing: it creates no state dir, lock or database file (SQLite opened read-only
would create ``-wal``/``-shm`` files, owned by whoever runs doctor: it is opened immutable when
they are absent), takes no lock (a lock is seen in /proc/locks; only where that cannot be read is
it probed with a shared non-blocking flock released at once) and sends the backend no span.
"""
