"""Command line: the options of each command, and the commands. The loops that drive the
pipeline are in runner.py; the commands with options of their own (report, trace, sessions,
doctor, relay) take them from their modules."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Mapping

from ccotel import __version__, logs
from ccotel.commands.options import (
    add_common,
    add_durable,
    add_label_cap,
    add_registry,
    add_tracing,
    pattern_file,
    price_file,
)
from ccotel.run.stopping import (
    EXIT_ERROR,
    EXIT_LOCKED,
    STOP_GRACE_S,
    Interrupted,
    StdoutClosed,
    Stopper,
    die,
    end_quietly,
)

EXIT_USAGE = 2  # bad configuration (as argparse exits for a bad option): said before any work

__all__ = ["main", "build_parser", "Stopper", "Interrupted", "EXIT_ERROR", "EXIT_LOCKED",
           "STOP_GRACE_S"]

log = logging.getLogger("ccotel")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every command; ``only``: that command alone (the others' options are not built, nor their
    modules loaded: a ``ccotel check`` starts without the pipeline or rich)."""
    p = argparse.ArgumentParser(prog="ccotel", description="Claude Code transcripts -> OpenTelemetry traces")
    p.add_argument("--version", action="version", version=f"ccotel {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for name, (text, options) in _COMMAND_OPTIONS.items():
        if only in (None, name):
            options(sub.add_parser(name, help=text))
    return p


def _run_options(sp: argparse.ArgumentParser) -> None:
    add_common(sp, sidecar=True)
    add_tracing(sp)
    add_durable(sp, lease=True)
    sp.add_argument("--orchestrator-log", action="append", default=[], metavar="PATH[=SOURCE]",
                    help="an orchestrator's log to count resets, aborts and watchdog kills from (repeatable)")
    sp.add_argument("--orchestrator-patterns", metavar="FILE", type=pattern_file,
                    help="JSON list of extra patterns: [{\"metric\", \"regex\", \"reason\"}]")
    from ccotel.metrics.address import DEFAULT_METRICS_ADDR, metrics_address

    sp.add_argument("--metrics-addr", default=DEFAULT_METRICS_ADDR, type=metrics_address, metavar="HOST:PORT",
                    help=f"where to serve Prometheus /metrics (default {DEFAULT_METRICS_ADDR}: the loopback; "
                         "port 0: any free one); 'none' to disable")
    add_label_cap(sp)
    sp.add_argument("--poll", action="store_true", help="poll instead of inotify")
    sp.add_argument("--no-status", action="store_true", help="no live status line")
    add_registry(sp)


def _backfill_options(sp: argparse.ArgumentParser) -> None:
    add_common(sp)
    add_tracing(sp)
    add_durable(sp, lease=True)
    sp.add_argument("--close-all", action="store_true",
                    help="close every open turn, even ones whose session may still be running")


# Commands whose options live with them: their modules are imported only when they are built.


def _check_options(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--root", action="append", default=None)
    sp.add_argument("-v", "--verbose", action="store_true")
    from ccotel.commands import check

    check.add_arguments(sp)


def _report_options(sp: argparse.ArgumentParser) -> None:
    from ccotel.commands.report import command

    command.add_options(sp)


def _trace_options(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--root", action="append", default=None)
    sp.add_argument("--prices", type=price_file, default=None, metavar="FILE")
    sp.add_argument("-v", "--verbose", action="store_true")
    from ccotel.commands import trace as waterfall

    waterfall.add_arguments(sp)


def _sessions_options(sp: argparse.ArgumentParser) -> None:
    add_common(sp)
    from ccotel.commands import sessions

    sessions.add_arguments(sp)


def _top_options(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--root", action="append", default=None)
    sp.add_argument("--prices", type=price_file, default=None, metavar="FILE")
    sp.add_argument("-v", "--verbose", action="store_true")
    from ccotel.commands.top import view as top

    top.add_arguments(sp)


def _doctor_options(sp: argparse.ArgumentParser) -> None:
    add_common(sp)
    add_durable(sp)
    from ccotel.commands.doctor import command as doctor

    doctor.add_arguments(sp)


def _hook_options(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--state", "--state-dir", dest="state", default=None, metavar="DIR",
                    help="the state dir whose hooks/ spool the event goes to (default: as run's)")
    sp.add_argument("-v", "--verbose", action="store_true")


def _relay_options(sp: argparse.ArgumentParser) -> None:
    add_common(sp)
    from ccotel.commands import relay

    relay.add_arguments(sp)


def _statusline_options(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--root", action="append", default=None,
                    help="Claude config dir the transcript must be under (repeatable; default "
                         "$CLAUDE_CONFIG_DIR or ~/.claude)")
    sp.add_argument("--state", "--state-dir", dest="state", default=None,
                    help="ccotel's state dir (its ledger; default $CCOTEL_STATE or ~/.local/state/ccotel; none: none)")
    sp.add_argument("--no-ledger", action="store_true", help="the session's transcript only")
    sp.add_argument("-v", "--verbose", action="store_true", help=argparse.SUPPRESS)


_COMMAND_OPTIONS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None]]] = {
    "run": ("catch up on history, then follow transcripts live", _run_options),
    "backfill": ("export history once, then exit", _backfill_options),
    "check": ("health of one session: exit 1 if it should not be resumed", _check_options),
    "report": ("usage, cost, tool calls and health by day, week, month, session or project", _report_options),
    "trace": ("a turn's spans as a waterfall in the terminal (no trace backend needed)", _trace_options),
    "sessions": ("recent sessions: tokens, cost and state (live, idle, ghost, killed, ...)", _sessions_options),
    "top": ("the sessions running now, live: cost rate, running tool, subagents, stalls", _top_options),
    "doctor": ("check roots, versions, state, trace backend, metrics port: exit 1 if any fail", _doctor_options),
    "relay": ("pass `claude -p --output-format stream-json` through and export it live", _relay_options),
    "statusline": ("one line for Claude Code's statusLine setting: cost, today, the 5-hour block, what is wrong",
                   _statusline_options),
    "hook": ("Claude Code's hook handler: spool the event on stdin for `ccotel run`, exit 0", _hook_options),
}
_COMMANDS = tuple(_COMMAND_OPTIONS)


def _command_of(argv: list[str]) -> str | None:
    """The command an argument list names (None: none, or --help / --version before it)."""
    for arg in argv:
        if arg in _COMMANDS:
            return arg
        if not arg.startswith("-"):
            return None
    return None


def _config_error(args: argparse.Namespace) -> str | None:
    """What in the configuration would fail once the command is under way, said before any work
    (exit 2) instead of a traceback or an endless retry later. Each check is its layer's own;
    nothing is loaded for a command the check does not apply to."""
    problem = _roots_problem(args)
    if problem is not None:
        return problem
    if args.command in ("run", "backfill", "report"):
        # resolve_state's order; a PostgreSQL URL needs the fleet extra (doctor reports it as a finding)
        location = args.state or args.state_dir or os.environ.get("CCOTEL_STATE")
        if location and location.startswith(("postgresql://", "postgres://")):
            from ccotel.store.backends import backend_missing

            missing = backend_missing(location)
            if missing is not None:
                return missing
            if args.command != "report":
                from ccotel.store.state import claim_lease

                try:
                    claim_lease(args.claim_lease)
                except ValueError as exc:
                    return f"--claim-lease or $CCOTEL_CLAIM_LEASE: {exc}"
    return otlp_problem(args.command, os.environ, traces=getattr(args, "traces_exporter", None) == "otlp")


def _roots_problem(args: argparse.Namespace) -> str | None:
    """A root whose path is not UTF-8: no checkpoint, ledger row or output could hold the paths
    under it (discover.PathNotUtf8 skips such a name below a root; the root itself is refused)."""
    from ccotel.read.layout import default_roots, is_utf8, shown

    roots = getattr(args, "root", None) or default_roots()
    bad = [r for r in roots if not is_utf8(r)]
    return f"--root or $CLAUDE_CONFIG_DIR: the path is not UTF-8: {shown(bad[0])}" if bad else None


def otlp_problem(command: str, env: Mapping[str, str], traces: bool = True) -> str | None:
    """What in the OTEL_* variables no export could work with, for ``command``: the traces
    exporter's settings (``traces``: it exports OTLP), and for ``run`` the GenAI metrics'."""
    if traces and command in ("run", "backfill", "relay"):
        from ccotel.export.sinks import otlp_config_error

        problem = otlp_config_error(dict(env))
        if problem is not None:
            return problem
    if command == "run":
        from ccotel.metrics.genai import metrics_config_error

        return metrics_config_error(env)
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(_command_of(argv)).parse_args(argv)
    logs.configure(args.verbose)
    problem = _config_error(args)
    if problem is not None:
        log.error("%s", problem)
        return EXIT_USAGE
    try:
        return _command(args, argv)
    except BrokenPipeError:  # stdout's reader went away (`ccotel report | head`): done, as `yes | head` is
        return end_quietly()


def _command(args: argparse.Namespace, argv: list[str]) -> int:
    if args.command in ("backfill", "run"):
        from ccotel.commands.run import cmd_backfill, cmd_run  # the pipeline: only for these two commands
        from ccotel.metrics.address import MetricsPortError
        from ccotel.store.state import StateError, StateLocked

        stopper = Stopper().install()  # first: a stop is honoured from the start
        try:
            return cmd_backfill(args, stopper) if args.command == "backfill" else cmd_run(args, stopper)
        except StdoutClosed:  # the console exporter's reader went away: stopped, quietly
            return end_quietly()
        except Interrupted as stop:
            log.warning("%s before %s was done: stopped; checkpoints hold what the backend acknowledged, a "
                        "restart goes on from there", stop, "the catch-up" if args.command == "run" else "the backfill")
            die(stop.signum)
        except StateLocked as exc:
            log.error("%s", exc)
            return EXIT_LOCKED
        except StateError as exc:
            log.error("%s", exc)
            return EXIT_ERROR
        except MetricsPortError as exc:  # before any work: as a bad option is
            log.error("%s", exc)
            return EXIT_USAGE
    if args.command == "report":
        from ccotel.commands.report.command import run as cmd_report
        return cmd_report(args, command_line=argv[1:] if argv[:1] == ["report"] else None)
    if args.command == "check":
        from ccotel.commands.check import run as cmd_check
        return cmd_check(args)
    if args.command == "trace":
        from ccotel.commands.trace import run as cmd_trace
        return cmd_trace(args)
    if args.command == "sessions":
        from ccotel.commands.sessions import run as cmd_sessions
        return cmd_sessions(args)
    if args.command == "top":
        from ccotel.commands.top.view import run as cmd_top
        return cmd_top(args)
    if args.command == "doctor":
        from ccotel.commands.doctor.command import run as cmd_doctor
        return cmd_doctor(args)
    if args.command == "relay":
        from ccotel.commands.relay import run as cmd_relay
        from ccotel.metrics.address import MetricsPortError

        try:
            return cmd_relay(args)
        except MetricsPortError as exc:  # before any work: as a bad option is
            log.error("%s", exc)
            return EXIT_USAGE
    if args.command == "statusline":  # reached through cli only from main(argv) (python -m ccotel takes a shorter way)
        from ccotel.commands.statusline.line import main as cmd_statusline
        argv = [*(f"--root={r}" for r in args.root or ()), *([f"--state={args.state}"] if args.state else []),
                *(["--no-ledger"] if args.no_ledger else [])]
        return cmd_statusline(argv)
    if args.command == "hook":
        from ccotel.commands.hook import run as cmd_hook
        return cmd_hook(args)
    return 2
