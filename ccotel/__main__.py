import sys


def main() -> int:
    """``ccotel``: the hook handler starts without the CLI (argparse, logging, the commands' options),
    which costs more than the hook itself; everything else goes to cli.main."""
    if sys.argv[1:2] == ["hook"]:
        from ccotel.commands.hook import main as hook

        return hook()
    from ccotel.cli import main as cli

    return cli()


if __name__ == "__main__":  # multiprocessing (spawn) imports this module in its workers
    raise SystemExit(main())
