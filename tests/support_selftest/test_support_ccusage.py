"""ccusage on the realdata tree: the layout, and what ccusage reports (pinned).

The per-session numbers and the reasoning behind them are in
``tests/support/CCUSAGE_NOTES.md``; ``tests/support/usage_check.py`` is the
independent arithmetic they are checked against.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

try:
    import tests.support  # noqa: F401
except ModuleNotFoundError:  # plain `pytest` does not put the repo root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support import (
    ccusage as cc,  # noqa: E402
)
from tests.support import (
    usage_check as uc,  # noqa: E402
)
from tests.support.fixtures import ccusage_installed, realdata_config_dir  # noqa: E402,F401

# Sessions with no usage line ccusage reports: ff71dbed (a lone summary line), e1bc91d1 (its
# only API call is replayed in b4dcf65c, which sorts first by path) and 9b5d3f93 (its one usage
# line, all zeros, holds a `"x":null` ccusage screens for).
NOT_REPORTED = {"ff71dbed-a4f2-4284-a4fc-fe2fb90de929", "e1bc91d1-2731-4b12-bf00-44f4dcddffd1",
                "9b5d3f93-aaf0-4da4-b663-81a828b2ccb9"}
# The advisor session (Claude Code 2.1.2xx, usage.iterations with advisor_message entries).
ADVISOR_SESSION = "da81b1d5-eb50-45b5-b9c2-a57df460d77b"


def flat_agent_sessions() -> set[str]:
    """ccusage names a 2.0.x flat agent file (projects/<p>/agent-<id>.jsonl) as a session of its own."""
    return {e.dest.rsplit("/", 1)[1][: -len(".jsonl")] for e in cc.realdata_layout()
            if e.agent and "/subagents/" not in e.dest}


def advisor_cache_split_gap(paths: list[Path]) -> int:
    """What ccusage's cache-write rule loses on advisor calls, from the files alone: it takes the
    top-level TTL breakdown, which holds the first iteration's writes only, while
    cache_creation_input_tokens is the sum over the model's iterations (checked here too)."""
    import json as _json

    gap, seen = 0, set()
    for path in paths:
        for line in path.read_text(errors="replace").splitlines():
            try:
                o = _json.loads(line)
            except ValueError:
                continue
            u = (o.get("message") or {}).get("usage") if isinstance(o, dict) else None
            its = (u or {}).get("iterations") or []
            if not any(i.get("type") == "advisor_message" for i in its):
                continue
            key = (o["message"]["id"], o.get("requestId"))
            if key in seen:
                continue
            seen.add(key)
            own = [i for i in its if i.get("type") == "message"]
            assert sum(i["cache_creation_input_tokens"] for i in own) == u["cache_creation_input_tokens"]
            split = u["cache_creation"]
            gap += (u["cache_creation_input_tokens"] - split["ephemeral_5m_input_tokens"]
                    - split["ephemeral_1h_input_tokens"])
    return gap


def test_realdata_layout_maps_every_file() -> None:
    layout = cc.realdata_layout()
    mains = [e for e in layout if e.agent is None]
    subs = [e for e in layout if e.agent is not None]
    assert len(mains) == cc.EXPECTED_MAIN_FILES
    assert len(subs) == cc.EXPECTED_SUBAGENT_FILES
    assert len({e.session_id for e in layout}) == cc.EXPECTED_SESSION_COUNT
    # Every realdata .jsonl is used exactly once.
    used = sorted(s for e in layout for s in e.sources)
    assert used == sorted(
        f"{p.parent.name}/{p.name}" for p in cc.realdata_dir().glob("*/*.jsonl")
    )
    by_dest = {e.dest: e for e in layout}
    assert by_dest[
        "projects/marot__spotter/4d5611e5-241a-462a-8d15-5122611a9569/subagents/agent-a2898e3.jsonl"
    ].sources == (
        "marot__spotter/test__fixtures__transcripts__4d5611e5-241a-462a-8d15-5122611a9569"
        "__subagents__agent-a2898e3.jsonl",
    )
    assert by_dest["projects/entireio__cli/0cf3db51-1c73-43bb-8d05-dc02739514a5.jsonl"].sources == (
        "entireio__cli/44__785715c3f5__2__full.jsonl",
        "entireio__cli/84__324d6610f2__0__full.jsonl",
    )
    assert by_dest["projects/entireio__cli/b00b80af-879f-4265-b95b-48db0938673c.jsonl"].sources == (
        "entireio__cli/b0__2936744f3b__0__full.jsonl",
        "entireio__cli/ee__cf21d297fe__0__full.jsonl",
    )
    assert by_dest["projects/marot__spotter/55604662-cf2a-4331-851a-ec234028f8ca.jsonl"].sources == (
        "marot__spotter/test__fixtures__transcripts__short.jsonl",
    )
    # The parentless subagent of 6c2214d7 still gets its session dir.
    assert any(e.dest.startswith("projects/marot__spotter/6c2214d7-") and e.agent for e in layout)
    assert {e.dest.split("/")[1] for e in layout} == {
        p.name for p in cc.realdata_dir().iterdir() if p.is_dir()
    }


