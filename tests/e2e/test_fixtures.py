"""Check the committed real-CLI fixtures (every version of the matrix) against their committed ground
truth (no CLI, no network).

The checks are plain JSON reading (tests/harness/checks.py), independent of ccotel's parser.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.harness.checks import check_scenario
from tests.harness.fixtures import copy_fixture, fixture_name, list_fixtures, load_fixture, split_name
from tests.harness.install import NEWEST, OLDEST, VERSIONS, selected_versions
from tests.harness.scenarios import SCENARIOS

FIXTURES = list_fixtures()


@pytest.mark.parametrize("version", VERSIONS)
def test_every_scenario_has_a_fixture(version: str) -> None:
    """Every scenario reachable on a version has that version's fixture, and nothing else is there."""
    want = sorted(fixture_name(version, n) for n, s in SCENARIOS.items() if s.runs_on(version))
    assert list_fixtures(version) == want
    assert set(want) <= set(FIXTURES)


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_matches_ground_truth(name: str) -> None:
    fx = load_fixture(name)
    problems = check_scenario(fx.evidence())
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_meta(name: str) -> None:
    fx = load_fixture(name)
    meta = fx.meta
    version, scenario = split_name(name)
    assert meta["scenario"] == scenario == fx.scenario
    assert meta["cli_version"] == version == fx.version
    assert meta["check_problems"] == []
    assert isinstance(meta["hand_made"], list)
    for f in meta["files"]:
        if f["path"] != "meta.json":
            assert (fx.root / f["path"]).stat().st_size == f["bytes"], f["path"]
    versions = {json.loads(line).get("version") for p in fx.transcripts
                for line in p.read_text().splitlines() if '"version"' in line}
    assert versions - {None} == {version}
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


def test_loader_versions(tmp_path: Path) -> None:
    """Bare names are 2.1.197's (as before the matrix); "<version>/<scenario>" or version= pick another."""
    old, new = load_fixture("s01_bash_tool"), load_fixture(f"{NEWEST}-s01_bash_tool")
    assert (old.version, new.version) == (OLDEST, NEWEST) and new.name == f"{NEWEST}-s01_bash_tool"
    assert load_fixture(f"{NEWEST}/s01_bash_tool").name == new.name  # the path form is accepted
    assert all("/" not in n for n in FIXTURES)  # names are safe as URL segments and file names
    assert load_fixture("s01_bash_tool", version=NEWEST).root == new.root
    assert load_fixture("s01_bash_tool", version=OLDEST).root == old.root
    assert list_fixtures(OLDEST) == [n for n in FIXTURES if split_name(n)[0] == OLDEST]
    assert FIXTURES == list_fixtures(OLDEST) + [n for v in VERSIONS[1:] for n in list_fixtures(v)]
    copy = copy_fixture("s01_bash_tool", tmp_path, version=NEWEST)
    assert copy.name == f"{NEWEST}-s01_bash_tool" and copy.version == NEWEST
    assert copy.root == tmp_path / f"{NEWEST}-s01_bash_tool"


def test_live_version_selection() -> None:
    """CCOTEL_CLAUDE_VERSIONS: the newest by default, ``ends`` (tests/run.sh) the oldest and the newest
    only (a version in between is checked on its fixtures), ``all`` the matrix, a list in matrix order."""
    assert selected_versions({}) == selected_versions({"CCOTEL_CLAUDE_VERSIONS": "newest"}) == (NEWEST,)
    assert selected_versions({"CCOTEL_CLAUDE_VERSIONS": "ends"}) == (OLDEST, NEWEST)
    assert len(VERSIONS) > 2 and selected_versions({"CCOTEL_CLAUDE_VERSIONS": "all"}) == VERSIONS
    assert selected_versions({"CCOTEL_CLAUDE_VERSIONS": f"{NEWEST}, {OLDEST}"}) == (OLDEST, NEWEST)
    with pytest.raises(ValueError):
        selected_versions({"CCOTEL_CLAUDE_VERSIONS": "9.9.9"})


def test_ids_unique_across_fixtures() -> None:
    """No API message id (nor tool_use id) is in two fixtures: readers treat one id in two sessions as
    the same call replayed, so the versions' fixtures of a scenario must not share the fake's ids."""
    seen: dict[str, str] = {}
    for name in FIXTURES:
        for r in load_fixture(name).ground_truth:
            for key in [r.get("message_id")] + [b.get("id") for b in r.get("blocks") or []]:
                if key:
                    assert seen.setdefault(key, name) == name, (key, seen[key], name)
