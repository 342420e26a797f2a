"""Install the pinned Claude Code CLI into ``tests/.node`` (``python -m tests.harness.install``).

Idempotent: does nothing when ``claude --version`` already reports :data:`CLAUDE_CODE_VERSION`.

The npm package ``@anthropic-ai/claude-code`` ships a placeholder ``bin/claude.exe`` that its
postinstall script replaces with the native binary of the optional dependency
``@anthropic-ai/claude-code-<platform>``. npm 11 only warns about install scripts; when the script
did not run (``--ignore-scripts``, a policy, or a future npm that blocks scripts) the native binary
is still there in the platform package, so :func:`claude_binary` prefers that one directly.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["CLAUDE_CODE_VERSION", "PACKAGE", "NODE_DIR", "claude_binary", "installed_version", "install", "main"]

#: The one place the CLI version is pinned.
CLAUDE_CODE_VERSION = "2.1.197"
PACKAGE = "@anthropic-ai/claude-code"

REPO_ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = REPO_ROOT / "tests" / ".node"


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


def claude_binary(node_dir: Path = NODE_DIR) -> Path | None:
    """Path of an executable ``claude`` under ``node_dir``, or None."""
    modules = node_dir / "node_modules"
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


def installed_version(node_dir: Path = NODE_DIR) -> str | None:
    """The version ``claude --version`` prints (e.g. ``2.1.197``), or None."""
    binary = claude_binary(node_dir)
    if binary is None:
        return None
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60,
                             env={"PATH": os.environ.get("PATH", ""), "HOME": str(node_dir),
                                  "CLAUDE_CONFIG_DIR": str(node_dir / ".claude-version-check"),
                                  "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"})
    except (OSError, subprocess.TimeoutExpired):
        return None
    words = out.stdout.split()
    return words[0] if out.returncode == 0 and words else None


def install(node_dir: Path = NODE_DIR, version: str = CLAUDE_CODE_VERSION, quiet: bool = False) -> Path:
    """Install ``@anthropic-ai/claude-code@version`` into ``node_dir`` unless already there.

    Returns the path of the native binary. Raises RuntimeError when npm is missing or fails.
    """
    if installed_version(node_dir) == version:
        binary = claude_binary(node_dir)
        assert binary is not None
        return binary
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm not found on PATH: install Node.js >= 18 and npm")
    node_dir.mkdir(parents=True, exist_ok=True)
    # A package.json of its own with the exact pin, so npm does not walk up to a parent project.
    # Other dependencies someone added there are kept (npm prunes what package.json does not list).
    manifest_path = node_dir / "package.json"
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        manifest = {"name": "ccotel-test-node", "private": True}
    manifest.setdefault("dependencies", {})[PACKAGE] = version
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    cmd = [npm, "install", "--prefix", str(node_dir), "--no-audit", "--no-fund", "--save-exact",
           "--include=optional", "--no-package-lock", f"{PACKAGE}@{version}"]
    if not quiet:
        print("+", " ".join(cmd), flush=True)
    env = dict(os.environ, npm_config_update_notifier="false")
    proc = subprocess.run(cmd, cwd=node_dir, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"npm install failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    got = installed_version(node_dir)
    if got != version:
        raise RuntimeError(
            f"after npm install, claude --version reports {got!r}, expected {version!r}; "
            f"native package {_platform_package()} missing? npm said:\n{proc.stdout}\n{proc.stderr}")
    binary = claude_binary(node_dir)
    assert binary is not None
    return binary


def main(argv: list[str] | None = None) -> int:
    binary = install()
    print(f"claude {CLAUDE_CODE_VERSION}: {binary}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
