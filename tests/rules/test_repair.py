"""Orphans in the repair era, on the real CLI's fixtures of both versions (rules.py, orphans).

2.1.197: a killed tool call stays a dead branch; the resumed prompt continues without it, so the
next turn carries ``lost_tools`` (one ``session_resets{orphaned_tool_use}``). 2.1.330: the resume
writes a repair result and a ``madeBy: "other"`` line; the killed turn ends at its last line before
the kill, its tool span is ``interrupted`` and ``repaired``, and nothing is lost.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ccotel.records import SpanRecord
from ccotel.run.pipeline import Options, Pipeline
from tests.harness.fixtures import load_fixture


def backfill(root: Path, close_all: bool = True, clock=None) -> list[SpanRecord]:
    spans: list[SpanRecord] = []
    kw = {"clock": clock} if clock else {}
    Pipeline(Options(roots=(str(root),)), emit=spans.extend, **kw).backfill(close_all=close_all)
    return spans


def by_name(spans: list[SpanRecord], prefix: str) -> list[SpanRecord]:
    return sorted((s for s in spans if s.name.startswith(prefix)), key=lambda s: s.start_ns)


def test_repaired_orphan_on_2_1_330():
    fx = load_fixture("2.1.330/s06_kill_orphan_resume")
    spans = backfill(fx.config_dir)
    turns = by_name(spans, "invoke_agent claude-code")
    tools = by_name(spans, "execute_tool")
    assert [t.attributes["claude_code.turn.outcome"] for t in turns] == ["killed", "completed"]
    assert not any("claude_code.turn.lost_tools" in t.attributes for t in turns)
    killed_tool = tools[0]
    assert killed_tool.attributes["error.type"] == "interrupted"
    assert killed_tool.attributes["claude_code.tool.repaired"] is True
    # it ends at the last line before the kill (its tool_use), not at the resume
    assert killed_tool.end_ns == killed_tool.start_ns
    assert turns[0].end_ns <= killed_tool.end_ns < turns[1].start_ns
    # the repair's "No response requested." is no API call: three real responses
    assert len(by_name(spans, "chat")) == len([r for r in fx.ground_truth if r.get("endpoint") == "messages"
                                               and r.get("status") == 200])


def test_dead_branch_on_2_1_197():
    fx = load_fixture("s06_kill_orphan_resume")
    spans = backfill(fx.config_dir)
    turns = by_name(spans, "invoke_agent claude-code")
    assert [t.attributes["claude_code.turn.outcome"] for t in turns] == ["orphaned", "completed"]
    assert turns[1].attributes["claude_code.turn.lost_tools"] == 1
    assert by_name(spans, "execute_tool")[0].attributes["error.type"] == "orphaned"


def test_backfill_closes_a_background_agent_whose_process_died(tmp_path):
    """ccotel backfill of a session killed while its background agent ran: the process is gone
    (sessions/<pid>.json names a finished pid), so the agent's chat span and its invoke_agent
    span are exported at once, as ``ccotel run`` does; before, they stayed open forever."""
    fx = load_fixture("2.1.330/s04_background_subagent")
    root = tmp_path / "claude"
    shutil.copytree(fx.config_dir, root)
    main = next(p for p in root.rglob("*.jsonl") if "subagents" not in p.parts)
    agent = next(p for p in root.rglob("agent-*.jsonl"))
    main_lines = main.read_bytes().splitlines(keepends=True)
    main.write_bytes(b"".join(main_lines[:26]))  # killed before the task notification
    agent_lines = agent.read_bytes().splitlines(keepends=True)
    agent.write_bytes(b"".join(agent_lines[:15]))  # mid-run: one response, its tool result
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (root / "sessions").mkdir(exist_ok=True)
    (root / "sessions" / f"{dead.pid}.json").write_text(json.dumps(
        {"pid": dead.pid, "sessionId": fx.session_ids[0], "procStart": "1"}))
    first_ts = json.loads(agent_lines[13])["timestamp"]
    now = time.mktime(time.strptime(first_ts[:19], "%Y-%m-%dT%H:%M:%S")) + 5  # 5 s later: not stalled yet
    spans = backfill(root, close_all=False, clock=lambda: int(now * 1e9))
    agents = [s for s in spans if s.name.startswith("invoke_agent") and s.parent_span_id]
    assert len(agents) == 1
    agent_chats = [s for s in by_name(spans, "chat") if s.attributes.get("claude_code.is_sidechain")]
    assert len(agent_chats) == 1
    main_turns = by_name(spans, "invoke_agent claude-code")
    assert main_turns and all(t.attributes["claude_code.turn.outcome"] in ("completed", "killed") for t in main_turns)
