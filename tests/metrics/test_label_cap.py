"""Label values that come from transcripts are capped (issue 27): the first N distinct values of a
label keep their own series, later ones fold into "other", counted in
ccotel_label_values_folded_total, and the kept values survive a restart with the totals."""

from __future__ import annotations

import time

from prometheus_client.exposition import generate_latest

from ccotel.metrics.counters import Metrics, registry_for
from ccotel.run.pipeline import Options, Pipeline
from ccotel.store.sqlite import SqliteState as State
from tests.transcript import Transcript, text, tool_use

SID = "27272727-1111-4222-8333-444444444444"
N = 100
DISTINCT = 3000


def _pipeline(tmp_path, now: list[int]) -> tuple[Pipeline, Metrics]:
    metrics = Metrics()
    holder: list[Pipeline] = []
    p = Pipeline(Options(roots=(str(tmp_path / "claude"),)), emit=lambda spans: holder[0].acknowledge(spans),
                 clock=lambda: now[0], state=State(str(tmp_path / "st")), metrics=metrics)
    holder.append(p)
    p.backfill()
    return p, metrics


def _turns(t: Transcript, names: list[str], tag: str = "") -> None:
    """One turn per name: an API call of model ``m-<name>`` calling the tool ``mcp__x__<name>``."""
    for n in names:
        i = tag + n
        t.prompt(f"turn {i}", parent=t.last)
        t.response(f"msg_{i}a", [tool_use(f"toolu_{i}", name=f"mcp__x__{n}")], stop_reason="tool_use",
                   model=f"m-{n}")
        t.tool_result(f"toolu_{i}", "ok")
        t.response(f"msg_{i}b", [text("done")], stop_reason="end_turn", model=f"m-{n}")


def _values(metrics: Metrics, name: str, position: int) -> set[str]:
    return {k[1 + position] for k in metrics.series() if k[0] == name}


def _total(metrics: Metrics, name: str) -> float:
    return sum(v for k, v in metrics.series().items() if k[0] == name)


def test_distinct_tool_names_and_models_fold_into_other(tmp_path):
    (tmp_path / "claude" / "projects").mkdir(parents=True)
    now = [time.time_ns()]
    p, metrics = _pipeline(tmp_path, now)
    t = Transcript(SID)
    _turns(t, [f"{i:04d}" for i in range(DISTINCT)])
    path = t.write(str(tmp_path / "claude" / "projects" / "p" / f"{SID}.jsonl"))
    p.rescan()
    now[0] += 3600 * 10 ** 9
    p.tick()
    p.process_acks()
    # at most N values of their own and "other", on every label from the transcripts
    for name, position in (("ccotel_tool_calls", 0), ("ccotel_api_calls", 0), ("ccotel_tokens", 0),
                           ("ccotel_unpriced_calls", 0), ("ccotel_tool_duration_seconds_count", 0),
                           ("ccotel_tool_duration_seconds_bucket", 0)):
        values = _values(metrics, name, position)
        assert len(values) <= N + 1 and "other" in values, (name, len(values))
    # the totals stay exact
    assert _total(metrics, "ccotel_tool_calls") == DISTINCT
    assert _total(metrics, "ccotel_api_calls") == 2 * DISTINCT
    assert _total(metrics, "ccotel_tool_duration_seconds_count") == DISTINCT
    assert metrics.value("ccotel_tool_calls", "mcp__x__0000", "ok") == 1  # the first ones keep their own
    assert metrics.value("ccotel_tool_calls", "other", "ok") == DISTINCT - N
    assert metrics.value("ccotel_label_values_folded", "ccotel_tool_calls", "tool") == DISTINCT - N
    assert metrics.value("ccotel_label_values_folded", "ccotel_api_calls", "model") == 2 * (DISTINCT - N)
    t0 = time.monotonic()
    scrape = generate_latest(registry_for(metrics))
    assert len(scrape) < 300_000 and time.monotonic() - t0 < 0.5, len(scrape)
    series_before = set(metrics.series())
    folded_before = metrics.value("ccotel_label_values_folded", "ccotel_tool_calls", "tool")

    # a restart: the same series, and a new tool still folds while a kept one keeps its own
    p2, metrics2 = _pipeline(tmp_path, now)
    assert set(metrics2.series()) == series_before
    t2 = Transcript(SID, t_ms=t.t_ms, lines=[], last=t.last)
    _turns(t2, ["0001", "new"], tag="again")
    with open(path, "ab") as f:
        f.write(t2.bytes())
    p2.poll([path])
    now[0] += 3600 * 10 ** 9
    p2.tick()
    p2.process_acks()
    assert metrics2.value("ccotel_tool_calls", "mcp__x__0001", "ok") == 2
    assert metrics2.value("ccotel_tool_calls", "other", "ok") == DISTINCT - N + 1
    assert "mcp__x__new" not in _values(metrics2, "ccotel_tool_calls", 0)
    assert metrics2.value("ccotel_label_values_folded", "ccotel_tool_calls", "tool") == folded_before + 1
    assert _total(metrics2, "ccotel_tool_calls") == DISTINCT + 2
    assert State(str(tmp_path / "st")).sizes()["counters"] < 40 * N  # was one row per series: 66,025


def test_the_cap_is_configurable_and_other_itself_takes_no_slot():
    from ccotel.metrics.counters import Metrics as M

    m = M(max_label_values=2)
    for reason in ("a", "b", "other", "c", "d"):
        m.inc("ccotel_parse_errors", reason)
    assert {k[1] for k in m.series() if k[0] == "ccotel_parse_errors"} == {"a", "b", "other"}
    assert m.value("ccotel_parse_errors", "other") == 3
    assert m.value("ccotel_label_values_folded", "ccotel_parse_errors", "reason") == 2
    again = M(max_label_values=2)
    again.restore(m.snapshot())
    again.inc("ccotel_parse_errors", "b")
    again.inc("ccotel_parse_errors", "e")
    assert again.value("ccotel_parse_errors", "b") == 2 and again.value("ccotel_parse_errors", "other") == 4
