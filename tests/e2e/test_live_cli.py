"""Run every scenario live with the real Claude Code CLI, on each version of the matrix selected by
``CCOTEL_CLAUDE_VERSIONS`` (default: the newest; ``all`` for every version), and check what it wrote
(plain JSON reading, no ccotel code) against the fake API's ground truth. About 30 s per version for all
scenarios on this machine."""

from __future__ import annotations

import shutil

import pytest

from tests.harness.checks import check_scenario, evidence_from_result, read_jsonl, tool_uses
from tests.harness.install import selected_versions
from tests.harness.scenarios import SCENARIOS, run_scenario

pytestmark = pytest.mark.e2e

CASES = [(v, name) for v in selected_versions() for name, s in SCENARIOS.items() if s.runs_on(v)]


@pytest.mark.parametrize("version,name", CASES, ids=[f"{v}-{n}" for v, n in CASES])
def test_scenario_live(version: str, name: str, claude_cli, tmp_path) -> None:
    result = run_scenario(SCENARIOS[name], base=tmp_path, version=version)
    try:
        for label, run in result.runs:
            assert not run.timed_out, f"{label} timed out; stderr: {run.stderr[-2000:]}"
        problems = check_scenario(evidence_from_result(result))
        assert problems == [], "\n".join(problems)
    finally:
        shutil.rmtree(result.sandbox.root, ignore_errors=True)


@pytest.mark.parametrize("version", selected_versions())
def test_s01_details_live(version: str, claude_cli, tmp_path) -> None:
    """Spelled out for scenario 1: every matched response is in the transcript with its usage and requestId."""
    result = run_scenario(SCENARIOS["s01_bash_tool"], base=tmp_path, version=version)
    gt = [r for r in read_jsonl(result.ground_truth) if r["endpoint"] == "messages"]
    files = sorted((result.sandbox.config_dir / "projects").rglob("*.jsonl"))
    assert len(files) == 1 and files[0].stem == result.session_ids[0]
    lines = read_jsonl(files[0])
    assert {ln["version"] for ln in lines if "version" in ln} == {version}
    assistant = [ln for ln in lines if ln["type"] == "assistant"]
    for rec in (r for r in gt if r["matched"]):
        mine = [ln for ln in assistant if ln["message"]["id"] == rec["message_id"]]
        assert mine, rec["message_id"]
        for ln in mine:
            assert ln["requestId"] == rec["request_id"]
            assert {k: ln["message"]["usage"][k] for k in rec["usage"]} == rec["usage"]
    ev = evidence_from_result(result)
    (tid,) = tool_uses(ev)
    results = [ln for ln in lines if ln["type"] == "user" and isinstance(ln["message"]["content"], list)]
    assert [b["tool_use_id"] for ln in results for b in ln["message"]["content"]] == [tid]