def test_realdata_tree_copies_and_joins(tmp_path: Path) -> None:
    root = cc.realdata_dir()
    tree = cc.realdata_tree(tmp_path / "claude")
    for entry in cc.realdata_layout():
        target = tree / entry.dest
        assert target.is_file() and not target.is_symlink()
        parts = [(root / s).read_bytes() for s in entry.sources]
        if len(parts) == 1:
            assert target.read_bytes() == parts[0]
        else:
            joined = b"".join(p if p.endswith(b"\n") else p + b"\n" for p in parts)
            assert target.read_bytes() == joined
    with pytest.raises(ValueError):
        cc.realdata_tree(Path(__file__).resolve().parent / "tmp-realdata")


def test_realdata_tree_symlink_mode(tmp_path: Path) -> None:
    tree = cc.realdata_tree(tmp_path / "claude", mode="symlink")
    for entry in cc.realdata_layout():
        target = tree / entry.dest
        assert target.is_symlink() == (len(entry.sources) == 1)


def test_ccusage_sessions_on_realdata(ccusage_installed: Path, realdata_config_dir: Path) -> None:
    sessions = cc.run_ccusage_sessions(realdata_config_dir)
    flat = flat_agent_sessions()
    expected = ({e.session_id for e in cc.realdata_layout()} | flat) - NOT_REPORTED
    assert set(sessions) == expected
    assert len(sessions) == 82
    # no cache fields: the glm-4.7 session (another backend) and the 2.0.x warmup agents
    no_cache = {"c6fca4ef-e2eb-4428-bb27-b9014a831f49", "agent-8466b64a", "agent-8cbc1506", "agent-ad29d662",
                "agent-beb0a430"}
    assert {sid for sid, row in sessions.items() if not row["cacheReadTokens"]} == no_cache
    for sid, row in sessions.items():
        assert row["inputTokens"] > 0 and row["outputTokens"] > 0, sid
        assert row["totalCost"] > 0, sid
        assert row["models"] and "<synthetic>" not in row["models"], sid
        assert row["totalTokens"] == (
            row["inputTokens"] + row["outputTokens"] + row["cacheCreationTokens"] + row["cacheReadTokens"]
        )
    assert sessions[ADVISOR_SESSION]["models"] == ["claude-opus-4-6", "claude-fable-5"]
    # shared/realdata/FORMAT.md section 4.2's table: once per (message.id, requestId), largest output.
    assert sessions["847ff7d2-4a55-44d7-a3f5-a3afd89f1ee1"]["cacheReadTokens"] == 9_730_072
    assert sessions["847ff7d2-4a55-44d7-a3f5-a3afd89f1ee1"]["outputTokens"] == 19_174
    assert cc.summarize_sessions(sessions) == pytest.approx(
        {
            "inputTokens": 1_685_712,
            "outputTokens": 1_470_012,
            "cacheCreationTokens": 21_700_352,
            "cacheReadTokens": 496_994_092,
            "totalTokens": 521_850_168,
            "totalCost": 362.4528477,
        }
    )


