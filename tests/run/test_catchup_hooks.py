"""What the hooks said goes on the spans catch-up workers build as on those one process builds:
permission waits and denials on tool spans, a session's end reason on its last turn; the events
are counted once, by the caller (catchup.py, Options.hooks_annotate_from)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from ccotel.sources.hooks.spool import spool_name
from ccotel.spans.attributes import (
    CLAUDE_CODE_SESSION_END_REASON,
    CLAUDE_CODE_TOOL_PERMISSION_DENIED,
    CLAUDE_CODE_TOOL_PERMISSION_WAIT_S,
)
from tests.run.test_catchup import catch_up, spans_by_id
from tests.support.otlp import OtlpReceiver

S = 1_000_000_000


def _ns(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1e9)


def _events(root: Path) -> list[dict[str, object]]:
    """For every third tool call of every main transcript: a permission request just after its
    tool_use and its answer (PostToolUse, or a denial for every seventh), and each session's end."""
    out: list[dict[str, object]] = []
    for path in sorted(root.glob("projects/*/*.jsonl")):
        uses: dict[str, tuple[str, str, int]] = {}
        last = 0
        n = 0
        for raw in path.read_text().splitlines():
            line = json.loads(raw)
            stamp = line.get("timestamp")
            if not isinstance(stamp, str):
                continue
            t, sid = _ns(stamp), line.get("sessionId")
            last = max(last, t)
            content = (line.get("message") or {}).get("content")
            for block in content if isinstance(content, list) else []:
                if block.get("type") == "tool_use":
                    uses[block["id"]] = (sid, block["name"], t)
                elif block.get("type") == "tool_result" and block.get("tool_use_id") in uses:
                    n += 1
                    use_sid, name, started = uses.pop(block["tool_use_id"])
                    if n % 3:
                        continue
                    out.append({"t": started + S // 10, "event": "PermissionRequest", "session_id": use_sid,
                                "tool_name": name})
                    answer = "PermissionDenied" if n % 7 == 0 else "PostToolUse"
                    out.append({"t": t, "event": answer, "session_id": use_sid, "tool_name": name,
                                "tool_use_id": block["tool_use_id"]})
        out.append({"t": last + S, "event": "SessionEnd", "session_id": path.stem, "reason": "logout"})
    return sorted(out, key=lambda e: int(e["t"]))  # type: ignore[call-overload]


def test_workers_put_the_hooks_on_their_spans_as_one_process_does(tmp_path, monkeypatch):  # noqa: ANN001
    from bench.corpus import generate

    root = tmp_path / "claude"
    generate(str(root), 2_000_000, seed=9, session_mean=200_000, projects=2)
    spool = tmp_path / "hooks"
    spool.mkdir()
    events = _events(root)
    (spool / spool_name(int(events[0]["t"]))).write_text(  # type: ignore[call-overload]
        "".join(json.dumps(e) + "\n" for e in events))
    with OtlpReceiver() as one, OtlpReceiver() as many:
        counted_one, _, _ = catch_up(root, tmp_path / "state-one", one.endpoint, 1, monkeypatch, hooks_spool=spool)
        counted_many, processes, _ = catch_up(root, tmp_path / "state-many", many.endpoint, 2, monkeypatch,
                                              hooks_spool=spool)
        spans_one, spans_many = spans_by_id(one), spans_by_id(many)
    assert processes == 2
    waits = [s for s in spans_one.values() if CLAUDE_CODE_TOOL_PERMISSION_WAIT_S in s["attributes"]]
    denied = [s for s in spans_one.values() if CLAUDE_CODE_TOOL_PERMISSION_DENIED in s["attributes"]]
    ends = [s for s in spans_one.values() if CLAUDE_CODE_SESSION_END_REASON in s["attributes"]]
    assert len(waits) > 10 and denied and len(ends) >= 5, (len(waits), len(denied), len(ends))
    assert spans_many == spans_one
    keys = {k for k in counted_one if k.startswith(("ccotel_hook_events", "ccotel_sessions_ended",
                                                    "ccotel_permission_wait_seconds"))}
    assert keys and {k: counted_many.get(k) for k in keys} == {k: counted_one[k] for k in keys}
