"""``ccotel hook``: the handler Claude Code runs for the hook events ccotel asks for (plugin/hooks/hooks.json).

It reads the event's JSON from stdin, appends one line to the spool under ccotel's state dir
(sources/hooks/spool.py) and exits 0. It must never slow Claude Code down nor fail it: it imports only
what the spool needs (not the CLI's parser, the pipeline or the exporters: ``python -X importtime -m
ccotel hook`` shows it), prints nothing on stdout (Claude Code reads a hook's stdout as instructions), and
whatever goes wrong (bad input, a full disk, an unwritable dir) it says on stderr, at most, and exits 0.
The state dir is the other commands' (``--state``/``--state-dir``, ``$CCOTEL_STATE``, the default).
"""

from __future__ import annotations

import os
import sys
import time

__all__ = ["main", "run"]


def main(argv: list[str] | None = None) -> int:
    """``python -m ccotel hook [--state DIR]`` (__main__.py calls it before the CLI is loaded)."""
    try:
        args = sys.argv[2:] if argv is None else argv
        handle(sys.stdin.buffer, _state_arg(args), dict(os.environ))
    except BaseException as exc:  # noqa: BLE001 - a hook never fails Claude Code, whatever happened
        _say(exc)
    return 0


def run(args: object) -> int:
    """From cli.py (``ccotel hook`` through the full parser): the same, with the parsed options."""
    try:
        location = getattr(args, "state", None) or getattr(args, "state_dir", None)
        handle(sys.stdin.buffer, location, dict(os.environ))
    except BaseException as exc:  # noqa: BLE001
        _say(exc)
    return 0


def handle(stdin: object, state: str | None, env: dict[str, str]) -> bool:
    """Read one hook input and spool it. True: a line was written."""
    import json

    from ccotel.sources.hooks import spool
    from ccotel.store.location import local_state_dir, resolve_state

    t_ns = time.time_ns()
    data = stdin.read(spool.MAX_INPUT_BYTES + 1)  # type: ignore[attr-defined]
    if len(data) > spool.MAX_INPUT_BYTES:
        return False  # a huge tool input: not an event worth a stall
    doc = json.loads(data)
    rec = spool.record_of(doc, t_ns)
    if rec is None:
        return False
    directory = spool.spool_dir(local_state_dir(resolve_state(state, None, env), env))
    return spool.append(directory, rec)


def _state_arg(args: list[str]) -> str | None:
    """``--state DIR``, ``--state=DIR`` or ``--state-dir DIR``: parsed by hand (argparse costs more than
    the rest of the hook)."""
    for i, arg in enumerate(args):
        for name in ("--state", "--state-dir"):
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg[len(name) + 1:]
    return None


def _say(exc: BaseException) -> None:
    """Only with ``$CCOTEL_HOOK_DEBUG``: Claude Code shows a hook's stderr in its transcript mode."""
    if os.environ.get("CCOTEL_HOOK_DEBUG"):
        try:
            sys.stderr.write(f"ccotel hook: {type(exc).__name__}: {exc}\n")
        except Exception:  # noqa: BLE001
            pass
