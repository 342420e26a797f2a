"""docs/metrics.md, generated from the metric definitions: ``python docs/generate.py`` writes it.

Sources, all read from the code as it is:

- the Prometheus families ``ccotel run`` serves: ``Metrics.families()`` of ccotel/metrics/counters.py
  (every counter and histogram of ``METRICS``, the gauges of ``Metrics._gauges``, ``ccotel_build_info``);
- the GenAI metrics over OTLP: the instruments ``GenAIMetrics`` of ccotel/metrics/genai.py creates,
  once with the names the conventions replaced and once without.

What the code does not say (the values a label takes, the attributes of a GenAI metric) is in
DETAILS and GENAI_ATTRIBUTES below. tests/test_docs.py renders this in memory and compares it with
the file, so a metric added to the code without running this script fails the tests.
"""

from __future__ import annotations

import ast
import inspect
import io
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

OUT = ROOT / "docs" / "metrics.md"

# More than a family's help says: the values its labels take, how it is counted. Keyed by the family's
# name as exposed. A family without an entry gets its help only.
DETAILS: dict[str, str] = {
    "ccotel_session_resets_total":
        "`reason`: `missing_transcript` (a ghost session: prompts, no assistant record, idle past the stall "
        "timeout; or a transcript deleted before `cleanupPeriodDays`), `orphaned_tool_use` (resumed on a branch "
        "without a tool call that never got its result: Claude Code before the repair era; counted once, on the "
        "resumed turn), or the reason an orchestrator log names. Never counted as missing: `transcript_swept` "
        "(Claude Code's retention sweep), `transcript_relocated`, `not_persisted` "
        "(`--no-session-persistence`, `CLAUDE_CODE_SKIP_PROMPT_HISTORY`). `source`: `transcript` or the log's source.",
    "ccotel_aborts_total": "`live session close ... reason=abort` lines of an orchestrator log.",
    "ccotel_watchdog_kills_total": "`CLI produced no output for Ns and was terminated` lines of an orchestrator log.",
    "ccotel_stalled_turns_total": "`outcome`: `recovered`, `killed`, `orphaned`, `incomplete`; each turn once.",
    "ccotel_killed_turns_total": "Its `sessions/<pid>.json` names a dead or reused pid: counted at once.",
    "ccotel_orphaned_tool_uses_total":
        "Superseded by a new branch, process dead, idle past the stall timeout with no live process, or repaired "
        "by a 2.1.3xx resume; each call once, whether seen live or only from the repair.",
    "ccotel_missing_transcripts_total":
        "`kind`: `session` (a ghost session, or a transcript lost before the retention age) or `subagent` "
        "(named by `toolUseResult.agentId` or meta.json, its transcript never appeared).",
    "ccotel_turns_total": "`outcome`: `completed`, `interrupted`, `orphaned`, `killed`, `incomplete`.",
    "ccotel_user_interrupts_total": "The user pressed Esc.",
    "ccotel_api_errors_total": "`type`: the HTTP status of a failed API call written to the transcript.",
    "ccotel_tool_calls_total": "`outcome`: `ok`, `tool_error`, `rejected`, `interrupted`, `orphaned`.",
    "ccotel_tool_duration_seconds": "Buckets 0.1 s to 1800 s.",
    "ccotel_tokens_total":
        "`type`: `input` (fresh), `output`, `cache_read`, `cache_creation`; exact, once per API call (its final "
        "snapshot, whichever file holds it). An advisor's tokens count under the advisor's model.",
    "ccotel_cost_usd_total": "List prices of `genai-prices`, or `--prices FILE`.",
    "ccotel_unpriced_calls_total": "Never a silent $0: these calls' cost is not in `ccotel_cost_usd_total`.",
    "ccotel_format_unknown_total":
        "`kind`: `line_type` (each line) or `field` (first sighting per process, on sampled lines); labels cut to "
        "64 characters, at most 200 series.",
    "ccotel_lines_read_total": "Each line once, across restarts.",
    "ccotel_bytes_read_total": "Each byte once, across restarts.",
    "ccotel_parse_errors_total":
        "`reason`: `malformed_json`, `invalid_utf8`, `nul_bytes`, `line_too_long`, `bad_field`, `bad_timestamp`, "
        "`not_an_object`, `unreadable` (a file), `unreadable_dir` (a directory under a root; once per directory), "
        "`path_outside_root`, `bad_meta_json`.",
    "ccotel_checkpoint_errors_total":
        "Held and retried, nothing lost. `ledger`: a usage-ledger write that failed (those rows are missing from "
        "reports; tracing and counting go on).",
    "ccotel_reported_cost_usd_total":
        "`sum(ccotel_cost_usd_total) - sum(ccotel_reported_cost_usd_total)` is the drift.",
    "ccotel_spans_dropped_total":
        "`reason`: `bad_request`, `http_<code>`, `grpc_<code>`, `partial_success`, `too_large`, `unencodable`; "
        "final, so the checkpoint moves past them.",
    "ccotel_ingest_lag_seconds": "Only bytes written since ccotel started count.",
    "ccotel_relay_lines_total": "Only `ccotel relay --metrics-addr` counts the `ccotel_relay_*` families; "
                                "`ccotel run` serves them without samples or at 0.",
    "ccotel_registry_agents_total": "Only with `--registry DIR`. Agents already over when ccotel first sees a "
                                    "registry are traced, not counted.",
    "ccotel_registry_agent_seconds_total": "Mean run time: its increase over `ccotel_registry_agents_total`'s.",
    "ccotel_registry_killed_agents_total": "After `--registry-kill-grace` seconds (default 5).",
}

