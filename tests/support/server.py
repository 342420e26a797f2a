"""A server process for tests, on loopback: the lifecycle Phoenix and Prometheus share.

It runs in its own session, its log in a private temp dir. A start that lost its free port to
another process ("address already in use") is tried again on new ports. It stops with SIGTERM,
then SIGKILL of its session, and every wait is bounded. Standard library only.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["LoopbackServer", "free_port"]

_START_ATTEMPTS = 3


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class LoopbackServer:
    """Subclasses say what to run: ``_check``, ``_prepare``, ``_pick_ports``, ``_command``,
    ``_env`` and ``_wait_ready`` (which calls ``_exited`` and raises ``_not_ready``)."""

    name = "server"
    error: type[RuntimeError] = RuntimeError
    log_lines = 40  # of the log, in error messages

    def __init__(self, *, startup_timeout: float, stop_timeout: float, keep_dir: bool) -> None:
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.keep_dir = keep_dir
        self.host = "127.0.0.1"
        self.tmpdir: Path | None = None
        self.log_path: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: Any = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what subclasses say ---------------------------------------------

    def _check(self) -> None:
        """Raise ``error`` if the server is not installed."""

    def _prepare(self) -> None:
        """Write what the server needs into ``tmpdir`` (once per start)."""

    def _pick_ports(self) -> None:
        raise NotImplementedError

    def _command(self, attempt: int) -> list[str]:
        raise NotImplementedError

    def _env(self) -> dict[str, str] | None:
        return None

    def _wait_ready(self) -> None:
        raise NotImplementedError

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> Any:
        if self._proc is not None:
            raise self.error("already started")
        self._check()
        self.tmpdir = Path(tempfile.mkdtemp(prefix=f"ccotel-{self.name}-"))
        self._prepare()
        for attempt in range(1, _START_ATTEMPTS + 1):
            self._pick_ports()
            self.log_path = self.tmpdir / f"{self.name}-{attempt}.log"
            self._log_file = open(self.log_path, "wb")
            self._proc = subprocess.Popen(
                self._command(attempt), cwd=str(self.tmpdir), env=self._env(), stdin=subprocess.DEVNULL,
                stdout=self._log_file, stderr=subprocess.STDOUT, start_new_session=True)
            atexit.register(self._atexit_stop)
            try:
                self._wait_ready()
                return self
            except self.error:
                log = self.log_tail(self.log_lines)
                self._terminate()
                if attempt < _START_ATTEMPTS and "address already in use" in log.lower():
                    continue
                self._cleanup_dir()
                raise
        raise self.error("unreachable")  # pragma: no cover

    def _exited(self) -> None:
        """Raise if the process already ended (during startup)."""
        assert self._proc is not None
        code = self._proc.poll()
        if code is not None:
            raise self.error(f"{self.name} exited with {code} during startup; log tail:\n"
                             f"{self.log_tail(self.log_lines)}")

    def _not_ready(self) -> RuntimeError:
        return self.error(f"{self.name} not ready within {self.startup_timeout}s; log tail:\n"
                          f"{self.log_tail(self.log_lines)}")

    def stop(self) -> None:
        """SIGTERM (graceful, bounded by ``stop_timeout``), then SIGKILL of its session."""
        self._terminate()
        self._cleanup_dir()
        atexit.unregister(self._atexit_stop)

    def _terminate(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # the session we made for it: all it started
                except ProcessLookupError:
                    pass
                proc.wait(timeout=10)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def _cleanup_dir(self) -> None:
        if self.tmpdir is not None and not self.keep_dir:
            shutil.rmtree(self.tmpdir, ignore_errors=True)

    def _atexit_stop(self) -> None:
        if self._proc is None:
            return
        self.stop_timeout = min(self.stop_timeout, 5.0)
        try:
            self.stop()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass

    def log_tail(self, lines: int = 40) -> str:
        if self._log_file is not None:
            try:
                self._log_file.flush()
            except (OSError, ValueError):
                pass
        if self.log_path is None or not self.log_path.exists():
            return ""
        data = self.log_path.read_bytes()[-200_000:].decode("utf-8", "replace")
        return "\n".join(data.splitlines()[-lines:])