def test_ccusage_agrees_with_independent_arithmetic(
    ccusage_installed: Path, realdata_config_dir: Path
) -> None:
    sessions = cc.run_ccusage_sessions(realdata_config_dir)
    files = uc.session_files(realdata_config_dir)
    gap = advisor_cache_split_gap(files[ADVISOR_SESSION])
    assert gap == 5_917  # 3 advisor calls: 3,176 + 1,958 + 783 cache writes of later iterations
    for sid, paths in files.items():
        ref = uc.reference_totals(paths).as_row()
        row = sessions.get(sid)
        got = (
            (row["inputTokens"], row["outputTokens"], row["cacheCreationTokens"], row["cacheReadTokens"])
            if row
            else (0, 0, 0, 0)
        )
        if sid == "e1bc91d1-2731-4b12-bf00-44f4dcddffd1":
            # Its one API call is also in b4dcf65c; ccusage counts it there only.
            assert ref == (10, 5, 41_857, 0) and got == (0, 0, 0, 0)
            continue
        if sid == ADVISOR_SESSION:
            # Advisor input/output counted by both; ccusage's cache writes miss the later iterations.
            assert ref == (got[0], got[1], got[2] + gap, got[3])
            continue
        assert got == ref, sid
    # Globally (every file at once, deduped across files) the totals agree, but for that gap.
    everything = [p for paths in files.values() for p in paths]
    assert uc.reference_totals(everything).as_row() == (1_685_712, 1_470_012, 21_700_352 + gap, 496_994_092)
    # And the re-implementation of ccusage's rules reproduces every session.
    emulated = uc.ccusage_emulation(realdata_config_dir)
    for sid, row in sessions.items():
        assert emulated.sessions[sid].as_row() == (
            row["inputTokens"], row["outputTokens"], row["cacheCreationTokens"], row["cacheReadTokens"]
        ), sid
    assert emulated.dropped_null_rule == {"9b5d3f93-aaf0-4da4-b663-81a828b2ccb9": 1}
    assert set(emulated.dropped_glued) == {
        "130d7b7e-5801-4345-9bd6-f32fd9b8429b",
        "86cc3044-7515-43f1-9c25-1444738c64c9",
        "b00b80af-879f-4265-b95b-48db0938673c",
    }


def test_ccusage_daily_counts_agent_progress_copies(
    ccusage_installed: Path, realdata_config_dir: Path
) -> None:
    """``daily`` adds usage nested in agent_progress lines; ``session`` does not."""
    daily = cc.summarize_sessions(cc.run_ccusage_daily(realdata_config_dir))
    by_session = uc.session_files(realdata_config_dir)
    files = [p for paths in by_session.values() for p in paths]
    with_progress = uc.reference_totals(files, agent_progress=True).as_row()
    gap = advisor_cache_split_gap(by_session[ADVISOR_SESSION])  # ccusage's cache-write rule, as above
    assert (
        daily["inputTokens"], daily["outputTokens"], daily["cacheCreationTokens"] + gap, daily["cacheReadTokens"]
    ) == with_progress == (1_738_298, 1_471_278, 22_731_765, 507_086_943)


def test_ccusage_skips_symlinked_files(ccusage_installed: Path, tmp_path: Path) -> None:
    tree = cc.realdata_tree(tmp_path / "claude", mode="symlink")
    sessions = cc.run_ccusage_sessions(tree)
    # Only the two joined (copied) files are read.
    assert set(sessions) == {
        "0cf3db51-1c73-43bb-8d05-dc02739514a5",
        "b00b80af-879f-4265-b95b-48db0938673c",
    }


def test_ccusage_reads_only_the_given_config_dir(ccusage_installed: Path, tmp_path: Path) -> None:
    (tmp_path / "empty" / "projects").mkdir(parents=True)
    assert cc.run_ccusage_sessions(tmp_path / "empty") == {}


def _assistant(mid: str, rid: str | None, usage: dict, *, model: str = "claude-opus-4-6",
               content: list | None = None, sidechain: bool = False, ts: str = "2025-05-05T05:05:05.000Z",
               sid: str = "11111111-2222-3333-4444-555555555555") -> dict:
    line = {
        "parentUuid": None, "isSidechain": sidechain, "userType": "external", "cwd": "/tmp/p",
        "sessionId": sid, "version": "2.1.39", "type": "assistant", "uuid": f"u-{mid}-{len(str(usage))}",
        "timestamp": ts,
        "message": {"id": mid, "type": "message", "role": "assistant", "model": model,
                    "content": content or [{"type": "text", "text": "hi"}], "stop_reason": None,
                    "usage": {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0,
                              "cache_read_input_tokens": 0, **usage}},
    }
    if rid is not None:
        line["requestId"] = rid
    return line


