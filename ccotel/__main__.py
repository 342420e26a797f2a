"""``python -m ccotel`` and the ``ccotel`` command. ``statusline`` is answered before the command
line parser, logging and the other commands are loaded (Claude Code runs it after every message)."""

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["statusline"] and "-h" not in argv and "--help" not in argv:
        from ccotel.commands.statusline import main as statusline

        return statusline(argv[1:])
    from ccotel.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":  # multiprocessing (spawn) imports this module in its workers
    raise SystemExit(main())
