"""Loader for the committed real-CLI fixtures under ``tests/fixtures/<scenario>/``.

Layout of one fixture (written by ``python -m tests.harness.regenerate``)::

    claude/                 the CLI's config dir as it was after the last run: projects/... (session files,
                            <session>/subagents/agent-<id>.jsonl + .meta.json, <session>/tool-results/...)
                            and sessions/<pid>.json when one was left behind
    snapshots/<label>/      the same tree at an earlier moment (e.g. s06 "after_kill")
    runs/NN_<label>/stdout.jsonl   the stream-json stdout of each CLI run (stderr.txt when not empty)
    ground_truth.jsonl      one record per response the fake API sent (see tests/harness/fakeapi.py)
    meta.json               scenario, CLI version, date, sandbox paths, session ids, runs, notes

Usage::

    from tests.harness.fixtures import load_fixture, copy_fixture
    fx = load_fixture("s03_parallel_subagents")
    fx.config_dir            # point CLAUDE_CONFIG_DIR-like inputs here (read-only!)
    fx.transcripts           # every *.jsonl under claude/projects
    fx.ground_truth          # list of dicts
    fx = copy_fixture("s06_kill_orphan_resume", tmp_path)   # a writable copy
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

__all__ = ["FIXTURES_DIR", "Fixture", "list_fixtures", "load_fixture", "copy_fixture"]

FIXTURES_DIR = Path(__file__).resolve().parents[1] / "fixtures"


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@dataclass(frozen=True)
class Fixture:
    name: str
    root: Path

    @cached_property
    def meta(self) -> dict[str, Any]:
        return json.loads((self.root / "meta.json").read_text(encoding="utf-8"))

    @property
    def config_dir(self) -> Path:
        """The config-dir root (holds ``projects/`` and maybe ``sessions/``)."""
        return self.root / "claude"

    @property
    def projects_dir(self) -> Path:
        return self.config_dir / "projects"

    @property
    def transcripts(self) -> list[Path]:
        """All transcript files: main session files and subagent files."""
        return sorted(self.projects_dir.rglob("*.jsonl"))

    @property
    def main_transcripts(self) -> list[Path]:
        return [p for p in self.transcripts if p.parent.parent == self.projects_dir]

    @property
    def subagent_transcripts(self) -> list[Path]:
        return [p for p in self.transcripts if p.parent.name == "subagents"]

    @property
    def session_ids(self) -> list[str]:
        return list(self.meta.get("session_ids", []))

    @cached_property
    def ground_truth(self) -> list[dict[str, Any]]:
        return _read_jsonl(self.root / "ground_truth.jsonl")

    @property
    def runs(self) -> list[dict[str, Any]]:
        """meta's run entries, each with ``records`` (the parsed stream-json stdout) added."""
        out = []
        for run in self.meta.get("runs", []):
            out.append(dict(run, records=_read_jsonl(self.root / run["stdout"])))
        return out

    @property
    def snapshots(self) -> dict[str, Path]:
        d = self.root / "snapshots"
        return {p.name: p for p in sorted(d.iterdir())} if d.is_dir() else {}

    def lines(self, path: Path) -> list[dict[str, Any]]:
        """The JSON lines of one transcript file."""
        return _read_jsonl(path)

    def evidence(self):  # -> checks.Evidence (imported lazily to keep this module tiny)
        from .checks import Evidence
        return Evidence(name=self.name, config_dir=self.config_dir, ground_truth=self.ground_truth,
                        runs=self.runs, notes=self.meta.get("notes", {}), snapshots=self.snapshots)


def list_fixtures() -> list[str]:
    return sorted(p.name for p in FIXTURES_DIR.iterdir() if (p / "meta.json").is_file()) \
        if FIXTURES_DIR.is_dir() else []


def load_fixture(name: str) -> Fixture:
    root = FIXTURES_DIR / name
    if not (root / "meta.json").is_file():
        raise FileNotFoundError(f"no fixture {name!r} under {FIXTURES_DIR} (have: {list_fixtures()})")
    return Fixture(name=name, root=root)


def copy_fixture(name: str, dest: Path | str) -> Fixture:
    """Copy fixture ``name`` to ``dest/<name>`` (a writable copy) and return it."""
    src = load_fixture(name).root
    target = Path(dest) / name
    shutil.copytree(src, target)
    return Fixture(name=name, root=target)
