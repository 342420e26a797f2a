"""The hook spool as ``ccotel run`` follows it: events counted once across restarts, a permission wait on
its tool's span, a session's end reason on its last turn, late events counted only, bad lines counted."""

from __future__ import annotations

import json
from pathlib import Path

from ccotel.metrics.counters import Metrics
from ccotel.records import SpanKind, SpanRecord
from ccotel.sources.hooks.follower import HookSpool
from ccotel.sources.hooks.spool import spool_name
from ccotel.spans.attributes import (
    CLAUDE_CODE_SESSION_END_REASON,
    CLAUDE_CODE_TOOL_PERMISSION_DENIED,
    CLAUDE_CODE_TOOL_PERMISSION_WAIT_S,
    GEN_AI_AGENT_NAME,
    GEN_AI_OPERATION_NAME,
    GEN_AI_TOOL_CALL_ID,
    GEN_AI_TOOL_NAME,
    SESSION_ID,
)
from ccotel.store.state import Commit

S = 1_000_000_000
T0 = 1_795_000_000 * S
SID = "11111111-2222-3333-4444-555555555555"


def write(directory: Path, *records: dict[str, object]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / spool_name(T0)
    with path.open("a") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")
    return path


def ev(event: str, t: int, **fields: object) -> dict[str, object]:
    return {"t": T0 + t, "event": event, "session_id": SID, **fields}


def tool_span(tool_use_id: str, start: int, end: int, tool: str = "Bash", span_id: int = 7) -> SpanRecord:
    return SpanRecord(1, span_id, 2, f"execute_tool {tool}", SpanKind.INTERNAL, T0 + start, T0 + end,
                      {GEN_AI_OPERATION_NAME: "execute_tool", GEN_AI_TOOL_NAME: tool, GEN_AI_TOOL_CALL_ID: tool_use_id,
                       SESSION_ID: SID})


def turn_span(start: int, end: int, span_id: int) -> SpanRecord:
    return SpanRecord(span_id, span_id, None, "invoke_agent claude-code", SpanKind.INTERNAL, T0 + start, T0 + end,
                      {GEN_AI_OPERATION_NAME: "invoke_agent", GEN_AI_AGENT_NAME: "claude-code", SESSION_ID: SID})


def test_permission_wait_is_request_to_answer_on_the_tools_span(tmp_path: Path) -> None:
    d = tmp_path / "hooks"
    write(d, ev("PermissionRequest", 1 * S, tool_name="Bash", input_digest="abc"),
          ev("PostToolUse", 5 * S, tool_name="Bash", tool_use_id="toolu_1", duration_ms=1500, input_digest="abc"))
    metrics = Metrics()
    spool = HookSpool(str(d), {}, metrics)
    assert spool.poll() == 2
    span = tool_span("toolu_1", 0, 5 * S)
    spool.annotate([span])
    # answered at 5 s - 1.5 s (the tool's own run): 2.5 s after the request
    assert span.attributes[CLAUDE_CODE_TOOL_PERMISSION_WAIT_S] == 2.5
    metrics.observe_span(span)
    series = metrics.series()
    assert series[("ccotel_permission_wait_seconds_count", "Bash")] == 1.0
    assert series[("ccotel_permission_wait_seconds_sum", "Bash")] == 2.5
    assert series[("ccotel_permission_wait_seconds_bucket", "Bash", "5.0")] == 1.0
    assert ("ccotel_permission_wait_seconds_bucket", "Bash", "1.0") not in series


def test_without_an_answer_the_wait_ends_at_the_result_and_a_denial_is_said(tmp_path: Path) -> None:
    d = tmp_path / "hooks"
    write(d, ev("PermissionRequest", 1 * S, tool_name="Bash"),
          ev("PermissionRequest", 2 * S, tool_name="Write"),
          ev("PermissionDenied", 3 * S, tool_name="Write", tool_use_id="toolu_w", reason="no"))
    spool = HookSpool(str(d), {}, None)
    spool.poll()
    bash, write_ = tool_span("toolu_b", 0, 4 * S), tool_span("toolu_w", 1 * S, 3 * S + S // 10, "Write", 8)
    other = tool_span("toolu_x", 5 * S, 6 * S, span_id=9)  # the Bash request is used: no second pairing
    spool.annotate([bash, write_, other])
    assert bash.attributes[CLAUDE_CODE_TOOL_PERMISSION_WAIT_S] == 3.0
    assert write_.attributes[CLAUDE_CODE_TOOL_PERMISSION_WAIT_S] == 1.0
    assert write_.attributes[CLAUDE_CODE_TOOL_PERMISSION_DENIED] is True
    assert CLAUDE_CODE_TOOL_PERMISSION_WAIT_S not in other.attributes
    assert CLAUDE_CODE_TOOL_PERMISSION_DENIED not in bash.attributes


def test_a_request_read_after_its_span_was_built_is_counted_only(tmp_path: Path) -> None:
    d = tmp_path / "hooks"
    metrics = Metrics()
    spool = HookSpool(str(d), {}, metrics)
    span = tool_span("toolu_1", 0, 4 * S)
    spool.annotate([span])  # built before any hook event was read
    write(d, ev("PermissionRequest", 1 * S, tool_name="Bash"))
    spool.poll()
    assert CLAUDE_CODE_TOOL_PERMISSION_WAIT_S not in span.attributes
    assert metrics.series()[("ccotel_permission_wait_seconds_sum", "Bash")] == 3.0


def test_session_end_reason_on_the_last_turn_before_the_end(tmp_path: Path) -> None:
    d = tmp_path / "hooks"
    write(d, ev("SessionEnd", 100 * S, reason="prompt_input_exit"))
    metrics = Metrics()
    spool = HookSpool(str(d), {}, metrics)
    spool.poll()
    first, last, after = turn_span(0, 10 * S, 1), turn_span(20 * S, 30 * S, 2), turn_span(200 * S, 210 * S, 3)
    spool.annotate([first, last, after])
    assert last.attributes[CLAUDE_CODE_SESSION_END_REASON] == "prompt_input_exit"
    assert CLAUDE_CODE_SESSION_END_REASON not in first.attributes
    assert CLAUDE_CODE_SESSION_END_REASON not in after.attributes  # a resumed session's later turn
    assert metrics.series()[("ccotel_sessions_ended", "prompt_input_exit")] == 1.0
    assert metrics.series()[("ccotel_hook_events", "SessionEnd", "prompt_input_exit")] == 1.0


def test_a_session_end_waits_for_a_turn_not_built_yet_and_never_goes_on_an_earlier_one(tmp_path: Path) -> None:
    d = tmp_path / "hooks"
    spool = HookSpool(str(d), {}, None)
    first = turn_span(0, 10 * S, 1)
    spool.annotate([first])  # built before the end was known
    write(d, ev("SessionEnd", 40 * S, reason="other"))
    spool.poll()
    last = turn_span(20 * S, 30 * S, 2)
    spool.annotate([last])
    assert last.attributes[CLAUDE_CODE_SESSION_END_REASON] == "other"
    assert CLAUDE_CODE_SESSION_END_REASON not in first.attributes


def test_offsets_are_committed_and_a_restart_counts_nothing_twice(tmp_path: Path) -> None:
    d = tmp_path / "hooks"
    path = write(d, ev("SessionEnd", 1 * S, reason="clear"), ev("Notification", 2 * S, notification_type="idle_prompt"))
    metrics = Metrics()
    spool = HookSpool(str(d), {}, metrics)
    assert spool.poll() == 2
    commit = Commit()
    spool.take_commit(commit)
    ckpt = commit.offsets[str(path)]
    assert ckpt[1] == ckpt[2] == path.stat().st_size
    write(d, ev("SessionEnd", 3 * S, reason="logout"))
    again = HookSpool(str(d), {str(path): ckpt}, Metrics())
    assert again.poll() == 1  # only the line written after the commit
    assert again.metrics is not None
    assert again.metrics.series()[("ccotel_sessions_ended", "logout")] == 1.0
    assert ("ccotel_sessions_ended", "clear") not in again.metrics.series()


def test_bad_lines_are_counted_and_the_rest_read(tmp_path: Path) -> None:
    d = tmp_path / "hooks"
    path = write(d, ev("SessionEnd", 1 * S, reason="clear"))
    with path.open("ab") as f:
        f.write(b"not json\n[1,2]\n{\"t\": \"x\", \"event\": \"SessionEnd\"}\n")
    write(d, ev("SessionEnd", 2 * S, reason="other"))
    metrics = Metrics()
    spool = HookSpool(str(d), {}, metrics)
    assert spool.poll() == 2
    series = metrics.series()
    assert series[("ccotel_parse_errors", "hook_malformed_json")] == 1.0
    assert series[("ccotel_parse_errors", "hook_not_an_object")] == 1.0
    assert series[("ccotel_parse_errors", "hook_bad_field")] == 1.0


def test_a_pruned_spool_file_is_forgotten(tmp_path: Path) -> None:
    d = tmp_path / "hooks"
    path = write(d, ev("SessionEnd", 1 * S, reason="clear"))
    spool = HookSpool(str(d), {}, None)
    spool.poll()
    path.unlink()
    spool.poll()
    commit = Commit()
    spool.take_commit(commit)
    assert commit.forget_files == [str(path)]


def test_no_spool_dir_is_no_event(tmp_path: Path) -> None:
    assert HookSpool(str(tmp_path / "absent"), {}, Metrics()).poll() == 0
