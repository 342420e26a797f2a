"""``python -m ccotel`` and the ``ccotel`` command. ``statusline`` and ``hook`` are answered before the
command line parser, logging and the other commands are loaded (Claude Code runs the status line after
every message, a hook for every event it is set for); so is a ``report`` the usage ledger answers
alone (report.kept.print_kept, the answer kept for the same command line; else
report.command.run_from_ledger: else cli.py takes it from the start)."""

import sys


def main(argv: list[str] | None = None) -> int:
    """The command (``argv`` None: sys.argv's, and a kept report answer ends the process once it is
    written), or a caller's ``argv`` (the exit code is returned in every case)."""
    command = argv is None
    try:
        return _main(sys.argv[1:] if argv is None else argv, command)
    except KeyboardInterrupt:
        if not command:
            raise
        # Ctrl-C in a command that reads (report, trace, sessions, ...): it ends as an unhandled
        # SIGINT does (130 in a shell), without a traceback. run and backfill stop by their own
        # handler (stopping.Stopper) and never get here.
        import signal  # (its enum is a cost the status line does not pay)

        from ccotel.run.stopping import die

        die(signal.SIGINT)
        raise


def _main(argv: list[str], command: bool) -> int:
    if argv[:1] == ["statusline"] and "-h" not in argv and "--help" not in argv:
        from ccotel.commands.statusline.line import main as statusline

        return statusline(argv[1:])
    if argv[:1] == ["hook"] and "-h" not in argv and "--help" not in argv:
        from ccotel.commands.hook import main as hook

        return hook(argv[1:])
    if argv[:1] == ["report"] and "-h" not in argv and "--help" not in argv:
        from ccotel.commands.report.kept import print_kept

        code = print_kept(argv[1:], end=command)
        if code is not None:
            return code
        from ccotel.commands.report.command import run_from_ledger

        code = run_from_ledger(argv[1:])
        if code is not None:
            return code
    from ccotel.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":  # multiprocessing (spawn) imports this module in its workers
    raise SystemExit(main())
