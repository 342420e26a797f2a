"""The pipeline with a hook spool (Options.hooks_spool): a backfill reads the spool first, so a tool's
permission wait lands on its execute_tool span and the session's end reason on its last turn; without a
spool the spans are what they were."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ccotel.records import SpanRecord
from ccotel.run.pipeline import Options, Pipeline
from ccotel.sources.hooks.spool import spool_name
from ccotel.spans.attributes import (
    CLAUDE_CODE_SESSION_END_REASON,
    CLAUDE_CODE_TOOL_PERMISSION_WAIT_S,
    GEN_AI_TOOL_NAME,
    SESSION_ID,
)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "2.1.330" / "s02_resume_two_turns" / "claude"


def backfill(root: Path, spool: Path | None) -> list[SpanRecord]:
    out: list[SpanRecord] = []
    p = Pipeline(Options(roots=(str(root),), hooks_spool=str(spool) if spool else None), emit=out.extend)
    p.backfill(close_all=True)
    return out


def test_hook_events_land_on_the_spans_of_a_backfill(tmp_path: Path) -> None:
    root = tmp_path / "claude"
    shutil.copytree(FIXTURE, root)
    plain = backfill(root, None)
    tools = sorted((s for s in plain if s.name.startswith("execute_tool")), key=lambda s: s.start_ns)
    turns = sorted((s for s in plain if s.parent_span_id is None), key=lambda s: s.start_ns)
    assert tools and len(turns) == 2
    tool, sid = tools[0], str(tools[0].attributes[SESSION_ID])
    spool = tmp_path / "state" / "hooks"
    spool.mkdir(parents=True)
    events = [{"t": tool.start_ns + 10_000_000, "event": "PermissionRequest", "session_id": sid,
               "tool_name": tool.attributes[GEN_AI_TOOL_NAME]},
              {"t": turns[1].end_ns + 1_000_000_000, "event": "SessionEnd", "session_id": sid, "reason": "logout"}]
    (spool / spool_name(tool.start_ns)).write_text("".join(json.dumps(e) + "\n" for e in events))

    hooked = backfill(root, spool)
    by_id = {s.span_id: s for s in hooked}
    assert by_id[tool.span_id].attributes[CLAUDE_CODE_TOOL_PERMISSION_WAIT_S] == round(
        (tool.end_ns - tool.start_ns - 10_000_000) / 1e9, 3)  # no PostToolUse: to the tool's result
    assert by_id[turns[1].span_id].attributes[CLAUDE_CODE_SESSION_END_REASON] == "logout"
    assert CLAUDE_CODE_SESSION_END_REASON not in by_id[turns[0].span_id].attributes
    added = {CLAUDE_CODE_TOOL_PERMISSION_WAIT_S, CLAUDE_CODE_SESSION_END_REASON}
    for s in plain:  # nothing else changed
        assert {k: v for k, v in by_id[s.span_id].attributes.items() if k not in added} == s.attributes
