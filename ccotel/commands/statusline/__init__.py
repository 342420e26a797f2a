"""ccotel statusline: one line for Claude Code's statusLine setting (line: the command; session: the
transcript read with its cache; ledger: the ledger's answers; price: the price memo; fastjson: JSON
without the json package). Kept light: nothing here imports argparse, logging or the exporters."""
