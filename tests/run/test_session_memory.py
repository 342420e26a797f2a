"""What a backfill holds of a session it has read: every finished item waits for the session's end
(assemble/outbox.py), then all its spans are built at once (pipeline._build). Neither may hold
more than it needs then: an item is let go once its spans are built, and the strings every line
of a session repeats are held once."""

from __future__ import annotations

import os
import weakref
from typing import Any

import ccotel.run.pipeline as pipeline_mod
from ccotel.assemble.model import Call, Finished, ToolCall
from ccotel.records import SpanRecord
from ccotel.run.pipeline import Options, Pipeline
from tests.transcript import Transcript, text, tool_use

SID = "11111111-2222-4333-8444-666666666666"


def _session(root: str, turns: int = 4) -> None:
    t = Transcript(SID)
    for n in range(turns):
        t.prompt(f"list files {n}", parent=t.last)
        t.response(f"msg_a{n}", [text("let me look"), tool_use(f"toolu_{n}")], stop_reason="tool_use")
        t.tool_result(f"toolu_{n}", "a b c", source=t.last)
        t.response(f"msg_b{n}", [text("done")], stop_reason="end_turn")
    t.write(os.path.join(root, "projects", "-tmp-proj", f"{SID}.jsonl"))


def test_each_finished_item_is_let_go_once_its_spans_are_built(tmp_path, monkeypatch):
    _session(str(tmp_path))
    built: list[weakref.ref[Any]] = []
    alive_before: list[int] = []
    real = pipeline_mod.build_spans

    def build_spans(f: Finished, *args: Any) -> list[SpanRecord]:
        alive_before.append(sum(1 for ref in built if ref() is not None))
        if isinstance(f.item, (Call, ToolCall)):
            built.append(weakref.ref(f.item))
        return real(f, *args)

    monkeypatch.setattr(pipeline_mod, "build_spans", build_spans)
    spans: list[SpanRecord] = []
    Pipeline(Options(roots=(str(tmp_path),)), emit=spans.extend).backfill(close_all=True)
    assert len(built) == 12 and len(spans) == 16  # 8 calls, 4 tool calls, 4 turns: built at once
    assert alive_before == [0] * 16  # none of the calls and tool calls built before is still held


def test_the_strings_every_line_repeats_are_held_once(tmp_path):
    _session(str(tmp_path))
    spans: list[SpanRecord] = []
    Pipeline(Options(roots=(str(tmp_path),)), emit=spans.extend).backfill(close_all=True)
    chats = [s for s in spans if s.name.startswith("chat ")]
    tools = [s for s in spans if s.name.startswith("execute_tool ")]
    assert len(chats) == 8 and len(tools) == 4
    for key in ("claude_code.cwd", "claude_code.version", "claude_code.git_branch", "gen_ai.response.model"):
        values = [s.attributes[key] for s in chats]
        assert len({id(v) for v in values}) == 1, key  # each line parsed its own copy
    assert len({id(s.attributes["gen_ai.tool.name"]) for s in tools}) == 1
