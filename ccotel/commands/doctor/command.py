"""``ccotel doctor``: its options, the checks in the order they are reported, and run, whose exit
status is 1 when any check failed.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping

from ccotel.commands.doctor.config import DoctorConfig
from ccotel.commands.doctor.finding import Finding, exit_status
from ccotel.commands.doctor.metrics import check_metrics
from ccotel.commands.doctor.render import render_json, render_text
from ccotel.commands.doctor.root_scan import scan_root
from ccotel.commands.doctor.roots import check_roots
from ccotel.commands.doctor.state import check_state
from ccotel.commands.doctor.telemetry import check_claude_code_telemetry
from ccotel.commands.doctor.traces import check_traces
from ccotel.commands.doctor.versions import check_format, check_versions
from ccotel.commands.options import finite
from ccotel.metrics.address import DEFAULT_METRICS_ADDR
from ccotel.read.layout import default_roots
from ccotel.store.state import resolve_state

__all__ = ["add_arguments", "config_from_args", "diagnose", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Doctor's own options (--root and --state-dir come from cli.py's common options)."""
    parser.add_argument("--json", action="store_true", help="findings as JSON, for machines")
    parser.add_argument("--metrics-addr", default=DEFAULT_METRICS_ADDR, metavar="HOST:PORT",
                        help="the --metrics-addr ccotel run is (or will be) given; 'none' if disabled")
    parser.add_argument("--traces-exporter", choices=("otlp", "console", "none"), default="otlp",
                        help="the --traces-exporter ccotel run is given; otlp checks the OTEL_EXPORTER_OTLP_* backend")
    parser.add_argument("--timeout", type=finite(0, 600, "seconds", above=True), default=3.0, metavar="S",
                        help="seconds to wait for the trace backend and the metrics port (default 3)")


def config_from_args(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> DoctorConfig:
    """The roots and the state resolved as the other commands do (``default_roots``, ``resolve_state``)."""
    env = dict(os.environ) if env is None else env
    metrics_addr = getattr(args, "metrics_addr", DEFAULT_METRICS_ADDR)
    return DoctorConfig(
        roots=tuple(getattr(args, "root", None) or default_roots(dict(env))),
        # --state, --state-dir, $CCOTEL_STATE, the default: where run and backfill keep it
        state_dir=resolve_state(getattr(args, "state", None), getattr(args, "state_dir", None), dict(env)),
        metrics_addr=None if metrics_addr == "none" else metrics_addr,
        traces_exporter=getattr(args, "traces_exporter", "otlp"),
        env=env,
        timeout_s=getattr(args, "timeout", 3.0),
    )


def diagnose(cfg: DoctorConfig) -> list[Finding]:
    """Every check, in the order they are reported (the metrics check takes the ports Claude Code's
    telemetry would take, so telemetry is looked at first and reported last)."""
    scans = [scan_root(root) for root in cfg.roots]
    telemetry, prometheus_ports = check_claude_code_telemetry(cfg)
    return [*check_roots(scans), *check_versions(scans), *check_format(scans), *check_state(cfg),
            *check_traces(cfg), *check_metrics(cfg, prometheus_ports), *telemetry]


def run(args: argparse.Namespace) -> int:
    """``ccotel doctor [--json]``: 0 when nothing failed, 1 when something did."""
    findings = diagnose(config_from_args(args))
    if getattr(args, "json", False):
        render_json(findings, sys.stdout)
    else:
        render_text(findings, sys.stdout)
    return exit_status(findings)