# The attributes each GenAI metric is recorded with (ccotel/metrics/genai.py). A new instrument needs a line.
_CHAT = "`gen_ai.operation.name=chat`, `gen_ai.provider.name`, `gen_ai.request.model`, `gen_ai.response.model`"
GENAI_ATTRIBUTES: dict[str, str] = {
    "gen_ai.client.inference.usage.input_tokens": _CHAT + ", `gen_ai.token.modality=unknown`",
    "gen_ai.client.inference.usage.output_tokens": _CHAT + ", `gen_ai.token.modality=unknown`",
    "gen_ai.client.inference.usage.cache_read.input_tokens": _CHAT + ", `gen_ai.token.modality=unknown`",
    "gen_ai.client.inference.usage.cache_write.input_tokens": _CHAT + ", `gen_ai.token.modality=unknown`",
    "gen_ai.client.inference.usage.reasoning.output_tokens": _CHAT + ", `gen_ai.token.modality=unknown`",
    "gen_ai.client.inference.operation.input_tokens": _CHAT,
    "gen_ai.client.inference.operation.output_tokens": _CHAT,
    "gen_ai.client.inference.duration": _CHAT + ", `error.type` (HTTP status) on failed calls",
    "gen_ai.client.inference.time_to_first_chunk": _CHAT,
    "gen_ai.execute_tool.duration": "`gen_ai.tool.name`, `gen_ai.tool.type`, `error.type`",
    "gen_ai.invocation.duration":
        "`gen_ai.operation.name=invoke_agent`, `gen_ai.agent.name`, `gen_ai.invocation.is_nested` (false: the "
        "turn, true: a subagent), `error.type` (`orphaned`, `interrupted`, `killed`)",
    "gen_ai.client.token.usage": _CHAT + ", `gen_ai.token.type` (`input`, `output`)",
    "gen_ai.client.operation.duration": _CHAT + ", `error.type` on failed calls",
    "gen_ai.invoke_agent.duration": "`gen_ai.operation.name=invoke_agent`, `gen_ai.agent.name`, `error.type`",
}


@dataclass(frozen=True)
class Family:
    name: str  # as exposed: counters end in _total
    kind: str  # counter | histogram | gauge
    labels: tuple[str, ...]
    help: str


@dataclass(frozen=True)
class Instrument:
    name: str
    kind: str  # counter | histogram
    unit: str
    help: str
    replaced: bool  # sent only unless OTEL_SEMCONV_STABILITY_OPT_IN has gen_ai_latest_experimental


def gauge_names() -> dict[str, str]:
    """The gauges ``Metrics._gauges`` declares (its ``helps`` literal): name -> help."""
    from ccotel.metrics.counters import Metrics

    tree = ast.parse(textwrap.dedent(inspect.getsource(Metrics._gauges)))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(isinstance(t, ast.Name) and t.id == "helps" for t in node.targets)):
            helps = ast.literal_eval(node.value)
            assert isinstance(helps, dict)
            return {str(k): str(v) for k, v in helps.items()}
    raise LookupError("Metrics._gauges declares no `helps` dict: update docs/generate.py")


def prometheus_families() -> list[Family]:
    """Every family the Prometheus endpoint serves, in the order it serves them."""
    from ccotel.metrics.counters import METRICS, Metrics

    names = gauge_names()
    metrics = Metrics(gauges=lambda: dict.fromkeys(names, 0.0))
    out = []
    for fam in metrics.families():
        spec = METRICS.get(fam.name)
        if spec is not None:
            labels = spec.labels
        else:
            labels = tuple(sorted({k for s in fam.samples for k in s.labels if k != "le"}))
        exposed = fam.name + "_total" if fam.type == "counter" else fam.name
        out.append(Family(exposed, fam.type, labels, fam.documentation))
    return out


