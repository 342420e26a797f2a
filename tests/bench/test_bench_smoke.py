"""Smoke test of the benchmarks (bench/): the corpus generator's expected totals are exactly what
ccotel exports, the generator is deterministic, and ``python -m bench.run --quick`` runs every row.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections import Counter
from pathlib import Path

import orjson
import pytest

from bench import corpus
from ccotel.commands.report.usage import session_usage
from ccotel.records import SpanRecord, StatusCode
from ccotel.run.pipeline import Options, Pipeline

REPO = Path(__file__).resolve().parents[2]
ROW_KEYS = ("backfill_wall", "backfill_cpu", "backfill_spans", "span_identity", "per_span_noop", "per_span_otlp",
            "report_time", "live_p50", "live_p99", "idle_cpu", "peak_rss", "restart", "live_catchup")


def _kind(s: SpanRecord) -> str:
    if s.name == "invoke_agent claude-code":
        return "turns"
    op = s.attributes.get("gen_ai.operation.name")
    return {"invoke_agent": "subagents", "chat": "api_calls", "execute_tool": "tool_calls"}[str(op)]


def _digest(root: Path) -> str:
    h = hashlib.blake2b()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("shape", corpus.SHAPES)
def test_generator_totals_are_what_ccotel_exports(tmp_path, shape):
    root = tmp_path / "claude"
    exp = corpus.generate(str(root), size=1_500_000 if shape == "2.1.39" else 3_000_000, seed=5,
                          session_mean=150_000, shape=shape)
    t = exp["totals"]
    # the corpus has every shape the benchmarks rely on
    assert t["sessions"] >= 5 and t["subagents"] >= 1 and t["orphaned_tools"] >= 1 and t["error_tools"] >= 1
    assert (root / "projects").is_dir() and not list(root.glob("projects/*/*/subagents/*.jsonl")) == []
    metas = list(root.glob("projects/*/*/subagents/agent-*.meta.json"))
    assert len(metas) == t["subagents"]
    meta = orjson.loads(metas[0].read_bytes())
    assert set(meta) == {"agentType", "description", "toolUseId", "spawnDepth"}
    assert all(len(m.name) == len("agent-") + 17 + len(".meta.json") for m in metas)
    if shape != "2.1.39":
        _assert_new_shape(root, t)
    if shape == "agents":  # most of the bytes in many small subagent files
        subs = list(root.glob("projects/*/*/subagents/*.jsonl"))
        assert len(subs) >= 3 * t["sessions"]
        assert sum(p.stat().st_size for p in subs) > t["bytes"] / 2

    spans: list[SpanRecord] = []
    pipeline = Pipeline(Options(roots=(str(root),)), emit=spans.extend)
    pipeline.backfill()  # as `ccotel backfill` does (not --close-all): every turn is old, all close
    assert not pipeline.stats.errors
    assert len(spans) == t["spans"]
    assert len({s.span_id for s in spans}) == len(spans)
    per: dict[str, Counter[str]] = {}
    for s in spans:
        c = per.setdefault(str(s.attributes["gen_ai.conversation.id"]), Counter())
        c[_kind(s)] += 1
        if s.status is StatusCode.ERROR and s.status_message == "orphaned" and _kind(s) == "tool_calls":
            c["orphaned_tools"] += 1
    usage = session_usage(spans)
    got, want = {}, {}
    for sid, e in exp["sessions"].items():
        u = usage[sid]
        got[sid] = {"input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
                    "cache_creation_tokens": u.cache_creation_tokens, "cache_read_tokens": u.cache_read_tokens,
                    **{k: per[sid][k] for k in ("api_calls", "tool_calls", "turns", "subagents", "orphaned_tools")}}
        want[sid] = {k: e[k] for k in got[sid]}
        assert u.api_calls == e["api_calls"]
    assert got == want


def _assert_new_shape(root: Path, totals: dict[str, int]) -> None:
    """2.1.330's lines: a ~20-40 KB api-request-shape opening every file, an api-request named by
    the assistant lines' requestRef, attachments in the chain, cost-state; many subagent files."""
    types: Counter[str] = Counter()
    refs, requests, shape_sizes = set(), set(), []
    for f in root.glob("projects/**/*.jsonl"):
        first_shape = None
        for line in f.read_bytes().splitlines():
            d = orjson.loads(line)
            types[d["type"]] += 1
            if d["type"] == "api-request-shape":
                shape_sizes.append(len(line))
                first_shape = first_shape or len(line)
            elif d["type"] == "api-request":
                requests.add(d["id"])
            elif d["type"] == "assistant":
                refs.add(d["requestRef"])
        assert first_shape is not None
    assert refs == requests and len(requests) == totals["api_calls"]
    assert types["api-request-shape"] == totals["files"] and 20_000 < min(shape_sizes) and max(shape_sizes) < 80_000
    assert types["attachment"] > types["user"] and types["cost-state"] > 0 and types["api-request-blob"] > 0
    assert totals["subagents"] > totals["sessions"]


def test_generator_is_deterministic(tmp_path):
    a = corpus.generate(str(tmp_path / "a"), size=300_000, seed=9, session_mean=100_000)
    b = corpus.generate(str(tmp_path / "b"), size=300_000, seed=9, session_mean=100_000)
    c = corpus.generate(str(tmp_path / "c"), size=300_000, seed=10, session_mean=100_000)
    assert _digest(tmp_path / "a" / "projects") == _digest(tmp_path / "b" / "projects")
    assert a["sessions"] == b["sessions"]
    assert _digest(tmp_path / "a" / "projects") != _digest(tmp_path / "c" / "projects")
    assert a["sessions"].keys() != c["sessions"].keys()


def test_parse_size():
    assert corpus.parse_size("1GB") == 10**9
    assert corpus.parse_size("20MB") == 20 * 10**6
    assert corpus.parse_size("512KiB") == 512 * 1024
    assert corpus.parse_size("4096") == 4096


def test_runner_quick_prints_every_row(tmp_path):
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--size", "1MB", "--duration", "1", "--live-files", "30",
         "--idle-files", "100", "--rate", "20", "--workdir", str(tmp_path / "w"), "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    doc = orjson.loads(out.read_bytes())
    rows = {r["key"]: r for r in doc["rows"]}
    assert set(ROW_KEYS) <= rows.keys()
    for key in ROW_KEYS:
        assert rows[key]["name"] in proc.stdout
        assert rows[key]["status"] != "FAIL"
    for key in ("backfill_spans", "span_identity"):
        assert rows[key]["status"] == "ok"
    if rows["report_time"]["status"] != "skipped":
        assert rows["report_totals"]["status"] == "ok"
    assert rows["live_p99"]["value"] is not None and rows["live_p99"]["value"] == rows["live_p99"]["value"]  # not NaN
