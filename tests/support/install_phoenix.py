"""Install Phoenix into its own venv: ``python -m tests.support.install_phoenix``.

Creates ``.venv-phoenix`` at the repo root (or ``$CCOTEL_PHOENIX_VENV``) and
pip-installs ``arize-phoenix==PHOENIX_VERSION`` from PyPI into it (~850 MB,
~80 s).  Idempotent: does nothing when that version is already there.
Phoenix never goes into ccotel's own venv, so its pins cannot conflict.

Options: ``--venv PATH`` (another location), ``--force`` (reinstall).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tests.support.phoenix import (
    PHOENIX_VERSION,
    installed_phoenix_version,
    phoenix_python,
    phoenix_venv,
)

INSTALL_TIMEOUT_S = 1800


def install(venv: Path | None = None, *, force: bool = False) -> Path:
    """Make sure ``venv`` holds arize-phoenix==PHOENIX_VERSION; return its python."""
    venv = Path(venv) if venv else phoenix_venv()
    found = installed_phoenix_version(venv)
    if found == PHOENIX_VERSION and not force:
        print(f"arize-phoenix {found} already in {venv}: nothing to do")
        return phoenix_python(venv)
    python = phoenix_python(venv)
    if not python.exists():
        print(f"creating venv {venv}")
        # sys.executable may itself be a venv's python; venv uses its base.
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    spec = f"arize-phoenix=={PHOENIX_VERSION}"
    print(f"installing {spec} into {venv} (was {found!r})")
    started = time.monotonic()
    subprocess.run(
        [
            str(python), "-m", "pip", "install",
            "--disable-pip-version-check", "--no-input", "--quiet",
            spec,
        ],
        check=True,
        timeout=INSTALL_TIMEOUT_S,
    )
    found = installed_phoenix_version(venv)
    if found != PHOENIX_VERSION:
        raise SystemExit(f"after install {venv} reports arize-phoenix {found!r}")
    print(f"arize-phoenix {found} installed in {venv} in {time.monotonic() - started:.0f}s")
    return python


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=None, help="venv location")
    parser.add_argument("--force", action="store_true", help="reinstall even if present")
    args = parser.parse_args(argv)
    install(args.venv, force=args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
