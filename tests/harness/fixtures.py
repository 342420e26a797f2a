"""Loader for the committed real-CLI fixtures, one per (Claude Code version, scenario).

Where they are (the version matrix is :data:`tests.harness.install.VERSIONS`)::

    tests/fixtures/<scenario>/             2.1.197 (the oldest version; where its fixtures always were)
    tests/fixtures/<version>/<scenario>/   every newer version, e.g. tests/fixtures/2.1.330/s01_bash_tool

A fixture's *name* is ``"s01_bash_tool"`` for the 2.1.197 one and ``"2.1.330-s01_bash_tool"`` for the
2.1.330 one: no ``/``, so a name is also safe as a pytest id, a file name and a URL path segment
(tests use it as a Phoenix project name). :func:`list_fixtures` lists every version's fixtures
(2.1.197 first) unless given a version; :func:`load_fixture` takes a name (``"2.1.330/s01_bash_tool"``,
the path form, is accepted too), or a bare scenario name plus ``version=``.

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
    fx = load_fixture("s03_parallel_subagents")                    # 2.1.197
    fx = load_fixture("2.1.330-s03_parallel_subagents")            # 2.1.330
    fx = load_fixture("s03_parallel_subagents", version="2.1.330")  # the same
    fx.version, fx.scenario    # "2.1.330", "s03_parallel_subagents"
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

from .install import OLDEST, VERSIONS

__all__ = ["FIXTURES_DIR", "Fixture", "fixture_name", "fixture_root", "split_name", "list_fixtures", "load_fixture",
           "copy_fixture"]

FIXTURES_DIR = Path(__file__).resolve().parents[1] / "fixtures"


def fixture_name(version: str, scenario: str) -> str:
    """The name of ``scenario``'s fixture for ``version`` (bare for 2.1.197, ``<version>-<scenario>`` after)."""
    return scenario if version == OLDEST else f"{version}-{scenario}"


def split_name(name: str) -> tuple[str, str]:
    """(version, scenario) of a fixture name (``<version>-<scenario>`` or ``<version>/<scenario>``;
    a bare name is 2.1.197's)."""
    for version in VERSIONS:
        for sep in ("-", "/"):
            if name.startswith(version + sep):
                return version, name[len(version) + 1:]
    return OLDEST, name


def fixture_root(version: str, base: Path = FIXTURES_DIR) -> Path:
    """The directory holding ``version``'s fixture directories."""
    return base if version == OLDEST else base / version


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@dataclass(frozen=True)
class Fixture:
    name: str  # e.g. "s01_bash_tool" (2.1.197) or "2.1.330-s01_bash_tool"
    root: Path

    @property
    def version(self) -> str:
        """The Claude Code version that wrote it (meta.json's ``cli_version``)."""
        return str(self.meta.get("cli_version") or split_name(self.name)[0])

    @property
    def scenario(self) -> str:
        return str(self.meta.get("scenario") or split_name(self.name)[1])

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
        return Evidence(name=self.scenario, config_dir=self.config_dir, ground_truth=self.ground_truth,
                        runs=self.runs, notes=self.meta.get("notes", {}), snapshots=self.snapshots,
                        version=self.version)


def _scenarios_in(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if (p / "meta.json").is_file()) if d.is_dir() else []


def list_fixtures(version: str | None = None) -> list[str]:
    """Fixture names of one version, or of every version of the matrix (2.1.197's first, then newer ones).

    Before the version matrix this listed only the 2.1.197 fixtures (bare names); those names are
    unchanged, the newer versions' names are added as ``<version>-<scenario>``.
    """
    versions = VERSIONS if version is None else (version,)
    return [fixture_name(v, sc) for v in versions for sc in _scenarios_in(fixture_root(v))]


def load_fixture(name: str, version: str | None = None) -> Fixture:
    """The fixture ``name`` (``"s01_bash_tool"``: 2.1.197; ``"2.1.330-s01_bash_tool"``), or with ``version``
    the fixture of that version for the bare scenario ``name``."""
    v, scenario = split_name(name)
    if version is not None and (v, scenario) == (OLDEST, name):
        v = version
    name = fixture_name(v, scenario)
    root = fixture_root(v) / scenario
    if not (root / "meta.json").is_file():
        raise FileNotFoundError(f"no fixture {name!r} under {FIXTURES_DIR} (have: {list_fixtures()})")
    return Fixture(name=name, root=root)


def copy_fixture(name: str, dest: Path | str, version: str | None = None) -> Fixture:
    """Copy a fixture (named as for :func:`load_fixture`) to ``dest/<name>`` (a writable copy) and return it."""
    fx = load_fixture(name, version)
    target = Path(dest) / fx.name
    shutil.copytree(fx.root, target)
    return Fixture(name=fx.name, root=target)
