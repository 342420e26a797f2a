"""``ccotel report blocks``: ccusage's block rules on hand-made calls, the blocks of
shared/realdata against ``ccusage claude blocks --json`` (every difference computed from the files),
an active block's burn rate and projection against ccusage's, and the table at 80 columns."""

from __future__ import annotations

import argparse
import json
import re
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import orjson
import pytest

from ccotel.commands.report.blocks import (
    BLOCK_NS,
    HOUR_NS,
    burn_rate,
    identify_blocks,
    limit_status,
    projection,
    token_limit,
)
from ccotel.commands.report.blocks_view import BlocksReport, as_json
from ccotel.commands.report.command import add_arguments
from ccotel.commands.report.transcripts import ReadOptions, gather, read_rows
from ccotel.read.parse_time import parse_timestamp
from ccotel.run.pipeline import Options, Pipeline
from ccotel.spans.pricing import DEFAULT_PRICING
from ccotel.store.ledger import LEDGER_FILE, CallRow, Ledger
from tests.support.ccusage import run_ccusage
from tests.support.fixtures import ccusage_installed, realdata_config_dir  # noqa: F401
from tests.support.report_cli import report_out
from tests.support.usage_check import session_files
from tests.support_selftest.test_support_ccusage import ADVISOR_SESSION, advisor_cache_split_gap

T0 = parse_timestamp("2026-01-01T10:17:00.000Z") or 0
MIN = 60 * 1_000_000_000


def call(at_ns: int, inp: int = 100, out: int = 50, cost: float | None = 0.01, model: str = "claude-x",
         failed: bool = False) -> CallRow:
    return CallRow(str(uuid.uuid4()), "s", at_ns, model, None, "p", "/w", failed, (inp, out, 2000, 1000, 0, 0, 0),
                   cost)


def test_a_block_starts_on_its_first_calls_hour_and_ends_five_hours_later():
    blocks = identify_blocks([call(T0), call(T0 + 60 * MIN)], now_ns=T0 + 1000 * HOUR_NS)
    assert len(blocks) == 1
    b = blocks[0]
    assert (b.start_ns, b.end_ns) == (T0 - 17 * MIN, T0 - 17 * MIN + BLOCK_NS)
    assert (b.entries, b.input, b.output, b.cache_read, b.cache_write) == (2, 200, 100, 4000, 2000)
    assert not b.active and burn_rate(b) is not None and projection(b, T0 + 1000 * HOUR_NS) is None


def test_a_call_past_the_blocks_end_starts_a_new_block_without_a_gap():
    start = T0 - 17 * MIN
    calls = [call(T0), call(T0 + 4 * HOUR_NS), call(start + BLOCK_NS), call(start + BLOCK_NS + 1)]
    blocks = identify_blocks(calls, now_ns=T0 + 1000 * HOUR_NS)
    # a call at the block's very end is still in it (ccusage: "more than 5 hours after its start")
    assert [(b.gap, b.entries, b.start_ns) for b in blocks] == [(False, 3, start), (False, 1, start + BLOCK_NS)]


def test_more_than_five_hours_without_a_call_is_a_gap_block_between():
    calls = [call(T0), call(T0 + 2 * HOUR_NS), call(T0 + 8 * HOUR_NS), call(T0 + 8 * HOUR_NS + MIN, failed=True)]
    blocks = identify_blocks(calls, now_ns=T0 + 1000 * HOUR_NS)
    assert [b.gap for b in blocks] == [False, True, False]
    gap = blocks[1]
    assert (gap.start_ns, gap.end_ns) == (T0 + 2 * HOUR_NS + BLOCK_NS, T0 + 8 * HOUR_NS)
    assert blocks[2].entries == 1  # a failed call is no entry (not billed)


