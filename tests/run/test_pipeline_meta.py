"""A directory walk after a restart (the watcher's first event names the whole tree) does not
load the meta.json of transcripts this process read no line of: the history's finished subagents
are not rebuilt in the assembler. A meta is loaded before its transcript's next lines, and a
walk still loads a new subagent's meta, as before."""

from __future__ import annotations

import os
import time

from ccotel.run.pipeline import Pipeline
from tests.assemble.test_assemble import proj, subagent_files
from tests.run.test_checkpoint import Backend, start
from tests.transcript import Transcript, text, tool_use

SID = "eeeeeeee-1111-4222-8333-444444444444"


def _history(root: str) -> tuple[Transcript, str]:
    t = Transcript(SID, t_ms=int(time.time() * 1000) - 3_600_000)
    t.prompt("go", parent=None)
    t.response("msg_1", [tool_use("toolu_t", name="Agent", subagent_type="Explore", prompt="subagent task a7")],
               stop_reason="tool_use")
    sub = subagent_files(root, t, "a7", "toolu_t", agent_type="Explore")
    t.tool_result("toolu_t", "r", tool_use_result={"status": "completed", "agentId": "a7"})
    t.response("msg_2", [text("ok")], stop_reason="end_turn")
    t.write(os.path.join(proj(root), f"{SID}.jsonl"))
    return sub, os.path.join(proj(root), SID, "subagents", "agent-a7.jsonl")


def _restart(root: str, state_dir: str) -> Pipeline:
    p = start(root, state_dir, Backend())
    p.backfill(close_all=True)
    p.process_acks()
    return p


def test_a_walk_after_a_restart_leaves_the_history_s_metas(tmp_path):
    root, state_dir = str(tmp_path / "claude"), str(tmp_path / "st")
    sub, sub_path = _history(root)
    first = _restart(root, state_dir)
    assert first.files[sub_path].meta_loaded  # read its lines: loaded before them
    first.state.close()
    p = _restart(root, state_dir)  # everything checkpointed: no line read again
    p.poll([os.path.join(root, "projects")])
    assert not p.files[sub_path].meta_loaded
    assert p.assembler._sessions == {} and p.assembler.unseen_agents() == []
    # its next lines: the meta first, as in a backfill
    sub.response("msg_a7_more", [text("more")], stop_reason="end_turn")
    sub.write(sub_path)
    p.poll([sub_path])
    assert p.files[sub_path].meta_loaded
    assert p.assembler._sessions[SID].agents["a7"].agent_type == "Explore"


def test_a_walk_still_loads_a_new_subagent_s_meta(tmp_path):
    """A subagent's directory walked before its transcript has a line (a new subagent): its
    meta.json is loaded by the walk, as before."""
    root, state_dir = str(tmp_path / "claude"), str(tmp_path / "st")
    _history(root)
    p = _restart(root, state_dir)
    d = os.path.join(proj(root), SID, "subagents")
    open(os.path.join(d, "agent-b8.jsonl"), "wb").close()
    with open(os.path.join(d, "agent-b8.meta.json"), "wb") as f:
        f.write(b'{"agentType": "Plan", "toolUseId": "toolu_x", "spawnDepth": 1}')
    p.poll([os.path.join(root, "projects")])
    assert p.files[os.path.join(d, "agent-b8.jsonl")].meta_loaded
    assert p.assembler._sessions[SID].agents["b8"].agent_type == "Plan"
