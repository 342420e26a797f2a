"""A response written a line per content block, with minutes between its lines (a long thinking,
a file written by Write: one tool input), read live: the turn is not closed as idle between them
(rules.response_continues), so the tool calls on its later lines are traced as in a backfill.

shared/realdata holds 18 such gaps of more than 60 s inside one response (Claude Code 1.0.17 to
2.1.233); 11 of them follow a thinking line or a line whose stop_reason is already tool_use."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import orjson
import pytest

from ccotel.records import SpanRecord
from ccotel.run.pipeline import Options, Pipeline
from tests.transcript import Transcript, text, thinking, tool_use

SID = "11111111-2222-4333-8444-555555555555"
S = 1_000_000_000
REALDATA = Path(__file__).resolve().parents[3] / "shared" / "realdata"


def _ids(spans: list[SpanRecord]) -> set[tuple[int, int, int | None, str]]:
    return {(s.trace_id, s.span_id, s.parent_span_id, s.name) for s in spans}


def _tool_ids(spans: list[SpanRecord]) -> set[str]:
    return {str(s.attributes["gen_ai.tool.call.id"]) for s in spans if "gen_ai.tool.call.id" in s.attributes}


def _backfill(lines: list[dict], root: Path, name: str) -> list[SpanRecord]:
    path = root / "projects" / "-w" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in lines))
    spans: list[SpanRecord] = []
    Pipeline(Options(roots=(str(root),)), emit=spans.extend, state=None).backfill(close_all=True)
    return spans


def _live(lines: list[dict], root: Path, name: str, at_ns: list[int], tick_ns: int = 5 * S) -> list[SpanRecord]:
    """Each line appended at its time (``at_ns``), the pipeline polled after it and ticked every
    ``tick_ns`` of the (fake) clock until the next one: what ccotel run sees while they are written."""
    path = root / "projects" / "-w" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    now = [at_ns[0]]
    spans: list[SpanRecord] = []
    p = Pipeline(Options(roots=(str(root),)), emit=spans.extend, state=None, clock=lambda: now[0])
    p.backfill()
    for i, line in enumerate(lines):
        now[0] = max(now[0], at_ns[i])
        with open(path, "ab") as f:
            f.write(orjson.dumps(line) + b"\n")
        p.poll([str(path)])
        until = at_ns[i + 1] if i + 1 < len(lines) else at_ns[i] + 10 * S
        for _ in range(min(200, max(0, (until - now[0]) // tick_ns))):  # bounded: 1,000 s at most
            now[0] += tick_ns
            p.tick()
    p.backfill(close_all=True)
    return spans


def _write_a_file(first: list[dict], first_stop: str | None) -> Transcript:
    """A prompt, then a response whose first line (``first``) comes minutes before its Write."""
    t = Transcript(SID, version="2.1.39")
    t.prompt("write the report", parent=None)
    t.response("msg_w", [*first, tool_use("toolu_w", "Write", file_path="/w/r.md", content="...")],
               stop_reason="tool_use")
    for line in t.lines[1:-1]:
        line["message"]["stop_reason"] = first_stop
    t.tool_result("toolu_w", "written")
    t.response("msg_done", [text("done")], stop_reason="end_turn")
    return t


@pytest.mark.parametrize(("first", "first_stop"), [
    ([thinking()], None),  # 1.0 to 2.1.2xx: each line without a stop_reason
    ([text("let me think"), thinking()], None),
    ([text("writing it")], "tool_use"),  # 2.1.2xx+: each line with the response's stop_reason
])
def test_a_tool_call_written_minutes_after_its_response_began_is_traced_live(tmp_path, first, first_stop):
    t = _write_a_file(first, first_stop)
    start = 1_750_000_000 * S
    gap = 170 * S  # past the 60 s idle timeout, inside the 180 s stall timeout
    at = [start, start + S, *(start + S + k * S for k in range(1, len(first))), start + S + gap,
          start + S + gap + 2 * S, start + S + gap + 3 * S]
    assert len(at) == len(t.lines)
    whole = _backfill(t.lines, tmp_path / "all", f"{SID}.jsonl")
    live = _live(t.lines, tmp_path / "live", f"{SID}.jsonl", at)
    assert "toolu_w" in _tool_ids(live)
    assert _ids(live) == _ids(whole)


def _read_live_once(t: Transcript, root: Path, now: list[int]) -> tuple[Pipeline, list[SpanRecord]]:
    """The transcript written whole, then read by a pipeline following it live at ``now[0]``."""
    path = root / "projects" / "-w" / f"{SID}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(t.bytes())
    spans: list[SpanRecord] = []
    p = Pipeline(Options(roots=(str(root),)), emit=spans.extend, state=None, clock=lambda: now[0])
    p.backfill()
    p.poll([str(path)])
    return p, spans


def test_a_final_answer_without_a_stop_reason_still_closes_after_the_idle_timeout(tmp_path):
    """Versions that never write a final stop_reason: a text line owes nothing, so the turn goes
    out once 60 s pass (not the stall timeout's 180)."""
    t = Transcript(SID, version="1.0.17")
    t.prompt("hi", parent=None)
    t.response("msg_a", [text("hello")], stop_reason=None)
    now = [1_750_000_000 * S]
    p, spans = _read_live_once(t, tmp_path, now)
    now[0] += 59 * S
    p.tick()
    assert not spans
    now[0] += 2 * S
    p.tick()
    assert [s.name for s in spans if s.parent_span_id is None] == ["invoke_agent claude-code"]


def test_a_response_that_stops_after_its_thinking_is_closed_by_the_stall_timeout(tmp_path):
    """Nothing comes after a thinking line (the process hung, its pid unknown): the turn is held
    past the idle timeout, marked stalled at 180 s, and closed as incomplete at 360 s."""
    t = Transcript(SID, version="2.1.39")
    t.prompt("hi", parent=None)
    t.response("msg_a", [thinking()], stop_reason=None)
    now = [1_750_000_000 * S]
    p, spans = _read_live_once(t, tmp_path, now)
    for at_s in (61, 179):
        now[0] = 1_750_000_000 * S + at_s * S
        p.tick()
        assert not spans, at_s
    now[0] = 1_750_000_000 * S + 181 * S
    p.tick()
    assert not spans and p.assembler.stalled_now() == 1
    now[0] = 1_750_000_000 * S + 361 * S
    p.tick()
    (turn,) = [s for s in spans if s.parent_span_id is None]
    assert turn.attributes["claude_code.turn.outcome"] == "incomplete"


def _gaps(lines: list[dict]) -> tuple[set[str], set[str]]:
    """Tool uses on a line written more than 60 s after an earlier line of its response: those
    after a line that says more is due (rules.response_continues), and the others (after a text
    line with no stop_reason, which may as well be a final answer)."""
    last: dict[str, tuple[float, dict]] = {}
    due, other = set(), set()
    for o in lines:
        m = o.get("message") if o.get("type") == "assistant" else None
        if not isinstance(m, dict) or not m.get("id") or not o.get("timestamp"):
            continue
        t = datetime.fromisoformat(o["timestamp"].replace("Z", "+00:00")).timestamp()
        ids = {b["id"] for b in m.get("content") or [] if isinstance(b, dict) and b.get("type") == "tool_use"}
        before = last.get(m["id"])
        if before is not None and t - before[0] > 60 and ids:
            pm = before[1]
            blocks = [b.get("type") for b in pm.get("content") or [] if isinstance(b, dict)]
            says_more = pm.get("stop_reason") == "tool_use" or (blocks and blocks[-1] == "thinking")
            (due if says_more else other).update(ids)
        last[m["id"]] = (t, m)
    return due, other


def _objects(path: Path) -> list[dict]:
    """The file's lines that are JSON objects (realdata has glued and cut lines: left out)."""
    out = []
    for b in path.read_bytes().splitlines():
        try:
            d = orjson.loads(b)
        except orjson.JSONDecodeError:
            continue
        if isinstance(d, dict):
            out.append(d)
    return out


def _realdata_with_gaps() -> list[Path]:
    if not REALDATA.is_dir():
        return []
    return [path for path in sorted(REALDATA.rglob("*.jsonl")) if _gaps(_objects(path))[0]]


def test_realdata_has_responses_with_minutes_between_their_lines():
    assert len(_realdata_with_gaps()) >= 5, "shared/realdata (the test data) is missing or changed"


@pytest.mark.parametrize("path", _realdata_with_gaps(), ids=lambda p: p.name[-40:])
def test_realdata_tool_calls_after_a_slow_block_are_traced_live(tmp_path, path):
    """Each real transcript with such a gap, its lines appended at their own timestamps with the
    pipeline ticked every 5 s between them: every tool use after a line that says more is due is
    traced, as when the whole file is read at once."""
    lines = _objects(path)
    due, _other = _gaps(lines)
    times = []
    for d in lines:
        ts = d.get("timestamp")
        ns = int(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * S) if isinstance(ts, str) else 0
        times.append(max(ns, times[-1] if times else ns))
    whole = _tool_ids(_backfill(lines, tmp_path / "all", path.name))
    live = _tool_ids(_live(lines, tmp_path / "live", path.name, times))
    assert due <= whole
    assert due <= live, sorted(due - live)