def test_the_active_block_its_burn_rate_projection_and_limit():
    """ccusage's numbers on the same calls (test_an_active_block_equals_ccusages: 4 calls over
    80 minutes, 12,600 tokens, $0.0216: 157.5 tokens/min, 7.5 for the indicator, $0.0162/h)."""
    calls = [CallRow(str(i), "s", T0 + m * MIN, "claude-x", None, None, None, False, (100, 50, 2000, 1000, 0, 0, 0),
                     0.0054) for i, m in enumerate((0, 30, 60, 80))]
    now = T0 + 90 * MIN
    past = [call(T0 - 100 * HOUR_NS, inp=50_000)]
    blocks = identify_blocks(past + calls, now_ns=now)
    b = blocks[-1]
    assert b.active and not blocks[0].active
    rate = burn_rate(b)
    assert rate is not None
    assert (rate.tokens_per_minute, rate.tokens_per_minute_for_indicator) == (157.5, 7.5)
    assert rate.cost_per_hour == pytest.approx(0.0162)
    p = projection(b, now)
    assert p is not None
    remaining = (b.end_ns - now) / MIN  # 3 h 13 min left of the block that started at 10:00
    assert p.remaining_minutes == round(remaining) == 193
    assert p.total_tokens == round(12_600 + 157.5 * remaining)
    assert p.total_cost == round(0.0216 + 0.0162 / 60 * remaining, 2)
    assert token_limit("max", blocks) == 53_050  # the largest finished block, not the active one
    status = limit_status(b, 60_000, now)
    assert status is not None and status.status == "ok"
    assert limit_status(b, p.total_tokens - 1, now).status == "exceeds"  # type: ignore[union-attr]
    assert limit_status(b, int(p.total_tokens / 0.9), now).status == "warning"  # type: ignore[union-attr]


