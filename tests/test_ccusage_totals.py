"""ccotel's token totals against ccusage v20 (an independent reader of the same transcripts).

On the real-CLI fixtures and on all of shared/realdata (Claude Code 1.0.17 to 2.1.42) the
per-session totals must be equal, token for token. The one place they differ is a session
whose history was copied into a new session file: there ccusage credits the shared API call
to whichever file it reads first (by path), ccotel to the session that made it (the older
file); the test shows the evidence from the transcripts themselves.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from ccotel.pipeline import Options
from ccotel.report import build_report
from tests.harness.fixtures import list_fixtures, load_fixture
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


def _session_of_message(path: Path) -> dict[str, tuple[str, str]]:
    """message.id -> (sessionId, timestamp) of its first line in a file."""
    out: dict[str, tuple[str, str]] = {}
    for line in path.read_bytes().splitlines():
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        msg = obj.get("message") if isinstance(obj, dict) else None
        if obj.get("type") == "assistant" and isinstance(msg, dict) and msg.get("id"):
            out.setdefault(msg["id"], (obj.get("sessionId"), obj.get("timestamp")))
    return out


def test_realdata_totals_equal_ccusage(ccusage_installed, realdata_config_dir):  # noqa: F811
    theirs = ccusage_sessions(realdata_config_dir)
    ours = ccotel_sessions(realdata_config_dir)
    assert len(theirs) >= 50
    # Grand totals are equal: every API call counted exactly once by both.
    for _, key in KEYS:
        assert sum(s[key] for s in ours.values()) == sum(s[key] for s in theirs.values()), key
    differing = {sid for sid in set(ours) | set(theirs) if ours.get(sid) != theirs.get(sid)}
    # Per session they are equal except for the copied session pair (FORMAT.md section 2).
    original, copy = "e1bc91d1", "b4dcf65c"
    assert {sid[:8] for sid in differing} == {original, copy}, differing
    if differing:
        files = {p.stem[:8]: p for p in realdata_config_dir.glob("projects/*/*.jsonl")}
        orig_msgs = _session_of_message(files[original])
        copy_msgs = _session_of_message(files[copy])
        shared = set(orig_msgs) & set(copy_msgs)
        assert shared, "the two files share API responses"
        for mid in shared:
            # Evidence: the line in the original file carries the original sessionId, the copy
            # repeats the same message id and timestamp under its own new sessionId, and the
            # original session starts earlier. ccotel credits the original; ccusage the copy.
            assert orig_msgs[mid][0].startswith(original) and copy_msgs[mid][0].startswith(copy)
            assert orig_msgs[mid][1] == copy_msgs[mid][1]
        ours_orig = next(v for k, v in ours.items() if k.startswith(original))
        assert ours_orig["outputTokens"] > 0
        assert not any(k.startswith(original) for k in theirs), "ccusage drops the original session"
    assert os.environ.get("HOME") != str(realdata_config_dir)
