"""Claude Code's own cost (2.1.3xx cost-state lines) counted as increments: a file read from its
start remembers each process's last cost-state line and is not searched again for it (reader.py
_costs_before); what is counted is what searching the file gives (_previous_costs)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccotel.run import reader
from tests.metrics.test_metrics import Live

MODELS = ("claude-opus-5-5", "claude-haiku-4-5")
SESSIONS = ("a78f58d0-09a8-4e52-88a5-1c62444d2b20", "b78f58d0-09a8-4e52-88a5-1c62444d2b21")


def cost_state(session: str, start: int, costs: dict[str, float]) -> bytes:
    usage = {m: {"inputTokens": 1, "outputTokens": 1, "costUSD": c} for m, c in costs.items()}
    return orjson.dumps({"type": "cost-state", "sessionId": session, "startTime": start,
                         "modelUsage": usage}) + b"\n"


def counted(tmp: Path, lines: list[bytes], search: bool) -> dict[str, float]:
    """The reported cost per model after a live read of one file of these lines; ``search``: as
    before the memory (every process's first line searches the file)."""
    live = Live(tmp)
    path = live.root / "projects" / "-p" / f"{SESSIONS[0]}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(lines))
    with pytest.MonkeyPatch.context() as mp:
        if search:
            mp.setattr(reader, "_costs_before", lambda *_a: None)
        live.p.rescan()
    return {m: live.v("ccotel_reported_cost_usd", m) for m in MODELS}


def test_a_file_read_from_its_start_is_not_searched_and_counts_the_same(tmp_path, monkeypatch):
    lines = [cost_state(SESSIONS[0], 1, {MODELS[0]: 1.0}),
             cost_state(SESSIONS[1], 1, {MODELS[0]: 2.5}),  # the same process under another session id
             cost_state(SESSIONS[1], 2, {MODELS[1]: 0.5}),
             cost_state(SESSIONS[1], 1, {MODELS[0]: 3.0, MODELS[1]: 0.25})]
    searched = counted(tmp_path / "a", lines, search=True)
    assert searched == {MODELS[0]: 3.0, MODELS[1]: 0.75}

    def never(*_a: object) -> dict[str, float]:
        raise AssertionError("searched a file read from its start")

    monkeypatch.setattr(reader, "_previous_costs", never)
    assert counted(tmp_path / "b", lines, search=False) == searched


costs = st.dictionaries(st.sampled_from(MODELS), st.floats(0, 100, allow_nan=False), max_size=2)
line_specs = st.lists(st.tuples(st.sampled_from(SESSIONS), st.integers(1, 4), costs), min_size=1, max_size=12)


@settings(max_examples=40, deadline=None)
@given(line_specs)
def test_the_memory_counts_what_searching_the_file_counts(specs):
    lines = [cost_state(s, start, c) for s, start, c in specs]
    with tempfile.TemporaryDirectory() as d:
        want = counted(Path(d) / "search", lines, search=True)
        got = counted(Path(d) / "memory", lines, search=False)
    assert got == pytest.approx(want, rel=1e-12, abs=1e-12)
