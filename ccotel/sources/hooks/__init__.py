"""Claude Code's hooks as a source: what the transcripts cannot say (why a session ended, how long a tool
waited on the user's permission, when a compaction was asked for).

``ccotel hook`` (commands/hook.py) is the handler Claude Code runs for those events: it appends one line to
the spool (spool.py) under ccotel's state dir and exits, importing nothing heavy. ``ccotel run`` follows
the spool (follower.py): offsets checkpointed with the counters, the events counted once across restarts,
and put on the spans built after they arrive (the tool's permission wait, the session's end reason).
docs/hooks.md says what each event becomes.
"""
