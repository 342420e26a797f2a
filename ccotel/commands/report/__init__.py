"""``ccotel report``: token usage, estimated cost, tool calls and health by day, week, month,
session or project, like ``ccusage <view> --json``; one module per job: the records (rows.py),
summing them (summary.py), the ledger's answer (from_ledger.py), the transcript reader
(transcripts.py), the per-session reference from spans (usage.py), JSON (json_doc.py), the table
(table.py), and the command's options and run (command.py).

This file stays empty of code: a report the ledger answers alone then loads only the modules of
that answer."""