def test_ccusage_rules_on_a_synthetic_transcript(ccusage_installed: Path, tmp_path: Path) -> None:
    """Each of ccusage's rules on one line, so ccotel's tests can cite them."""
    import functools
    import json as _json

    class json:  # compact, as Claude Code writes it: ccusage looks for '"usage":{'
        dumps = staticmethod(functools.partial(_json.dumps, separators=(",", ":")))

    sid = "11111111-2222-3333-4444-555555555555"
    u1 = {"input_tokens": 10, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 1000}
    lines = [
        # (a) split lines of one response: first snapshot output 1, last 50 -> 50 kept.
        json.dumps(_assistant("msg_1", "req_1", {**u1, "output_tokens": 1})),
        json.dumps(_assistant("msg_1", "req_1", {**u1, "output_tokens": 50},
                              content=[{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}])),
        # (b) a tool input holding "id": null -> ccusage drops the whole line.
        json.dumps(_assistant("msg_2", "req_2", {"input_tokens": 2, "output_tokens": 2},
                              content=[{"type": "tool_use", "id": "toolu_2", "name": "X", "input": {"id": None}}])),
        # (c) glued: an assistant line with a summary appended -> dropped.
        json.dumps(_assistant("msg_3", "req_3", {"input_tokens": 3, "output_tokens": 3}))
        + json.dumps({"type": "summary", "summary": "t", "leafUuid": "x"}),
        # (d) a <synthetic> API-error message: counted with 0 tokens, not a model.
        json.dumps({**_assistant("0b0b0b0b-0000-0000-0000-000000000000", None, {}, model="<synthetic>"),
                    "isApiErrorMessage": True}),
        # (e) agent_progress copy of a subagent call: session ignores, daily counts.
        json.dumps({"type": "progress", "sessionId": sid, "version": "2.1.39", "cwd": "/tmp/p",
                    "uuid": "p-1", "timestamp": "2025-05-05T05:05:06.000Z",
                    "data": {"type": "agent_progress", "agentId": "a1",
                             "message": {"type": "assistant", "uuid": "s-1",
                                         "timestamp": "2025-05-05T05:05:06.000Z", "requestId": "req_4",
                                         "message": _assistant("msg_4", None,
                                                               {"input_tokens": 4, "output_tokens": 4})["message"]}}}),
    ]
    project = tmp_path / "claude" / "projects" / "p"
    project.mkdir(parents=True)
    (project / f"{sid}.jsonl").write_text("\n".join(lines) + "\n")
    # (f) a sidechain file replaying msg_1 under another requestId -> deduped away.
    sub = project / sid / "subagents"
    sub.mkdir(parents=True)
    (sub / "agent-b.jsonl").write_text(
        json.dumps(_assistant("msg_1", "req_other", {**u1, "output_tokens": 60}, sidechain=True)) + "\n"
    )
    config = tmp_path / "claude"

    row = cc.run_ccusage_sessions(config)[sid]
    assert (row["inputTokens"], row["outputTokens"], row["cacheCreationTokens"], row["cacheReadTokens"]) == (
        10, 50, 100, 1000,
    )
    assert row["models"] == ["claude-opus-4-6"]
    # docs/format.md section 10 counts msg_2 and msg_3 too (and the sidechain replay,
    # whose requestId differs, as its own key).
    ref = uc.reference_totals(sorted(config.rglob("*.jsonl")))
    assert ref.as_row() == (10 + 2 + 3 + 10, 50 + 2 + 3 + 60, 200, 2000)
    daily = cc.summarize_sessions(cc.run_ccusage_daily(config))
    assert (daily["inputTokens"], daily["outputTokens"]) == (10 + 4, 50 + 4)
    emulated = uc.ccusage_emulation(config)
    assert emulated.sessions[sid].as_row() == (10, 50, 100, 1000)
    assert emulated.dropped_null_rule == {sid: 1} and emulated.dropped_glued == {sid: 1}
    # (g) the same JSON with spaces after ':' (not how Claude Code writes) is not read.
    spaced = "22222222-2222-3333-4444-555555555555"
    (project / f"{spaced}.jsonl").write_text(
        _json.dumps(_assistant("msg_9", "req_9", {"input_tokens": 9, "output_tokens": 9}, sid=spaced)) + "\n"
    )
    assert spaced not in cc.run_ccusage_sessions(config)
