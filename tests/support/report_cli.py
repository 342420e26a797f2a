"""``ccotel report`` run in this process as the command line runs it, its stdout returned (the
report tests' one way to call it)."""

from __future__ import annotations

import argparse
import io
from contextlib import redirect_stdout

from ccotel.commands.report.command import add_arguments, run


def report_out(*argv: str, now_ns: int | None = None) -> str:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", action="append")
    parser.add_argument("--state-dir")
    add_arguments(parser)
    out = io.StringIO()
    with redirect_stdout(out):
        assert run(parser.parse_args(list(argv)), now_ns=now_ns) == 0
    return out.getvalue()
