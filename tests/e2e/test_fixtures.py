"""Check the committed real-CLI fixtures against their committed ground truth (no CLI, no network).

The checks are plain JSON reading (tests/harness/checks.py), independent of ccotel's parser.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.harness.checks import check_scenario
from tests.harness.fixtures import copy_fixture, list_fixtures, load_fixture
from tests.harness.install import CLAUDE_CODE_VERSION
from tests.harness.scenarios import SCENARIOS

FIXTURES = list_fixtures()


def test_every_scenario_has_a_fixture() -> None:
    assert sorted(SCENARIOS) == FIXTURES


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_matches_ground_truth(name: str) -> None:
    fx = load_fixture(name)
    problems = check_scenario(fx.evidence())
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_meta(name: str) -> None:
    fx = load_fixture(name)
    meta = fx.meta
    assert meta["scenario"] == name
    assert meta["cli_version"] == CLAUDE_CODE_VERSION
    assert meta["check_problems"] == []
    assert isinstance(meta["hand_made"], list)
    for f in meta["files"]:
        if f["path"] != "meta.json":
            assert (fx.root / f["path"]).stat().st_size == f["bytes"], f["path"]
    versions = {json.loads(line).get("version") for p in fx.transcripts
                for line in p.read_text().splitlines() if '"version"' in line}
    assert versions - {None} == {CLAUDE_CODE_VERSION}
    assert fx.session_ids and all(fx.session_ids)
    for sid in fx.session_ids:
        assert any(p.stem == sid for p in fx.main_transcripts), sid


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_is_private(name: str) -> None:
    """Only the sandbox's projects/ and sessions/ are kept; nothing from this machine's own ~/.claude."""
    fx = load_fixture(name)
    assert {p.name for p in fx.config_dir.iterdir()} <= {"projects", "sessions"}
    real = str(Path.home() / ".claude")
    sandbox = fx.meta["sandbox_root"]
    for p in fx.root.rglob("*"):
        if p.is_file():
            data = p.read_text(encoding="utf-8", errors="replace")
            assert real + "/" not in data, p
            assert "/work/main" not in data, p
    assert not sandbox.startswith(str(Path.home()))


def test_loader_and_copy(tmp_path: Path) -> None:
    fx = load_fixture("s03_parallel_subagents")
    assert len(fx.main_transcripts) == 1 and len(fx.subagent_transcripts) == 2
    assert fx.ground_truth and all("seq" in r for r in fx.ground_truth)
    assert [r["label"] for r in fx.runs] == ["run1"] and fx.runs[0]["records"][0]["subtype"] == "init"
    copy = copy_fixture("s03_parallel_subagents", tmp_path)
    assert copy.root == tmp_path / "s03_parallel_subagents"
    assert [p.relative_to(copy.root) for p in copy.transcripts] == [p.relative_to(fx.root) for p in fx.transcripts]
    (copy.main_transcripts[0]).write_text("")  # writable, and the original is untouched
    assert fx.main_transcripts[0].stat().st_size > 0
    with pytest.raises(FileNotFoundError):
        load_fixture("no_such_fixture")
