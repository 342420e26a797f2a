"""The same transcript gives the same trace and span ids read live by ``ccotel run`` (its lines
appended with real delays, over a second of quiet after the turn's final answer) and in a backfill:
where a line after a final answer goes is decided by the transcript, not by when it is read.

A real ``ccotel run`` process and a real ``ccotel backfill``, both exporting to the loopback OTLP
receiver; the transcripts are tests/assemble/test_assemble.py's wake-ups (a background agent's
message, a scheduled wake-up) and its late ``<task-notification>``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.assemble.test_assemble import _background_agent_then_notification, _woken_after_the_final_answer
from tests.support.otlp import OtlpReceiver
from tests.test_cli import ccotel, stop
from tests.transcript import Transcript

SID = "11111111-2222-4333-8444-555555555555"  # the session of those transcripts
QUIET_S = 1.5  # more than the second after a final answer that closes a turn read live


def _ids(spans: list[dict]) -> set[tuple[str, str, str | None, str]]:
    return {(s["trace_id"], s["span_id"], s["parent_span_id"], s["name"]) for s in spans}


def _backfill(root: Path) -> set[tuple[str, str, str | None, str]]:
    with OtlpReceiver() as rx:
        proc = ccotel("backfill", "--root", str(root), "--state-dir", "none",
                      env={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": rx.endpoint})
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        return _ids(rx.spans)


def _waits(t: Transcript) -> list[float]:
    """Seconds to wait before each line: QUIET_S before a line that comes 2 s or more after the one
    before it in the transcript (the wake-up, the notification, a slow answer), else 0.05 s."""
    stamps = [time.mktime(time.strptime(line["timestamp"][:19], "%Y-%m-%dT%H:%M:%S")) for line in t.lines]
    return [QUIET_S if i and stamps[i] - stamps[i - 1] >= 2 else 0.05 for i in range(len(stamps))]


@pytest.mark.parametrize("case", ["peer", "scheduled", "notification"])
def test_live_and_backfill_give_the_same_ids(tmp_path: Path, case: str) -> None:
    t = _background_agent_then_notification() if case == "notification" else _woken_after_the_final_answer(case)
    # (its lines are stamped in 2025: none is in the future of the live reader's clock)
    root = tmp_path / "claude"
    path = root / "projects" / "-tmp-proj" / f"{SID}.jsonl"
    path.parent.mkdir(parents=True)
    path.touch()
    with OtlpReceiver() as rx:
        proc = ccotel("run", "--root", str(root), "--no-status", "--state-dir", str(tmp_path / "st"),
                      "--metrics-addr", "none", env={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": rx.endpoint})
        try:
            time.sleep(2)  # started and watching
            with open(path, "ab") as f:
                for wait, line in zip(_waits(t), t.bytes().splitlines(keepends=True), strict=True):
                    time.sleep(wait)
                    f.write(line)
                    f.flush()
            want = _backfill(root)
            deadline = time.monotonic() + 60
            while _ids(rx.spans) != want and time.monotonic() < deadline:
                time.sleep(0.2)
            stop(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
        live = _ids(rx.spans)
    assert live == want, ("live only", sorted(live - want), "backfill only", sorted(want - live))
    assert sum(1 for s in want if s[2] is None) == 2  # two turns: the first prompt's, then the wake-up's
