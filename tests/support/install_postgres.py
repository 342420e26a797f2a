"""Install PostgreSQL from Debian for the fleet tests: ``python -m tests.support.install_postgres``.

Idempotent and fast when installed: does nothing if ``initdb`` and ``pg_ctl`` are found (see
``tests.support.postgres.bin_dir``). Otherwise ``apt-get update`` and ``apt-get install -y
--no-install-recommends postgresql`` (as root, or through ``sudo -n``), with a policy-rc.d that
starts no service during the install, then stops and disables the Debian cluster's service: the
tests run their own throwaway cluster on a loopback port (tests/support/postgres.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.postgres import bin_dir

POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
_POLICY = "#!/bin/sh\n# ccotel tests/support/install_postgres.py: start no service during install\nexit 101\n"


def _sudo() -> list[str]:
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo"):
        return ["sudo", "-n", "env", "DEBIAN_FRONTEND=noninteractive"]
    raise SystemExit("installing postgresql needs root (or passwordless sudo)")


def _run(cmd: list[str], check: bool = True) -> int:
    print("+", " ".join(cmd), flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return subprocess.run(cmd, check=check, timeout=900, env=env).returncode


def main() -> int:
    if bin_dir() is not None:
        return 0
    sudo = _sudo()
    ours = False
    if os.geteuid() == 0 and not POLICY_RC_D.exists():
        POLICY_RC_D.write_text(_POLICY)
        POLICY_RC_D.chmod(0o755)
        ours = True
    try:
        _run(sudo + ["apt-get", "update", "-q"])
        _run(sudo + ["apt-get", "install", "-y", "-q", "--no-install-recommends", "postgresql"])
    finally:
        if ours:
            POLICY_RC_D.unlink(missing_ok=True)
    if shutil.which("systemctl"):
        _run(sudo + ["systemctl", "disable", "--now", "postgresql"], check=False)
    elif shutil.which("service"):
        _run(sudo + ["service", "postgresql", "stop"], check=False)
    if bin_dir() is None:
        print("postgresql installed but initdb/pg_ctl not found under /usr/lib/postgresql", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