def _instruments(obj: object) -> Iterator[tuple[str, str, str, str]]:
    from opentelemetry.metrics import Counter, Histogram

    values = obj if isinstance(obj, (list, tuple)) else vars(obj).values()
    for v in values:
        if isinstance(v, (Counter, Histogram)):
            kind = "counter" if isinstance(v, Counter) else "histogram"
            fields = vars(v)  # the SDK's instruments keep what they were created with
            yield str(fields["name"]), kind, str(fields["unit"]), str(fields["description"])
        elif isinstance(v, (list, tuple)):
            yield from _instruments(v)


def _genai(latest: bool) -> list[tuple[str, str, str, str]]:
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

    from ccotel.metrics.genai import GenAIMetrics, MetricsSettings

    settings = MetricsSettings(protocol="http/protobuf", endpoint="http://127.0.0.1:9/v1/metrics", headers=(),
                               timeout_s=1.0, gzip=False, certificate=None, interval_ms=3.6e6,
                               export_timeout_ms=1000.0, delta=False, latest=latest)
    g = GenAIMetrics(settings, {}, exporter=ConsoleMetricExporter(out=io.StringIO()))
    try:
        return list(_instruments(g))
    finally:
        g.shutdown(timeout_s=1.0)


def genai_instruments() -> list[Instrument]:
    current = {name for name, *_ in _genai(latest=True)}
    return [Instrument(name, kind, unit, help_, name not in current) for name, kind, unit, help_ in _genai(False)]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    fams = prometheus_families()
    lines = [
        "# Metrics",
        "",
        "<!-- Generated by `python docs/generate.py` from ccotel/metrics/counters.py and ccotel/metrics/genai.py;",
        "     edit those (or the notes in docs/generate.py), not this file. tests/test_docs.py checks it. -->",
        "",
        "`ccotel run` serves Prometheus text on `http://127.0.0.1:9477/metrics` (`--metrics-addr host:port`, "
        "`none` to turn it off; 9464 is Claude Code's own port). Names are under `ccotel_`; counters end in "
        "`_total`; values are in base units (seconds, bytes, USD); no session or user id is a label. "
        "`promtool check metrics` passes on the exposition (`tests/test_registry.py`).",
        "",
        "Counters count what happens while ccotel runs. History read on the very first start goes to traces only, "
        "so a first start or a restart never fires a rate alert. Totals are checkpointed with the offsets, so a "
        "restart neither resets a counter nor counts an event twice ([durability](durability.md)). Counters never "
        "wait for the trace backend.",
        "",
        "## Prometheus",
        "",
        "| metric | type | labels | meaning | details |",
        "|---|---|---|---|---|",
    ]
    for f in fams:
        labels = ", ".join(f"`{label}`" for label in f.labels)
        lines.append(f"| `{f.name}` | {f.kind} | {labels} | {_cell(f.help)} | {_cell(DETAILS.get(f.name, ''))} |")
    lines += [
        "",
        f"{len(fams)} families. `ccotel relay --metrics-addr host:port` serves the same endpoint for a relay "
        "([relay](relay.md)). Alert rules and dashboards built on these are in [deploying](deploying.md).",
        "",
        "## GenAI metrics over OTLP",
        "",
        "Besides Prometheus, `ccotel run` pushes the OpenTelemetry GenAI semantic-convention metrics "
        "(semantic-conventions-genai @ e9de14ba) to an OTLP metrics backend. They are off unless "
        "`OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` is set, or `OTEL_METRICS_EXPORTER=otlp` "
        "([configuration](configuration.md#opentelemetry-variables)). They are counted like the Prometheus "
        "counters: events seen live, each once.",
        "",
        "| metric | type | unit | attributes | meaning |",
        "|---|---|---|---|---|",
    ]
    instruments = genai_instruments()
    for i in instruments:
        if i.name not in GENAI_ATTRIBUTES:
            raise KeyError(f"{i.name}: say its attributes in GENAI_ATTRIBUTES (docs/generate.py)")
        meaning = i.help + (" Replaced name: sent unless `OTEL_SEMCONV_STABILITY_OPT_IN` has "
                            "`gen_ai_latest_experimental`." if i.replaced else "")
        lines.append(f"| `{i.name}` | {i.kind} | `{i.unit}` | {GENAI_ATTRIBUTES[i.name]} | {_cell(meaning)} |")
    lines += [
        "",
        "Input tokens count fresh + cache read + cache write; the cache and reasoning counters are parts of input "
        "and output. An advisor model's tokens count under its own model. Failed API calls have a duration but no "
        "tokens. No session, user, response or tool-call id is an attribute. Events counted by catch-up worker "
        "processes are not in these series. A restart starts new cumulative series, as with any OTLP exporter.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    text = render()
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)} ({len(text.encode())} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
