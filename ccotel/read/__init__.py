"""Reading: which files are transcripts (discover), which changed (watch), their new whole lines (tail),
and each line as typed entries (parse); what else a config dir says (procs, evidence). Every file under
a root is opened by regular.py's rule: only a regular file is read."""
