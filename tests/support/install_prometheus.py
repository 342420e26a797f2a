"""Install Prometheus and promtool from Debian: ``python -m tests.support.install_prometheus``.

Runs ``apt-get update`` then ``apt-get install -y --no-install-recommends
prometheus`` (as root, or through ``sudo -n``).  Idempotent: does nothing when
``prometheus --version`` and ``promtool --version`` both work.

The Debian package (bookworm: 2.42.0+ds) ships a ``prometheus`` service that
listens on 0.0.0.0:9090 and *recommends* ``prometheus-node-exporter`` (port
9100).  The tests never use either: :class:`tests.support.prometheus.PrometheusServer`
runs its own ``prometheus`` on 127.0.0.1, a free port and a temp dir.  So this
installer

- skips Recommends (no node exporter);
- installs with a ``/usr/sbin/policy-rc.d`` that answers 101 ("action
  forbidden"), so ``invoke-rc.d`` / ``deb-systemd-invoke`` start nothing
  (an existing policy-rc.d is left as it is; ours is removed afterwards);
- afterwards stops and disables the service (systemd or sysv), so that it does
  not come up on the next boot either.

Options: ``--force`` (reinstall), ``--no-update`` (skip apt-get update).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tests.support.prometheus import installed_versions

APT_TIMEOUT_S = 900
POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
_POLICY = "#!/bin/sh\n# ccotel tests/support/install_prometheus.py: start no service during install\nexit 101\n"
SERVICES = ("prometheus", "prometheus-node-exporter")


def _sudo() -> list[str]:
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo"):
        return ["sudo", "-n", "env", "DEBIAN_FRONTEND=noninteractive"]
    raise SystemExit("installing prometheus needs root (or passwordless sudo)")


def _run(cmd: list[str], *, check: bool = True, timeout: float = APT_TIMEOUT_S) -> int:
    print("+", " ".join(cmd), flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return subprocess.run(cmd, check=check, timeout=timeout, env=env).returncode


def _quiet(cmd: list[str]) -> int:
    try:
        return subprocess.run(
            cmd, capture_output=True, timeout=60, check=False
        ).returncode
    except (OSError, subprocess.TimeoutExpired):
        return -1


def stop_services(sudo: list[str]) -> None:
    """Stop and disable the Debian services, whatever the init system."""
    systemd = Path("/run/systemd/system").is_dir()
    for name in SERVICES:
        if systemd:
            if _quiet(["systemctl", "cat", f"{name}.service"]) == 0:
                _run(sudo + ["systemctl", "disable", "--now", f"{name}.service"], check=False, timeout=120)
        elif Path(f"/etc/init.d/{name}").exists():
            _run(sudo + [f"/etc/init.d/{name}", "stop"], check=False, timeout=120)
            if shutil.which("update-rc.d"):
                _run(sudo + ["update-rc.d", name, "disable"], check=False, timeout=120)
        if not systemd and shutil.which("systemctl") and Path(f"/lib/systemd/system/{name}.service").exists():
            # systemd installed but not running (a container): drop the wants/ link for a later boot.
            _run(sudo + ["systemctl", "disable", f"{name}.service"], check=False, timeout=120)


def install(*, force: bool = False, update: bool = True) -> dict[str, str]:
    found = installed_versions()
    if found is not None and not force:
        print(f"prometheus {found['prometheus']} / promtool {found['promtool']} already installed: nothing to do")
        return found
    if not shutil.which("apt-get"):
        raise SystemExit("apt-get not found: install prometheus and promtool (2.x) by other means")
    sudo = _sudo()
    started = time.monotonic()
    own_policy = not POLICY_RC_D.exists()
    if own_policy:
        print(f"writing {POLICY_RC_D} (exit 101) for the duration of the install")
        subprocess.run(
            sudo + ["tee", str(POLICY_RC_D)], input=_POLICY.encode(),
            stdout=subprocess.DEVNULL, check=True, timeout=60,
        )
        _run(sudo + ["chmod", "755", str(POLICY_RC_D)], timeout=60)
    try:
        if update:
            _run(sudo + ["apt-get", "update", "-q"])
        cmd = sudo + ["apt-get", "install", "-y", "-q", "--no-install-recommends", "prometheus"]
        if force:
            cmd.insert(len(sudo) + 2, "--reinstall")
        _run(cmd)
    finally:
        if own_policy:
            _run(sudo + ["rm", "-f", str(POLICY_RC_D)], check=False, timeout=60)
    stop_services(sudo)
    found = installed_versions()
    if found is None:
        raise SystemExit("after apt-get install, `prometheus --version` / `promtool --version` still fail")
    print(
        f"prometheus {found['prometheus']} / promtool {found['promtool']} installed "
        f"in {time.monotonic() - started:.0f}s"
    )
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--force", action="store_true", help="reinstall even if present")
    parser.add_argument("--no-update", action="store_true", help="skip apt-get update")
    args = parser.parse_args(argv)
    install(force=args.force, update=not args.no_update)
    return 0


if __name__ == "__main__":
    sys.exit(main())
