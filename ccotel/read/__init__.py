"""Reading: which files are transcripts (discover), which changed (watch), their new whole lines (tail),
and each line as typed entries (parse); what else a config dir says (procs, evidence)."""
