"""Run the real Claude Code CLI in a private sandbox against the fake API.

A :class:`Sandbox` is a temp directory holding a private ``HOME``, ``CLAUDE_CONFIG_DIR =
HOME/.claude`` (the CLI then keeps its ``.claude.json`` there too), ``CLAUDE_CODE_TMPDIR`` and a
project directory used as the cwd. The CLI's environment is built from scratch (only ``PATH``,
locale and the variables below), so nothing of the machine's own ``~/.claude`` or of a parent
Claude Code session leaks in.

Every run has a hard timeout (SIGKILL, then ``timed_out=True``); all polling loops are bounded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .install import CLAUDE_CODE_VERSION, claude_binary, install

__all__ = ["Sandbox", "RunResult", "StdinStep", "BASE_ENV", "transcript_lines", "tool_use_seen"]

#: Environment variables (names checked in the 2.1.197 and 2.1.330 binaries) that every run gets.
BASE_ENV = {
    "ANTHROPIC_API_KEY": "test",
    # No telemetry, auto-update, release notes, feedback surveys, model/feature fetches.
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
    # Retries: the CLI's own backoff is 500 ms * 2^(attempt-1) (+<=25% jitter), honours
    # retry-after; CLAUDE_CODE_MAX_RETRIES caps the attempts (default 10). Keep it small.
    "CLAUDE_CODE_MAX_RETRIES": "3",
    "LANG": "C.UTF-8",
    "TERM": "dumb",
    "NO_COLOR": "1",
}


@dataclass(frozen=True)
class StdinStep:
    """With ``--input-format stream-json``: when ``when()`` is true (or at once when None),
    write ``line`` (a JSON object) to stdin; ``line=None`` closes stdin."""

    line: dict[str, Any] | None
    when: Callable[[], bool] | None = None


@dataclass
class RunResult:
    argv: list[str]
    returncode: int | None
    stdout: str
    stderr: str
    duration_s: float
    killed: bool = False
    timed_out: bool = False
    pid: int = 0

    @property
    def records(self) -> list[dict[str, Any]]:
        """The stream-json stdout, one dict per line (unparseable lines are skipped)."""
        out = []
        for line in self.stdout.splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    @property
    def session_id(self) -> str | None:
        for r in self.records:
            if r.get("type") == "system" and r.get("subtype") == "init":
                return r.get("session_id")
        for r in self.records:
            if r.get("session_id"):
                return r["session_id"]
        return None

    @property
    def result(self) -> dict[str, Any] | None:
        res = [r for r in self.records if r.get("type") == "result"]
        return res[-1] if res else None


def transcript_lines(config_dir: Path) -> Iterable[dict[str, Any]]:
    """Every parseable JSON line of every ``*.jsonl`` under ``config_dir/projects`` (partial lines skipped)."""
    root = config_dir / "projects"
    if not root.is_dir():
        return
    for path in sorted(root.rglob("*.jsonl")):
        try:
            data = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in data.splitlines():
            try:
                yield json.loads(line)
            except ValueError:
                continue


def tool_use_seen(config_dir: Path, name: str | None = None, contains: str | None = None) -> bool:
    """True when a transcript line holds a tool_use (of ``name``, whose input JSON contains ``contains``)."""
    for rec in transcript_lines(config_dir):
        msg = rec.get("message")
        if rec.get("type") != "assistant" or not isinstance(msg, dict):
            continue
        for block in msg.get("content") or []:
            if not isinstance(block, dict) or block.get("type") != "tool_use":
                continue
            if name is not None and block.get("name") != name:
                continue
            if contains is not None and contains not in json.dumps(block.get("input")):
                continue
            return True
    return False


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm may contain spaces/parens: split after the last ')'
    return raw[raw.rindex(")") + 2:].split()


def _start_time(pid: int) -> str | None:
    f = _stat_fields(pid)
    return f[19] if f else None  # field 22 (starttime); fields[0] is field 3 (state)


def _descendants(root: int) -> list[tuple[int, str]]:
    """(pid, start time) of every live descendant of ``root`` (Linux /proc; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        f = _stat_fields(int(entry.name))
        if f:
            children.setdefault(int(f[1]), []).append(int(entry.name))
    out, todo = [], [root]
    for _ in range(10_000):  # bounded walk
        if not todo:
            break
        for child in children.get(todo.pop(), []):
            st = _start_time(child)
            if st is not None:
                out.append((child, st))
                todo.append(child)
    return out


@dataclass
class Sandbox:
    """A private HOME, config dir, tmp dir and project cwd under ``root``."""

    root: Path
    project_name: str = "proj"
    extra_env: dict[str, str] = field(default_factory=dict)
    #: The Claude Code version (of :data:`~tests.harness.install.VERSIONS`) its runs use.
    version: str = CLAUDE_CODE_VERSION

    @classmethod
    def create(cls, prefix: str = "ccotel-e2e-", base: Path | str | None = None, **kw: Any) -> Sandbox:
        root = Path(tempfile.mkdtemp(prefix=prefix, dir=base)).resolve()
        return cls(root=root, **kw)

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self._runs = 0
        self.live_stdout_path: Path | None = None
        for d in (self.home, self.config_dir, self.tmp, self.cwd):
            d.mkdir(parents=True, exist_ok=True)

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def config_dir(self) -> Path:
        return self.home / ".claude"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def cwd(self) -> Path:
        return self.root / self.project_name

    @property
    def projects_dir(self) -> Path:
        return self.config_dir / "projects"

    def live_records(self) -> list[dict[str, Any]]:
        """The stream-json records the current (or last) run has printed so far."""
        if self.live_stdout_path is None or not self.live_stdout_path.exists():
            return []
        out = []
        for line in self.live_stdout_path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def env(self, base_url: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), **BASE_ENV}
        env.update(HOME=str(self.home), CLAUDE_CONFIG_DIR=str(self.config_dir), TMPDIR=str(self.tmp),
                   CLAUDE_CODE_TMPDIR=str(self.tmp), ANTHROPIC_BASE_URL=base_url)
        env.update(self.extra_env)
        env.update(extra or {})
        return env

    def run(
        self,
        base_url: str,
        prompt: str | None,
        *,
        allowed_tools: str = "Bash",
        resume: str | None = None,
        extra_args: Iterable[str] = (),
        env: dict[str, str] | None = None,
        timeout: float = 120.0,
        kill_when: Callable[[], bool] | None = None,
        stdin_steps: list[StdinStep] | None = None,
        poll_interval: float = 0.05,
        binary: Path | None = None,
    ) -> RunResult:
        """Run ``claude -p <prompt> --output-format stream-json --verbose`` in the sandbox.

        Args:
            base_url: the fake API's base URL (ANTHROPIC_BASE_URL).
            prompt: the ``-p`` prompt; None with ``stdin_steps`` (``--input-format stream-json``).
            resume: a session id for ``--resume``.
            kill_when: polled every ``poll_interval``; when it returns true the CLI gets SIGKILL.
            stdin_steps: lines to feed with ``--input-format stream-json`` (see :class:`StdinStep`).
            timeout: hard limit in seconds; the CLI is SIGKILLed when it is reached.
        """
        binary = binary or claude_binary(self.version) or install(version=self.version)
        argv = [str(binary), "-p"]
        if prompt is not None:
            argv.append(prompt)
        argv += ["--output-format", "stream-json", "--verbose"]
        if stdin_steps is not None:
            argv += ["--input-format", "stream-json"]
        if allowed_tools:
            argv += ["--allowedTools", allowed_tools]
        if resume:
            argv += ["--resume", resume]
        argv += list(extra_args)

        self._runs += 1
        self.live_stdout_path = self.tmp / f"run{self._runs}.stdout.jsonl"
        out_f = self.live_stdout_path.open("w+b")
        err_f = tempfile.TemporaryFile(dir=self.tmp)
        start = time.monotonic()
        proc = subprocess.Popen(
            argv, cwd=self.cwd, env=self.env(base_url, env), stdout=out_f, stderr=err_f,
            stdin=subprocess.PIPE if stdin_steps is not None else subprocess.DEVNULL,
            start_new_session=True,
        )
        killed = timed_out = False
        orphans: list[tuple[int, str]] = []
        pending = list(stdin_steps or [])
        deadline = start + timeout
        try:
            while proc.poll() is None:
                now = time.monotonic()
                if now >= deadline:
                    timed_out = True
                    orphans = _descendants(proc.pid)
                    proc.send_signal(signal.SIGKILL)
                    break
                while pending and (pending[0].when is None or pending[0].when()):
                    step = pending.pop(0)
                    assert proc.stdin is not None
                    try:
                        if step.line is None:
                            proc.stdin.close()
                        else:
                            proc.stdin.write((json.dumps(step.line) + "\n").encode())
                            proc.stdin.flush()
                    except (BrokenPipeError, ValueError):
                        pending.clear()
                if kill_when is not None and kill_when():
                    killed = True
                    orphans = _descendants(proc.pid)
                    proc.send_signal(signal.SIGKILL)
                    break
                time.sleep(poll_interval)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
                pass
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
            # Processes the killed CLI had started (e.g. the shell running `sleep 60`; the Bash tool
            # puts it in a session of its own) outlive it: kill exactly those pids, and only if
            # they are still the same processes (same start time).
            for pid, start_time in orphans:
                if _start_time(pid) == start_time:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
            if proc.stdin is not None and not proc.stdin.closed:
                try:
                    proc.stdin.close()
                except BrokenPipeError:
                    pass
        duration = time.monotonic() - start
        out_f.seek(0)
        err_f.seek(0)
        stdout = out_f.read().decode("utf-8", errors="replace")
        stderr = err_f.read().decode("utf-8", errors="replace")
        out_f.close()
        err_f.close()
        return RunResult(argv=argv, returncode=proc.returncode, stdout=stdout, stderr=stderr,
                         duration_s=duration, killed=killed, timed_out=timed_out, pid=proc.pid)
