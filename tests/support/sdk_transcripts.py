"""Helpers for the ccotel.sdk tests: SDK messages from captured streams, the transcript lines by
uuid, and a mirror of a config dir that lets lines through only after a delay (a CLI that flushes
its transcript late: the flush race, made as wide as a test wants).

The Agent SDK (``claude-agent-sdk``) parses the CLI's stream-json with its own
``parse_message``; ``sdk_messages`` uses that same function on the harness's captured streams,
so the unit tests see the SDK's real message objects.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["DelayedMirror", "LiveSidecar", "copy_projects", "line_index", "sdk_messages"]


def sdk_messages(records: Iterable[dict[str, Any]]) -> list[Any]:
    """The SDK's message objects for stream-json records, as ``query()`` would yield them."""
    from claude_agent_sdk._internal.message_parser import parse_message

    return [m for m in (parse_message(r) for r in records) if m is not None]


def line_index(config_dir: Path | str) -> dict[str, dict[str, Any]]:
    """uuid -> the first transcript line with that uuid, over every ``*.jsonl`` under ``projects/``."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(Path(config_dir, "projects").rglob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and isinstance(obj.get("uuid"), str):
                out.setdefault(obj["uuid"], obj)
    return out


class DelayedMirror:
    """Copies ``src/projects`` to ``dest/projects`` from a thread: each whole line (and each
    meta.json) appears in the copy ``delay_s`` after the thread first saw it in the source.
    ``drain()`` lets everything through at once and stops the thread."""

    def __init__(self, src: Path | str, dest: Path | str, delay_s: float, poll_s: float = 0.01) -> None:
        self.src = Path(src)
        self.dest = Path(dest)
        self.delay_s = delay_s
        self.poll_s = poll_s
        self.released = 0
        self._offsets: dict[Path, int] = {}
        self._metas: dict[Path, bytes] = {}
        self._pending: list[tuple[float, Path, bytes]] = []  # (due, relative path, bytes to append)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="delayed-mirror", daemon=True)

    def __enter__(self) -> DelayedMirror:
        self.dest.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.drain()

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            self._scan(time.monotonic())
            self._release(time.monotonic())

    def _scan(self, now: float) -> None:
        root = self.src / "projects"
        if not root.is_dir():
            return
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(self.src)
            if path.suffix == ".jsonl":
                data = _read_from(path, self._offsets.get(rel, 0))
                whole = data[: data.rfind(b"\n") + 1]
                if whole:
                    self._offsets[rel] = self._offsets.get(rel, 0) + len(whole)
                    for line in whole.splitlines(keepends=True):
                        self._pending.append((now + self.delay_s, rel, line))
            elif path.name.endswith(".meta.json"):
                data = _read_from(path, 0)
                if data and self._metas.get(rel) != data:
                    self._metas[rel] = data
                    self._pending.append((now + self.delay_s, rel, data))

    def _release(self, now: float) -> None:
        due = [p for p in self._pending if p[0] <= now]
        self._pending = [p for p in self._pending if p[0] > now]
        for _due, rel, data in due:
            target = self.dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if rel.name.endswith(".meta.json"):
                tmp = target.with_name(target.name + ".tmp")
                tmp.write_bytes(data)
                os.replace(tmp, target)
            else:
                with open(target, "ab") as f:
                    f.write(data)
            self.released += 1

    def drain(self) -> None:
        """Everything seen so far and everything in the source now, into the copy; then stop."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._scan(time.monotonic())
        self._release(float("inf"))


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read()
    except OSError:
        return b""


def copy_projects(src_config: Path | str, dest_config: Path | str, project_dir: str | None = None) -> list[Path]:
    """Copy ``src/projects`` into ``dest/projects`` (a synced copy of another machine's files);
    with ``project_dir``, every project's files go into that one directory (the copy is where the
    other machine's cwd maps to here)."""
    out = []
    root = Path(src_config) / "projects"
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(root)
        if project_dir is not None:
            rel = Path(project_dir, *rel.parts[1:])
        target = Path(dest_config) / "projects" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
        out.append(target)
    return out


class LiveSidecar:
    """``ccotel run`` as users run it, on one config dir, sending spans to an OTLP receiver on
    127.0.0.1: what the sidecar exports live, to compare the SDK observer's spans with. Started
    before the CLI writes anything, so every line is read live (not in a catch-up)."""

    def __init__(self, root: Path | str, state_dir: Path | str, endpoint: str) -> None:
        import socket
        import subprocess
        import sys
        import urllib.request

        # watched from the start only if it exists (a projects/ made later waits for the rescan)
        Path(root, "projects").mkdir(parents=True, exist_ok=True)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = endpoint
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ccotel", "run", "--root", str(root), "--state-dir", str(state_dir),
             "--metrics-addr", f"127.0.0.1:{self.port}", "--no-status"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ccotel run ended: {self.proc.stderr.read() if self.proc.stderr else ''}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as resp:
                    if b"ccotel_" in resp.read():
                        return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("ccotel run did not serve its metrics within 30 s")

    def stop(self) -> str:
        """SIGTERM (it delivers what it holds, then exits); its stderr."""
        import subprocess

        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        return self.proc.stderr.read() if self.proc.stderr else ""
