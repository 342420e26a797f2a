"""Install ccusage for the tests: ``python -m tests.support.install_ccusage``.

Installs ``ccusage@CCUSAGE_VERSION`` and its native package for this platform
(``@ccusage/ccusage-linux-x64`` here) from the npm registry into the npm prefix
``tests/.node/ccusage/`` (or ``$CCOTEL_CCUSAGE_PREFIX``), gitignored by ``.node/``.

The prefix has its OWN ``package.json`` naming both packages at exact versions:
``tests/.node`` itself belongs to the Claude Code CLI install (``npm install
--prefix tests/.node ...``), and an npm install there prunes whatever its
package.json does not list; a separate prefix is never touched by it.
Idempotent: does nothing when ``ccusage --version`` already prints the pin.

Options: ``--prefix PATH``, ``--force``.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.support.ccusage import (
    CCUSAGE_VERSION,
    ccusage_bin,
    ccusage_prefix,
    installed_ccusage_version,
)

INSTALL_TIMEOUT_S = 600

_NATIVE = {
    ("Linux", "x86_64"): "@ccusage/ccusage-linux-x64",
    ("Linux", "aarch64"): "@ccusage/ccusage-linux-arm64",
    ("Darwin", "x86_64"): "@ccusage/ccusage-darwin-x64",
    ("Darwin", "arm64"): "@ccusage/ccusage-darwin-arm64",
}


def native_package() -> str:
    key = (platform.system(), platform.machine())
    if key not in _NATIVE:
        raise SystemExit(f"no ccusage native package known for {key}")
    return _NATIVE[key]


def install(prefix: Path | None = None, *, force: bool = False) -> Path:
    """Make sure ``prefix`` holds ccusage CCUSAGE_VERSION; return the ccusage path."""
    prefix = Path(prefix) if prefix else ccusage_prefix()
    found = installed_ccusage_version(prefix)
    if found == CCUSAGE_VERSION and not force:
        print(f"ccusage {found} already in {prefix}: nothing to do")
        return ccusage_bin(prefix)
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit("npm not found on PATH")
    prefix.mkdir(parents=True, exist_ok=True)
    manifest = {
        "name": "ccotel-test-ccusage",
        "private": True,
        "description": "ccusage for ccotel's tests (python -m tests.support.install_ccusage)",
        "dependencies": {"ccusage": CCUSAGE_VERSION, native_package(): CCUSAGE_VERSION},
    }
    (prefix / "package.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"installing ccusage {CCUSAGE_VERSION} + {native_package()} into {prefix} (was {found!r})")
    subprocess.run(
        [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--save-exact"],
        check=True,
        timeout=INSTALL_TIMEOUT_S,
    )
    found = installed_ccusage_version(prefix)
    if found != CCUSAGE_VERSION:
        raise SystemExit(f"after install {ccusage_bin(prefix)} reports {found!r}")
    print(f"ccusage {found} installed: {ccusage_bin(prefix)}")
    return ccusage_bin(prefix)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", type=Path, default=None, help="npm prefix")
    parser.add_argument("--force", action="store_true", help="reinstall even if present")
    args = parser.parse_args(argv)
    install(args.prefix, force=args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
