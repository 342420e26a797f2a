"""ccotel's token totals against ccusage v20 (an independent reader of the same transcripts).

On the real-CLI fixtures and on all of shared/realdata (Claude Code 1.0.17 to 2.1.42) the
per-session totals must be equal, token for token, and equal to what the fake API sent.
test_where_ccusage_is_wrong pins the transcript shapes ccusage miscounts and ccotel does not.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from ccotel.pipeline import Options
from ccotel.report import build_report
from tests.harness.fixtures import list_fixtures, load_fixture
from tests.transcript import Transcript, text, tool_use
from tests.support.ccusage import run_ccusage_sessions
from tests.support.fixtures import ccusage_installed, realdata_config_dir  # noqa: F401

KEYS = (("input_tokens", "inputTokens"), ("output_tokens", "outputTokens"),
        ("cache_creation_tokens", "cacheCreationTokens"), ("cache_read_tokens", "cacheReadTokens"))


def ccotel_sessions(config_dir: Path) -> dict[str, dict[str, int]]:
    report = build_report(Options(roots=(str(config_dir),)))
    return {sid: {ck: getattr(u, ok) for ok, ck in KEYS} for sid, u in report.items()
            if u.total_tokens or u.api_calls}


def ccusage_sessions(config_dir: Path) -> dict[str, dict[str, int]]:
    return {sid: {ck: row[ck] for _, ck in KEYS} for sid, row in run_ccusage_sessions(config_dir).items()}


@pytest.mark.parametrize("name", list_fixtures())
def test_fixture_totals_equal_ccusage(ccusage_installed, name):  # noqa: F811
    config = load_fixture(name).config_dir
    theirs = ccusage_sessions(config)
    ours = ccotel_sessions(config)
    assert ours == theirs
    # and both equal what the fake API really sent (ground truth, summed once per response)
    truth = {"inputTokens": 0, "outputTokens": 0, "cacheCreationTokens": 0, "cacheReadTokens": 0}
    for r in load_fixture(name).ground_truth:
        if r.get("endpoint") == "messages" and r.get("matched") and r.get("status") == 200 \
                and r.get("expect_in_transcript", True):
            u = r["usage"]
            truth["inputTokens"] += u["input_tokens"]
            truth["outputTokens"] += u["output_tokens"]
            truth["cacheCreationTokens"] += u["cache_creation_input_tokens"]
            truth["cacheReadTokens"] += u["cache_read_input_tokens"]
    summed = {k: sum(s[k] for s in ours.values()) for k in truth}
    assert summed == truth


def test_realdata_totals_equal_ccusage(ccusage_installed, realdata_config_dir):  # noqa: F811
    theirs = ccusage_sessions(realdata_config_dir)
    ours = ccotel_sessions(realdata_config_dir)
    assert len(theirs) >= 50
    assert ours == theirs


def _usage_line(t: Transcript, mid: str, usage: dict, **block) -> None:
    t.response(mid, [block or text("x")], usage=usage, stop_reason="end_turn")


def test_where_ccusage_is_wrong(ccusage_installed, tmp_path):  # noqa: F811
    """Three real transcript shapes ccusage v20 miscounts and ccotel counts right.

    1. A response glued to a summary on one physical line (FORMAT.md section 2: a summary
       appended to a file without a final newline): ccusage drops the whole line.
    2. A tool input that contains a JSON null under a key ccusage screens for ("id":null):
       ccusage skips any line whose raw text has it (has_unsupported_null_field).
    3. usage.cache_creation present with a 0/0 split while cache_creation_input_tokens is
       not 0 (Claude Code writes that object itself when the API sends no split): ccusage
       takes the split and loses the cache writes.
    """
    sid = "aaaaaaaa-1111-4222-8333-444444444444"
    u = {"input_tokens": 10, "cache_creation_input_tokens": 200, "cache_read_input_tokens": 3000, "output_tokens": 40}
    t = Transcript(sid, version="2.1.17")
    t.prompt("go", parent=None)
    _usage_line(t, "msg_glued", u)
    glued = orjson.dumps(t.lines.pop()) + b'{"type":"summary","summary":"title","leafUuid":"x"}'
    body = t.bytes() + glued + b"\n"
    t.lines = []
    t.prompt("again", parent=None)
    t.response("msg_null", [tool_use("toolu_n", name="Edit", file_path="/a", id=None)], usage=u, stop_reason="tool_use")
    t.tool_result("toolu_n", "ok")
    split = dict(u, cache_creation={"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0})
    t.response("msg_split", [text("done")], usage=split, stop_reason="end_turn")
    body += t.bytes()
    path = tmp_path / "claude" / "projects" / "-p" / f"{sid}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(body)
    config = tmp_path / "claude"
    ours = ccotel_sessions(config)[sid]
    theirs = ccusage_sessions(config).get(sid, {k: 0 for _, k in KEYS})
    truth = {"inputTokens": 30, "outputTokens": 120, "cacheCreationTokens": 600, "cacheReadTokens": 9000}
    assert ours == truth
    # ccusage: the glued and the null lines are gone; of the third it keeps all but the cache writes
    assert theirs == {"inputTokens": 10, "outputTokens": 40, "cacheCreationTokens": 0, "cacheReadTokens": 3000}