def _kept_line_times(config: Path) -> dict[str, int]:
    """Per call key, the time of the line ccusage keeps of it (CCUSAGE_NOTES.md finding 2: the
    largest input+output+cache total, the first of equals, files in path order)."""
    best: dict[str, tuple[int, int]] = {}
    for path in sorted((config / "projects").rglob("*.jsonl")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            msg = obj.get("message") if isinstance(obj, dict) else None
            if obj.get("type") != "assistant" or not isinstance(msg, dict) or not isinstance(msg.get("usage"), dict) \
                    or not msg.get("id"):
                continue
            u = msg["usage"]
            total = sum(int(u.get(k) or 0) for k in ("input_tokens", "output_tokens", "cache_creation_input_tokens",
                                                     "cache_read_input_tokens"))
            key = msg["id"] if not obj.get("requestId") else f"{msg['id']}:{obj['requestId']}"
            if key not in best or total > best[key][0]:
                best[key] = (total, parse_timestamp(obj["timestamp"]) or 0)
    return {k: t for k, (_total, t) in best.items()}


def _ccusages_entries(config: Path) -> list[CallRow]:
    """ccotel's calls, each placed at the time of the line ccusage keeps of it (ccotel places a
    call at its response's last line, when it was complete: the ledger's time), and the
    ``<synthetic>`` lines as entries of 0 tokens, as ccusage counts them (ccotel: no call)."""
    kept = _kept_line_times(config)
    out = [CallRow(f"synthetic{i}", "-", t, None, None, None, None, False, (0, 0, 0, 0, 0, 0, 0), 0.0)
           for i, t in enumerate(_synthetic_lines(config))]
    for key, _i, sid, usage, is_error, model, _first, last_ns, cost, project, cwd in \
            read_rows(ReadOptions(roots=(str(config),), pricing=DEFAULT_PRICING), 1, 1 << 62):
        out.append(CallRow(key, sid, kept.get(key.split("#")[0], last_ns), model, None, project, cwd,
                           bool(is_error or usage is None), usage or (0, 0, 0, 0, 0, 0, 0), cost))
    return out


# ccusage drops a line whose text holds one of these as null (CCUSAGE_NOTES.md finding 6)
_NULL_DROPS = tuple(f'"{f}":null' for f in ("id", "cwd", "model", "speed", "costUSD", "version", "sessionId",
                                             "requestId", "isApiErrorMessage", "cache_read_input_tokens",
                                             "cache_creation_input_tokens"))


def _synthetic_lines(config: Path) -> list[int]:
    """Times of the ``<synthetic>`` lines with a usage (once per uuid) that ccusage reads: it
    counts each as an entry of 0 tokens (CCUSAGE_NOTES.md finding 8), ccotel as no call."""
    seen, out = set(), []
    for path in sorted((config / "projects").rglob("*.jsonl")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if '"<synthetic>"' not in line or any(drop in line for drop in _NULL_DROPS):
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            msg = obj.get("message")
            if obj.get("type") == "assistant" and isinstance(msg, dict) and msg.get("model") == "<synthetic>" \
                    and isinstance(msg.get("usage"), dict) and obj.get("uuid") not in seen:
                seen.add(obj.get("uuid"))
                out.append(parse_timestamp(obj["timestamp"]) or 0)
    return out


def _tokens(b: dict) -> list[int]:
    return [b["tokenCounts"][k] for k in ("inputTokens", "outputTokens", "cacheCreationInputTokens",
                                           "cacheReadInputTokens")]


def _ns(iso: str) -> int:
    return parse_timestamp(iso) or 0


def test_realdata_blocks_equal_ccusage(ccusage_installed, realdata_config_dir, tmp_path):  # noqa: F811
    """Every block of shared/realdata as ``ccusage claude blocks --json`` cuts it: the same blocks
    and gaps, the same tokens in each. The differences, each computed from the files:
    - the time of a call: ccusage takes the line whose usage it keeps, ccotel the response's last
      line (when it was complete, as the ledger keeps it). At ccusage's time ccotel's blocks equal
      ccusage's field for field (start, end, last call, gaps); at its own, the blocks and their
      tokens are the same, and a block's last call and the gap after it come seconds later;
    - ccusage also counts ``<synthetic>`` lines as entries (0 tokens), ccotel API calls only: they
      make ``entries`` larger and can be a block's last entry or end a gap;
    - the advisor session's cache writes (test_realdata_totals_equal_ccusage), in its block;
    - cost: a model ccotel has no price for (glm-4.7) is left out and named (unpricedModels)."""
    config = realdata_config_dir
    theirs = run_ccusage(["claude", "blocks", "--json", "--offline", "--timezone", "UTC"], config)["blocks"]
    now = time.time_ns()
    assert not any(b["isActive"] for b in theirs)
    at_first = as_json(BlocksReport(identify_blocks(_ccusages_entries(config), now), now, None, "-"))["blocks"]
    assert len(theirs) == len(at_first) > 100
    gap = advisor_cache_split_gap(session_files(config)[ADVISOR_SESSION])
    advisor_ns = {c.time_ns for c in _ccusages_entries(config)
                  if c.session_id == ADVISOR_SESSION and "#advisor" in c.key}
    assert gap > 0 and advisor_ns
    fields = ("id", "startTime", "endTime", "actualEndTime", "isGap", "isActive", "totalTokens", "models", "entries")
    for mine, their in zip(at_first, theirs, strict=True):
        tokens = _tokens(mine)
        advisor = not mine["isGap"] and any(_ns(mine["startTime"]) <= t <= _ns(mine["actualEndTime"])
                                            for t in advisor_ns)
        if advisor:
            tokens[2] -= gap
            mine["totalTokens"] -= gap
        assert tokens == _tokens(their), mine["id"]
        mine["models"] = [m for m in mine["models"] if m != "unknown"]  # the synthetic entries' (no model)
        assert {k: mine[k] for k in fields} == {k: their[k] for k in fields}
        if mine["unpricedModels"]:
            assert mine["costUSD"] < their["costUSD"]
        elif advisor:  # the cache writes ccusage leaves out, at most $25 per million
            assert 0 < mine["costUSD"] - their["costUSD"] < gap * 25e-6
        else:
            assert mine["costUSD"] == pytest.approx(their["costUSD"], abs=0.01), mine["id"]

    # ccotel's own report (last line), from the transcripts and from a ledger: the same blocks
    ledger = Ledger(str(tmp_path / LEDGER_FILE), roots=(str(config),))
    Pipeline(Options(roots=(str(config),)), emit=ledger.record, state=None).backfill(close_all=True)
    from_ledger = gather(Options(roots=(str(config),)), ledger, workers=1, grace_ns=-(10**18))
    ledger.close()
    assert from_ledger.source == "ledger"
    reported = orjson.loads(_run("blocks", "--root", str(config), "--state-dir", "none", "--no-ledger", "--json",
                                 now_ns=now))["blocks"]
    ledger_blocks = as_json(BlocksReport(identify_blocks(from_ledger.calls, now), now, None, "ledger"))["blocks"]
    synthetic = _synthetic_lines(config)
    for rows in (reported, ledger_blocks):
        assert len(rows) == len(at_first)
        for mine, first in zip(rows, at_first, strict=True):
            assert (mine["isGap"], mine["endTime"] if not mine["isGap"] else None, _tokens(mine)) \
                == (first["isGap"], first["endTime"] if not first["isGap"] else None, _tokens(first))
            if not mine["isGap"]:
                assert mine["id"] == first["id"]
                extra = sum(1 for t in synthetic if _ns(mine["startTime"]) <= t < _ns(mine["endTime"]))
                assert mine["entries"] + extra == first["entries"]
                assert abs(_ns(mine["actualEndTime"]) - _ns(first["actualEndTime"])) < 10 * MIN
    assert any(m["actualEndTime"] != f["actualEndTime"] for m, f in zip(reported, at_first, strict=True))


_run = report_out


def _write_session(config: Path, times_ns: list[int]) -> None:
    """Calls written as Claude Code writes them (compact JSON, which ccusage needs)."""
    lines = []
    for i, t in enumerate(times_ns):
        stamp = datetime.fromtimestamp(t / 1e9, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        lines.append({"type": "assistant", "uuid": str(uuid.uuid4()), "sessionId": "s1", "requestId": f"req{i}",
                      "timestamp": stamp, "cwd": "/w", "message": {
                          "id": f"msg{i}", "model": "claude-sonnet-4-20250514", "role": "assistant",
                          "usage": {"input_tokens": 100, "output_tokens": 50, "cache_creation_input_tokens": 1000,
                                    "cache_read_input_tokens": 2000}}})
    (config / "projects" / "p").mkdir(parents=True)
    (config / "projects" / "p" / "s1.jsonl").write_text(
        "".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))


def test_an_active_block_equals_ccusages(ccusage_installed, tmp_path):  # noqa: F811
    """Calls of the last 90 minutes: ccusage's active block, burn rate, projection and limit
    status (its now is its own clock: the projection is compared to the minute)."""
    config = tmp_path / "claude"
    now = time.time_ns()
    _write_session(config, [now - m * MIN for m in (90, 60, 30, 10)])
    theirs = run_ccusage(["claude", "blocks", "--json", "--offline", "--active", "--token-limit", "5000"],
                         config)["blocks"]
    mine = orjson.loads(_run("blocks", "--root", str(config), "--state-dir", "none", "--json", "--active",
                             "--token-limit", "5000", now_ns=time.time_ns()))["blocks"]
    assert len(mine) == len(theirs) == 1
    m, t = mine[0], theirs[0]
    for k in ("id", "startTime", "endTime", "actualEndTime", "isActive", "entries", "tokenCounts", "totalTokens",
              "models"):
        assert m[k] == t[k], k
    assert m["costUSD"] == pytest.approx(t["costUSD"], rel=1e-6)
    for k, v in t["burnRate"].items():
        assert m["burnRate"][k] == pytest.approx(v, rel=1e-6), k
    assert abs(m["projection"]["remainingMinutes"] - t["projection"]["remainingMinutes"]) <= 1
    assert m["projection"]["totalTokens"] == pytest.approx(t["projection"]["totalTokens"], abs=200)
    assert m["projection"]["totalCost"] == pytest.approx(t["projection"]["totalCost"], abs=0.011)
    assert m["tokenLimitStatus"]["status"] == t["tokenLimitStatus"]["status"] == "exceeds"
    assert m["tokenLimitStatus"]["limit"] == 5000


def test_active_and_the_time_left_follow_the_given_now(tmp_path, monkeypatch):
    config = tmp_path / "claude"
    start = parse_timestamp("2026-03-01T09:00:00.000Z") or 0
    _write_session(config, [start + 5 * MIN, start + 65 * MIN])
    common = ("blocks", "--root", str(config), "--state-dir", "none", "--timezone", "UTC")
    assert orjson.loads(_run(*common, "--json", "--active", now_ns=start + 6 * HOUR_NS))["blocks"] == []
    monkeypatch.setenv("COLUMNS", "80")
    table = _run(*common, "--token-limit", "10000", now_ns=start + 2 * HOUR_NS)
    assert "ACTIVE 3h 00m left" in table and "Burn rate: 6,300 tokens/h" in table, table
    assert "Projected at its end: 25,200 tokens" in table and "252.0% of 10,000: exceeds" in table, table


@pytest.mark.parametrize("columns", [80, 120])
def test_the_blocks_table_never_cuts_a_number(columns, monkeypatch, realdata_config_dir):  # noqa: F811
    monkeypatch.setenv("COLUMNS", str(columns))
    common = ("blocks", "--root", str(realdata_config_dir), "--state-dir", "none", "--no-ledger", "--timezone", "UTC")
    now = time.time_ns()
    doc = orjson.loads(_run(*common, "--json", now_ns=now))["blocks"]
    table = _run(*common, "--token-limit", "max", now_ns=now)
    assert max(len(line) for line in table.splitlines()) <= columns
    for b in doc:
        if not b["isGap"]:
            for want in (f"{b['totalTokens']:,}", f"{b['costUSD']:,.2f}"):
                assert re.search(rf"(?<![\d.,]){re.escape(want)}\*?(?![\d.,])", table), (want, columns)


@pytest.mark.parametrize("bad", ["0", "-5", "lots", "1e6"])
def test_a_bad_token_limit_is_a_usage_error(bad):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["blocks", "--token-limit", bad])
    assert exit_.value.code == 2
    assert parser.parse_args(["blocks", "--token-limit", "MAX"]).token_limit == "max"
