"""Install the Claude Code CLI versions of the test matrix (``python -m tests.harness.install``).

The matrix is :data:`VERSIONS` (the one place listing it): the pinned older release the first
fixtures were recorded with, 2.1.330 (the newest until 2026-11-24, its fixtures kept) and the newest
npm release. Each version lives in a prefix of its own,
``tests/.node/<version>/`` (its own ``package.json``), side by side.

    python -m tests.harness.install                    # every version of the matrix
    python -m tests.harness.install --version 2.1.332  # one
    python -m tests.harness.install --selected         # those CCOTEL_CLAUDE_VERSIONS selects

Idempotent: a version is installed only when ``claude --version`` in its prefix does not already
report it.

The npm package ``@anthropic-ai/claude-code`` ships a placeholder ``bin/claude.exe`` that its
postinstall script replaces with the native binary of the optional dependency
``@anthropic-ai/claude-code-<platform>``. npm 11 only warns about install scripts; when the script
did not run (``--ignore-scripts``, a policy, or a future npm that blocks scripts) the native binary
is still there in the platform package, so :func:`claude_binary` prefers that one directly.

``CCOTEL_CLAUDE_VERSIONS`` (``newest``, ``oldest``, ``ends``, ``all`` or a comma-separated list) selects
which versions the live e2e tests run on (:func:`selected_versions`); the default is the newest only, to
keep the whole suite short. ``ends`` (the oldest and the newest: what ``tests/run.sh`` runs) spans the
format changes of the matrix; each version in between adds ~1 min of live CLI runs on 2 cores, and the
committed fixtures of every version are checked by the non-live tests anyway.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["VERSIONS", "OLDEST", "NEWEST", "CLAUDE_CODE_VERSION", "PACKAGE", "NODE_ROOT", "NODE_DIR", "node_dir",
           "claude_binary", "installed_version", "install", "install_all", "selected_versions", "main"]

#: The version matrix, oldest first: every scenario runs on each, fixtures exist for each.
VERSIONS: tuple[str, ...] = ("2.1.197", "2.1.330", "2.1.332")
OLDEST = VERSIONS[0]
NEWEST = VERSIONS[-1]
#: The default version for live runs (runner, e2e tests): the newest one.
CLAUDE_CODE_VERSION = NEWEST
PACKAGE = "@anthropic-ai/claude-code"

REPO_ROOT = Path(__file__).resolve().parents[2]
#: ``tests/.node``: one sub-prefix per version (``tests/.node/<version>/``); ccusage has its own.
NODE_ROOT = REPO_ROOT / "tests" / ".node"
#: Kept for callers of the single-version API: the prefix of :data:`CLAUDE_CODE_VERSION`.
NODE_DIR = NODE_ROOT / CLAUDE_CODE_VERSION


def node_dir(version: str = CLAUDE_CODE_VERSION) -> Path:
    """The npm prefix of one version."""
    return NODE_ROOT / version


def selected_versions(env: dict[str, str] | None = None) -> tuple[str, ...]:
    """The versions chosen by ``CCOTEL_CLAUDE_VERSIONS``: ``newest`` (the default), ``oldest``, ``ends``
    (the oldest and the newest), ``all``, or a comma-separated list of versions of the matrix. Always in
    matrix order."""
    raw = (os.environ if env is None else env).get("CCOTEL_CLAUDE_VERSIONS", "").strip()
    if raw.lower() == "all":
        return VERSIONS
    if raw.lower() == "ends":
        return tuple(dict.fromkeys((OLDEST, NEWEST)))
    if not raw or raw.lower() == "newest":
        return (NEWEST,)
    if raw.lower() == "oldest":
        return (OLDEST,)
    out = tuple(v.strip() for v in raw.split(",") if v.strip())
    unknown = [v for v in out if v not in VERSIONS]
    if unknown:
        raise ValueError(f"CCOTEL_CLAUDE_VERSIONS names {unknown}, not in the matrix {VERSIONS}")
    return tuple(v for v in VERSIONS if v in out)


def _platform_package() -> str:
    """Name of the optional dependency holding the native binary (mirrors install.cjs)."""
    system = sys.platform
    machine = platform.machine().lower()
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)
    if system.startswith("linux"):
        musl = platform.libc_ver()[0] != "glibc" and any(Path("/lib").glob("ld-musl-*"))
        return f"{PACKAGE}-linux-{arch}" + ("-musl" if musl else "")
    if system == "darwin":
        return f"{PACKAGE}-darwin-{arch}"
    if system.startswith("win"):
        return f"{PACKAGE}-win32-{arch}"
    return f"{PACKAGE}-{system}-{arch}"


def _as_dir(where: Path | str | None) -> Path:
    """A prefix: a version string names ``tests/.node/<version>``, a path is taken as is."""
    if where is None:
        return node_dir(CLAUDE_CODE_VERSION)
    if isinstance(where, str) and where in VERSIONS:
        return node_dir(where)
    return Path(where)


def claude_binary(where: Path | str | None = None) -> Path | None:
    """Path of an executable ``claude`` in a prefix (a path, or a version of the matrix), or None."""
    modules = _as_dir(where) / "node_modules"
    exe = "claude.exe" if sys.platform.startswith("win") else "claude"
    candidates = [
        modules / _platform_package() / exe,
        modules / PACKAGE / "bin" / "claude.exe",
        modules / ".bin" / "claude",
    ]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK) and c.stat().st_size > 1_000_000:
            return c
    return None


def installed_version(where: Path | str | None = None) -> str | None:
    """The version ``claude --version`` prints (e.g. ``2.1.197``) for a prefix, or None."""
    d = _as_dir(where)
    binary = claude_binary(d)
    if binary is None:
        return None
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60,
                             env={"PATH": os.environ.get("PATH", ""), "HOME": str(d),
                                  "CLAUDE_CONFIG_DIR": str(d / ".claude-version-check"),
                                  "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"})
    except (OSError, subprocess.TimeoutExpired):
        return None
    words = out.stdout.split()
    return words[0] if out.returncode == 0 and words else None


def install(node_dir: Path | None = None, version: str = CLAUDE_CODE_VERSION, quiet: bool = False) -> Path:
    """Install ``@anthropic-ai/claude-code@version`` into its prefix (``tests/.node/<version>`` unless
    ``node_dir`` is given) unless already there. Returns the path of the native binary.

    Raises RuntimeError when npm is missing or fails.
    """
    prefix = Path(node_dir) if node_dir is not None else NODE_ROOT / version
    if installed_version(prefix) == version:
        binary = claude_binary(prefix)
        assert binary is not None
        return binary
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm not found on PATH: install Node.js >= 18 and npm")
    prefix.mkdir(parents=True, exist_ok=True)
    # A package.json of its own with the exact pin, so npm does not walk up to a parent project.
    manifest_path = prefix / "package.json"
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        manifest = {"name": f"ccotel-test-claude-{version}", "private": True}
    manifest.setdefault("dependencies", {})[PACKAGE] = version
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    cmd = [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--save-exact",
           "--include=optional", "--no-package-lock", f"{PACKAGE}@{version}"]
    if not quiet:
        print("+", " ".join(cmd), flush=True)
    env = dict(os.environ, npm_config_update_notifier="false")
    proc = subprocess.run(cmd, cwd=prefix, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"npm install failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    got = installed_version(prefix)
    if got != version:
        raise RuntimeError(
            f"after npm install, claude --version reports {got!r}, expected {version!r}; "
            f"native package {_platform_package()} missing? npm said:\n{proc.stdout}\n{proc.stderr}")
    binary = claude_binary(prefix)
    assert binary is not None
    return binary


def install_all(versions: tuple[str, ...] = VERSIONS, quiet: bool = False) -> dict[str, Path]:
    """Install every version of the matrix (idempotent); version -> binary."""
    return {v: install(version=v, quiet=quiet) for v in versions}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.harness.install", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="append", choices=VERSIONS,
                    help="install only this version (repeatable; default: the whole matrix)")
    ap.add_argument("--selected", action="store_true",
                    help="install the versions CCOTEL_CLAUDE_VERSIONS selects for the live tests")
    args = ap.parse_args(argv)
    chosen = tuple(args.version or ()) + (selected_versions() if args.selected else ())
    for v, binary in install_all(tuple(v for v in VERSIONS if v in chosen) or VERSIONS).items():
        print(f"claude {v}: {binary}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
