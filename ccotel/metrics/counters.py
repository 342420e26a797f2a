"""Metrics stage: counters derived from spans as they are built and from detectors, served to Prometheus.

Counters count what happens while ccotel runs: spans of history read on a first start are not
counted, and the totals are checkpointed with the offsets (state.py), so a restart neither
resets them nor counts an event twice. They never wait for the trace backend: a span is counted
when it is built; its increments are checkpointed once the span is final (delivered, or dropped
for good), and until then a crash re-reads its lines and counts it again, once. Everything is
exposed by one custom Collector reading this object at scrape time; no global registry.
"""

from __future__ import annotations

import bisect
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ccotel import __version__
from ccotel.records import SpanRecord, StatusCode
from ccotel.spans.attributes import (
    CLAUDE_CODE_COMPACTION,
    CLAUDE_CODE_COMPACTION_TRIGGER,
    CLAUDE_CODE_COST_UNPRICED,
    CLAUDE_CODE_COST_USD,
    CLAUDE_CODE_TOOL_PERMISSION_WAIT_S,
    CLAUDE_CODE_TOOL_REPAIRED,
    CLAUDE_CODE_TURN_LOST_TOOLS,
    CLAUDE_CODE_TURN_OUTCOME,
    CLAUDE_CODE_TURN_STALLED,
    CLAUDE_CODE_USAGE_INPUT_TOKENS,
    ERROR_TYPE,
    GEN_AI_AGENT_NAME,
    GEN_AI_OPERATION_NAME,
    GEN_AI_RESPONSE_MODEL,
    GEN_AI_TOOL_NAME,
    GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
    GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS,
)
from ccotel.spans.correction import CORRECTION_OPERATION as _CORRECTION

if TYPE_CHECKING:  # prometheus_client is loaded when metrics are served: catch-up workers only count
    from prometheus_client.core import HistogramMetricFamily, Metric
    from prometheus_client.registry import CollectorRegistry

    from ccotel.metrics.genai import GenAIMetrics

__all__ = ["Metrics", "METRICS", "DURATION_BUCKETS", "DEFAULT_MAX_LABEL_VALUES", "OTHER", "histogram_increments",
           "registry_for"]

DURATION_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)


@dataclass(frozen=True)
class Spec:
    kind: str  # counter | histogram
    help: str
    labels: tuple[str, ...] = ()


# The contract (docs/metrics.md is generated from it). Names without _total; the exposition adds it.
METRICS: dict[str, Spec] = {
    "ccotel_session_resets": Spec("counter", "Sessions that restarted without their memory, by reason and source "
                                  "(missing_transcript, orphaned_tool_use, or an orchestrator's reason).",
                                  ("reason", "source")),
    "ccotel_aborts": Spec("counter", "Sessions an orchestrator closed with an abort, by reason and source.",
                          ("reason", "source")),
    "ccotel_watchdog_kills": Spec("counter", "Runs a no-output watchdog terminated, by source.", ("source",)),
    "ccotel_stalled_turns": Spec("counter", "Turns that went silent past the stall timeout while the model or a "
                                 "tool owed a reply, counted once by what they turned out to be.", ("outcome",)),
    "ccotel_killed_turns": Spec("counter", "Turns whose Claude Code process died while they were open."),
    "ccotel_orphaned_tool_uses": Spec("counter", "Tool calls that never got a result.", ("tool",)),
    "ccotel_missing_transcripts": Spec("counter", "Transcripts that should exist and never appeared: ghost "
                                       "sessions (no assistant record) and subagents.", ("kind",)),
    "ccotel_turns": Spec("counter", "Turns finished, by outcome.", ("outcome",)),
    "ccotel_user_interrupts": Spec("counter", "Turns the user interrupted."),
    "ccotel_api_calls": Spec("counter", "API responses (one per message.id + requestId).", ("model",)),
    "ccotel_api_errors": Spec("counter", "Failed API calls recorded in transcripts, by HTTP status or type.",
                              ("type",)),
    "ccotel_tool_calls": Spec("counter", "Tool calls, by tool and outcome.", ("tool", "outcome")),
    "ccotel_tool_duration_seconds": Spec("histogram", "Tool call duration, tool_use to tool_result.", ("tool",)),
    "ccotel_tokens": Spec("counter", "Tokens by model and type (input, output, cache_read, cache_creation).",
                          ("model", "type")),
    "ccotel_cost_usd": Spec("counter", "Estimated cost in USD at list prices.", ("model",)),
    "ccotel_corrected_tokens": Spec("counter", "Tokens a later, larger snapshot of an API call already counted "
                                    "added to ccotel_tokens_total (its final usage in a line read after its span "
                                    "went out, e.g. a compaction agent's copy), by model and type.",
                                    ("model", "type")),
    "ccotel_calls_without_envelope": Spec("counter", "Assistant lines with a message id and usage that lack an "
                                          "envelope field, counted as API calls all the same, by the first field "
                                          "they lack (type, uuid, sessionId).", ("missing",)),
    "ccotel_subagents": Spec("counter", "Subagents run, by type.", ("type",)),
    "ccotel_compactions": Spec("counter", "Context compactions, by trigger.", ("trigger",)),
    "ccotel_lines_read": Spec("counter", "Transcript lines read."),
    "ccotel_bytes_read": Spec("counter", "Transcript bytes read."),
    "ccotel_parse_errors": Spec("counter", "Bad input skipped, by reason.", ("reason",)),
    "ccotel_format_unknown": Spec("counter", "Transcript format ccotel does not know, by Claude Code version: "
                                  "lines of an unknown type (each line), unknown top-level fields (first "
                                  "sighting per process, on sampled lines).", ("version", "kind", "name")),
    "ccotel_checkpoint_errors": Spec("counter", "Checkpoint commits that failed and are held for retry, by reason "
                                     "(disk_full, read_only, io_error, locked, corrupt, other; ledger: a usage-ledger "
                                     "write, which the checkpoints then wait for, that failed for another reason "
                                     "than the disk's).", ("reason",)),
    "ccotel_reported_cost_usd": Spec("counter", "Claude Code's own cost figure (2.1.3xx cost-state lines), by "
                                     "model, beside ccotel's estimate ccotel_cost_usd_total; it includes calls "
                                     "no transcript line records (compaction).", ("model",)),
    "ccotel_unpriced_calls": Spec("counter", "API calls of models without a known price (their cost is not in "
                                  "ccotel_cost_usd_total; give them one with --prices).", ("model",)),
    "ccotel_spans_exported": Spec("counter", "Spans the trace backend acknowledged."),
    "ccotel_export_failures": Spec("counter", "Export attempts the trace backend refused or missed."),
    "ccotel_spans_dropped": Spec("counter", "Spans that will never reach the trace backend: rejected by it "
                                 "(HTTP 400, partial success, too large, ...) or not encodable, by reason.",
                                 ("reason",)),
    # ccotel relay (relay.py): what the stream-json output of `claude -p` says
    "ccotel_relay_lines": Spec("counter", "stream-json lines ccotel relay passed through."),
    "ccotel_relay_bad_lines": Spec("counter", "stream-json lines passed through unchanged but not understood, by "
                                   "reason (malformed_json, invalid_utf8, not_an_object, truncated, "
                                   "line_too_long).", ("reason",)),
    "ccotel_relay_results": Spec("counter", "result records on the stream, by subtype, is_error and "
                                 "terminal_reason.", ("subtype", "is_error", "terminal_reason")),
    "ccotel_relay_api_retries": Spec("counter", "system/api_retry events on the stream, by HTTP status and "
                                     "error.", ("status", "error")),
    "ccotel_relay_permission_denials": Spec("counter", "Tool calls the permission rules refused "
                                            "(result.permission_denials), by tool.", ("tool",)),
    "ccotel_relay_tokens": Spec("counter", "Tokens by model and type from result.modelUsage (Claude Code's own "
                                "totals: subagents and advisor calls included).", ("model", "type")),
    "ccotel_relay_cost_usd": Spec("counter", "Claude Code's own cost figure (result.modelUsage costUSD), by "
                                  "model.", ("model",)),
    "ccotel_relay_context_switches": Spec("counter", "Cumulative content arrays whose first block changed within "
                                          "an agent context (processed again from their start)."),
    "ccotel_relay_repeated_blocks": Spec("counter", "Content blocks a producer emitted again, dropped by id."),
    # --registry DIR (sources/registry/): an orchestrator's agents
    "ccotel_registry_agents": Spec("counter", "Agents of an orchestrator's registry (--registry) that ended, by "
                                   "type, outcome (done, failed, killed) and depth.", ("type", "status", "depth")),
    "ccotel_registry_agent_seconds": Spec("counter", "Run time of the registry's agents that ended (Started to "
                                          "Ended; a killed one to its output's last change), by type, outcome "
                                          "and depth.", ("type", "status", "depth")),
    "ccotel_registry_killed_agents": Spec("counter", "Registry agents whose process died (or whose pid another "
                                          "process took) while their Status still said in-progress (by type: "
                                          "ccotel_registry_agents_total{status=\"killed\"})."),
    "ccotel_registry_bad_input": Spec("counter", "Registry files read mid-write or not understood, by reason "
                                      "(malformed_json, partial_front_matter, no_front_matter, bad_entry, bad_pid, "
                                      "unknown_status, ...).", ("reason",)),
    # Claude Code's hooks (sources/hooks/, `ccotel hook`): what the transcripts cannot say
    "ccotel_sessions_ended": Spec("counter", "Sessions that ended, by SessionEnd's reason (clear, logout, "
                                  "prompt_input_exit, other, ...).", ("reason",)),
    "ccotel_permission_wait_seconds": Spec("histogram", "Time tool calls waited on the user's permission "
                                           "(PermissionRequest to the answer), by tool.", ("tool",)),
    "ccotel_hook_events": Spec("counter", "Hook events read from the spool, by event and kind (a Notification's "
                               "type, a PreCompact's trigger, a SessionStart's source, a SessionEnd's reason).",
                               ("event", "kind")),
    # the /metrics server (metrics/server.py)
    "ccotel_metrics_connections_evicted": Spec("counter", "Connections to /metrics closed to let a new one in: "
                                               "the server holds a few at once (docs/metrics.md), the oldest "
                                               "closed first, so idle holders never lock a scrape out."),
    # the cap on label values (LabelCap): what it folded
    "ccotel_label_values_folded": Spec("counter", "Increments whose label value was folded into \"other\" because "
                                       "that label of that metric had --max-label-values distinct values already "
                                       "(a histogram: once per observation), by metric and label.",
                                       ("metric", "label")),
}
_TOKEN_ATTRS = (("input", CLAUDE_CODE_USAGE_INPUT_TOKENS), ("output", GEN_AI_USAGE_OUTPUT_TOKENS),
                ("cache_read", GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS),
                ("cache_creation", GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS))


Key = tuple[str, ...]  # (name, *label values): label values from transcripts hold any character


def _key(name: str, labels: tuple[str, ...]) -> Key:
    return (name, *labels)


def encode_key(k: Key) -> str:
    """A series as a text key for the state store: fields joined by \\x1f, each field's own
    backslashes and \\x1f escaped, so no label value can split into two (a tool named "Ba\\x1fsh")."""
    name, *labels = k
    return name + "\x1f" + "\x1f".join(f.replace("\\", "\\\\").replace("\x1f", "\\u001f") for f in labels)


_ESCAPED = re.compile(r"\\(\\|u001f)")


def decode_key(text: str) -> Key:
    name, _, rest = text.partition("\x1f")
    spec = METRICS.get(name)
    if spec is not None and not spec.labels:
        return (name,)
    return (name, *(_ESCAPED.sub(lambda m: "\\" if m.group(1) == "\\" else "\x1f", f) for f in rest.split("\x1f")))


OTHER = "other"  # the label value later distinct values fold into
DEFAULT_MAX_LABEL_VALUES = 100
_FOLDED = "ccotel_label_values_folded"


def _capped_series() -> dict[str, tuple[str, tuple[str, ...], bool]]:
    """Series name -> (the metric it belongs to, its label names capped, whether a fold is
    counted on it). A histogram's _bucket, _sum and _count series fold a tool alike (its "le"
    label is ccotel's own) and a fold is counted once per observation, on _count. The folded
    counter's own labels are metric and label names: never capped."""
    out: dict[str, tuple[str, tuple[str, ...], bool]] = {}
    for name, spec in METRICS.items():
        if name == _FOLDED or not spec.labels:
            continue
        if spec.kind == "histogram":
            for suffix in ("_bucket", "_sum", "_count"):
                out[name + suffix] = (name, spec.labels, suffix == "_count")
        else:
            out[name] = (name, spec.labels, True)
    return out


_CAPPED = _capped_series()


class LabelCap:
    """The first ``limit`` distinct values of each label of each metric keep their own series;
    later ones become ``OTHER``. Label values come from transcripts, streams and registries (tool
    names, models, agent types, error types...): without a cap each new one is a series for good,
    in memory, in every scrape and in the checkpointed totals. The kept values are the label values
    of the checkpointed totals (``keep`` on restore), so a restart folds the same way. Not
    thread-safe: Metrics calls it under its lock."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._kept: dict[tuple[str, int], set[str]] = {}  # (metric, label position) -> values kept
        self._admitted: set[Key] = set()  # series already checked whole: the usual case, one lookup

    def keep(self, k: Key) -> None:
        """A series that exists (restored): its values stay, whatever the limit."""
        cap = _CAPPED.get(k[0])
        if cap is not None:
            metric, labels, _ = cap
            for i in range(min(len(labels), len(k) - 1)):
                self._kept.setdefault((metric, i), set()).add(k[1 + i])
            self._admitted.add(k)

    def fold(self, incs: Iterable[tuple[Key, float]]) -> list[tuple[Key, float]]:
        """``incs`` with the values past the limit folded, and an increment of the folded counter
        for each increment folded (so it goes to the same channel: checkpointed with them)."""
        out: list[tuple[Key, float]] = []
        admitted = self._admitted
        for inc in incs:
            k = inc[0]
            if k in admitted or k[0] not in _CAPPED:
                out.append(inc)  # the usual case: the pair as given
                continue
            v = inc[1]
            metric, labels, counted = _CAPPED[k[0]]
            folded: list[str] = []
            values = list(k)
            for i, label in enumerate(labels):
                value = k[1 + i]
                kept = self._kept.setdefault((metric, i), set())
                if value == OTHER or value in kept:
                    continue
                if len(kept) < self.limit:
                    kept.add(value)
                    continue
                values[1 + i] = OTHER
                folded.append(label)
            if not folded:
                self._admitted.add(k)
                out.append((k, v))
                continue
            out.append((tuple(values), v))
            if counted:
                out.extend(((_FOLDED, metric, label), 1.0) for label in folded)
        return out


class Metrics:
    """Counter values keyed by name and label values; thread-safe.

    Channels: "pending" (from spans built but not final yet: exposed, never checkpointed),
    "delivered" (from final spans, saved with their span ids in one transaction), "read"
    (lines, parse errors, detectors, orchestrator logs: saved with the offsets, since a restart
    reads again what the offsets do not cover and counts it then) and "own" (what ccotel's own
    work met: export attempts and checkpoint writes that failed; nothing is read again for them,
    so they are saved whenever they changed, with any commit or alone). ``changes`` tells a
    commit whether a channel moved since it was last saved. The exposition adds them.
    """

    def __init__(self, gauges: Callable[[], dict[str, float]] | None = None,
                 genai: GenAIMetrics | None = None, max_label_values: int = DEFAULT_MAX_LABEL_VALUES) -> None:
        self._lock = threading.Lock()
        self.cap = LabelCap(max_label_values)
        self.genai = genai  # GenAI semantic-convention metrics over OTLP, counted with these
        # "pending": counted from spans not final yet (exposed, never checkpointed)
        self._channels: dict[str, dict[Key, float]] = {"read": {}, "delivered": {}, "own": {}, "pending": {}}
        self._changes = dict.fromkeys(self._channels, 0)  # per channel: how many times it changed
        self._pending: dict[int, list[tuple[Key, float]]] = {}  # span key -> increments held (not final)
        self._buckets = _BucketKeys()
        self._text_keys: dict[Key, str] = {}  # encode_key of each series saved (as many as the series)
        self.gauges = gauges or (lambda: {})
        self.started = time.time()

    # -- recording ---------------------------------------------------------------

    def inc(self, name: str, *labels: str, value: float = 1.0, channel: str = "read") -> None:
        spec = METRICS[name]
        assert len(labels) == len(spec.labels), (name, labels)
        with self._lock:
            _add(self._channels[channel], self.cap.fold(((_key(name, labels), value),)))
            self._changes[channel] += 1

    def inc_many(self, incs: Iterable[tuple[Key, float]], channel: str = "read") -> None:
        """Several increments at once (a histogram's observation: histogram_increments)."""
        with self._lock:
            _add(self._channels[channel], self.cap.fold(incs))

    def observe_span(self, s: SpanRecord, span_key: int | None = None) -> None:
        """Count what a span says happened, when it is built: metrics never wait for the trace
        backend. With ``span_key`` the increments are held as "pending" until ``settle`` (the span
        is final: delivered or dropped for good), and only settled ones are checkpointed: a crash
        before then re-reads the span's lines, builds it again and counts it again, once. Held
        increments are added up only when exposed (``series``): a span is counted once per
        series when it settles, not added to "pending" and taken out of it again."""
        incs = _span_increments(s, self._buckets)
        with self._lock:
            incs = self.cap.fold(incs)
            if span_key is None:
                _add(self._channels["delivered"], incs)
                self._changes["delivered"] += 1
            else:
                self._pending.setdefault(span_key, []).extend(incs)
        if self.genai is not None:
            self.genai.observe(s)  # outside our lock: the SDK has its own

    def let_go(self, span_keys: Iterable[int]) -> None:
        """These spans will be built again (traces catching up): keep their counts, forget the
        per-span records (memory stays bounded however long the backend is away)."""
        counted = []
        with self._lock:
            for span_key in span_keys:
                held = self._pending.pop(span_key, None)
                if held is not None:
                    _add(self._channels["pending"], held)
                    counted.append(span_key)
        if self.genai is not None:
            self.genai.expect_again(counted)  # built again when the traces catch up: recorded once

    def drop_pending(self) -> None:
        """Forget every count not final yet: the lines behind them are about to be read again."""
        with self._lock:
            held = list(self._pending)
            self._channels["pending"] = {}
            self._pending = {}
        if self.genai is not None:
            self.genai.expect_again(held)

    def settle(self, span_keys: Iterable[int]) -> None:
        """These spans are final: their held increments move to the checkpointed channel."""
        with self._lock:
            delivered, pending = self._channels["delivered"], self._pending
            for span_key in span_keys:
                held = pending.pop(span_key, None)
                if held is not None:
                    _add(delivered, held)
                    self._changes["delivered"] += 1

    # -- persistence -------------------------------------------------------------

    def changes(self, channel: str) -> int:
        """A number that grows whenever the channel's values change: read it before a
        ``snapshot`` and save it with the snapshot; if it is the same later, so is the channel."""
        with self._lock:
            return self._changes[channel]

    def snapshot(self, channel: str | None = None) -> dict[str, float]:
        """Values to checkpoint, keys prefixed by channel ("read:"/"delivered:"/"own:"); all if None."""
        with self._lock:
            channels = [channel] if channel else ["read", "delivered", "own"]
            return {f"{c}:{self._encoded(k)}": v for c in channels for k, v in self._channels[c].items()}

    def _encoded(self, k: Key) -> str:
        """encode_key, once per series (every live commit snapshots every series)."""
        text = self._text_keys.get(k)
        if text is None:
            text = self._text_keys[k] = encode_key(k)
        return text

    def restore(self, values: dict[str, float]) -> None:
        with self._lock:
            for k, v in values.items():
                channel, _, key = k.partition(":")
                if channel in self._channels:
                    series = decode_key(key)
                    self._channels[channel][series] = v
                    self.cap.keep(series)

    def absorb(self, values: dict[str, float]) -> None:
        """Add what other processes counted and checkpointed (catch-up workers: SqliteState.others_counters)."""
        with self._lock:
            for k, v in values.items():
                channel, _, key = k.partition(":")
                if channel in self._channels:
                    series = decode_key(key)
                    self._channels[channel][series] = self._channels[channel].get(series, 0.0) + v
                    self.cap.keep(series)

    def series(self) -> dict[Key, float]:
        """Every series, all channels added."""
        with self._lock:
            out: dict[Key, float] = {}
            for values in self._channels.values():
                for k, v in values.items():
                    out[k] = out.get(k, 0.0) + v
            for held in self._pending.values():
                _add(out, held)
            return out

    def totals(self) -> dict[str, float]:
        """Every series by its text key (encode_key)."""
        return {encode_key(k): v for k, v in self.series().items()}

    def value(self, name: str, *labels: str) -> float:
        key = _key(name, labels)
        with self._lock:
            held = sum(v for incs in self._pending.values() for k, v in incs if k == key)
            return sum(values.get(key, 0.0) for values in self._channels.values()) + held

    # -- exposition --------------------------------------------------------------

    def families(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        by_name: dict[str, list[tuple[tuple[str, ...], float]]] = {}
        for (name, *label_values), v in self.series().items():
            by_name.setdefault(name, []).append((tuple(label_values), v))
        for name, spec in METRICS.items():
            if spec.kind == "counter":
                fam = CounterMetricFamily(name, spec.help, labels=list(spec.labels))
                for labels, v in sorted(by_name.get(name, [])):
                    fam.add_metric(list(labels), v)
                if not spec.labels and not by_name.get(name):
                    fam.add_metric([], 0.0)
                yield fam
            else:
                yield self._histogram(name, spec, by_name)
        for gname, (ghelp, gvalue) in self._gauges().items():
            g = GaugeMetricFamily(gname, ghelp)
            g.add_metric([], gvalue)
            yield g
        info = GaugeMetricFamily("ccotel_build_info", "ccotel version; always 1.", labels=["version"])
        info.add_metric([__version__], 1.0)
        yield info

    def _gauges(self) -> dict[str, tuple[str, float]]:
        helps = {
            "ccotel_ingest_lag_seconds": "How long the newest unread transcript bytes have waited.",
            "ccotel_export_queue_spans": "Spans waiting for the trace backend.",
            "ccotel_files_watched": "Transcript files followed.",
            "ccotel_stalled_turns_open": "Turns stalled right now (silent past the stall timeout, reply owed).",
            "ccotel_last_export_success_timestamp_seconds": "Unix time of the last acknowledged export.",
            "ccotel_start_time_seconds": "Unix time this ccotel process started.",
            "ccotel_checkpoint_pending": "Checkpoint writes that failed and are held for retry.",
            "ccotel_registry_agents_in_progress": "Registry agents whose Status says in-progress.",
        }
        values = {"ccotel_start_time_seconds": self.started, **self.gauges()}
        return {k: (helps.get(k, k), float(v)) for k, v in values.items()}

    def _histogram(self, name: str, spec: Spec,
                   by_name: dict[str, list[tuple[tuple[str, ...], float]]]) -> HistogramMetricFamily:
        from prometheus_client.core import HistogramMetricFamily

        fam = HistogramMetricFamily(name, spec.help, labels=list(spec.labels))
        counts = {labels: v for labels, v in by_name.get(name + "_count", [])}
        sums = {labels: v for labels, v in by_name.get(name + "_sum", [])}
        buckets: dict[tuple[str, ...], dict[str, float]] = {}
        for labels, v in by_name.get(name + "_bucket", []):
            buckets.setdefault(labels[:-1], {})[labels[-1]] = v
        for labels in sorted(counts):
            b = buckets.get(labels, {})
            series = [(repr(le), b.get(repr(le), 0.0)) for le in DURATION_BUCKETS] + [("+Inf", counts[labels])]
            fam.add_metric(list(labels), series, sums.get(labels, 0.0))
        return fam


class _Collector:
    """What CollectorRegistry asks of a collector (its ``collect``; registered without describe)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        yield from self.metrics.families()


def registry_for(metrics: Metrics) -> CollectorRegistry:
    from prometheus_client.registry import CollectorRegistry

    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Collector(metrics))
    return reg


_BUCKET_LABELS = tuple(repr(le) for le in DURATION_BUCKETS)  # the "le" label of each bucket


def histogram_increments(name: str, label: str, seconds: float) -> list[tuple[Key, float]]:
    """One observation of a histogram of METRICS with one label (its buckets are DURATION_BUCKETS)."""
    out: list[tuple[Key, float]] = [((name + "_bucket", label, le), 1.0) for le in
                                    _BUCKET_LABELS[bisect.bisect_left(DURATION_BUCKETS, seconds):]]
    out.append(((name + "_sum", label), seconds))
    out.append(((name + "_count", label), 1.0))
    return out


def _add(values: dict[Key, float], incs: Iterable[tuple[Key, float]]) -> None:
    for k, v in incs:
        values[k] = values.get(k, 0.0) + v


class _BucketKeys:
    """A tool's histogram bucket increments, made once per tool (one series per tool either way)."""

    _MAX_TOOLS = 1024  # tools past this are built each time, not kept: tool names come from transcripts

    def __init__(self) -> None:
        self._by_tool: dict[str, tuple[tuple[Key, float], ...]] = {}

    def from_(self, tool: str, seconds: float) -> tuple[tuple[Key, float], ...]:
        """The increments of every bucket ``seconds`` falls in (``seconds <= le``)."""
        keys = self._by_tool.get(tool)
        if keys is None:
            keys = tuple((("ccotel_tool_duration_seconds_bucket", tool, label), 1.0) for label in _BUCKET_LABELS)
            if len(self._by_tool) < self._MAX_TOOLS:
                self._by_tool[tool] = keys
        return keys[bisect.bisect_left(DURATION_BUCKETS, seconds):]


def _span_increments(s: SpanRecord, buckets: _BucketKeys | None = None) -> list[tuple[Key, float]]:
    """(series key, increment) of everything a span says happened. Built by hand (no helper call
    per increment, bucket labels made once): a live span's counts are several increments, and this
    ran for every span built while following."""
    out: list[tuple[Key, float]] = []
    a = s.attributes
    op = a.get(GEN_AI_OPERATION_NAME)
    if op == "chat":
        model = str(a.get(GEN_AI_RESPONSE_MODEL) or "unknown")
        if s.status is StatusCode.ERROR:
            out.append((("ccotel_api_errors", str(a.get(ERROR_TYPE, "api_error"))), 1.0))
            return out
        out.append((("ccotel_api_calls", model), 1.0))
        for kind, attr in _TOKEN_ATTRS:
            if attr in a:
                out.append((("ccotel_tokens", model, kind), float(a[attr])))
        if CLAUDE_CODE_COST_USD in a:
            out.append((("ccotel_cost_usd", model), float(a[CLAUDE_CODE_COST_USD])))
        elif a.get(CLAUDE_CODE_COST_UNPRICED):
            out.append((("ccotel_unpriced_calls", model), 1.0))
    elif op == _CORRECTION:  # a later snapshot of a call counted before: the difference (spans/correction.py)
        model = str(a.get(GEN_AI_RESPONSE_MODEL) or "unknown")
        for kind, attr in _TOKEN_ATTRS:
            if a.get(attr):
                out.append((("ccotel_tokens", model, kind), float(a[attr])))
                out.append((("ccotel_corrected_tokens", model, kind), float(a[attr])))
        if CLAUDE_CODE_COST_USD in a:
            out.append((("ccotel_cost_usd", model), float(a[CLAUDE_CODE_COST_USD])))
    elif op == "execute_tool":
        tool = str(a.get(GEN_AI_TOOL_NAME, "unknown"))
        outcome = str(a.get(ERROR_TYPE, "ok")) if s.status is StatusCode.ERROR else "ok"
        out.append((("ccotel_tool_calls", tool, outcome), 1.0))
        seconds = max(s.end_ns - s.start_ns, 0) / 1e9
        out += (buckets or _BucketKeys()).from_(tool, seconds)
        out.append((("ccotel_tool_duration_seconds_sum", tool), seconds))
        out.append((("ccotel_tool_duration_seconds_count", tool), 1.0))
        if outcome == "orphaned" or a.get(CLAUDE_CODE_TOOL_REPAIRED):
            out.append((("ccotel_orphaned_tool_uses", tool), 1.0))  # once: seen live, or only from the repair
        wait = a.get(CLAUDE_CODE_TOOL_PERMISSION_WAIT_S)
        if isinstance(wait, (int, float)):
            out += histogram_increments("ccotel_permission_wait_seconds", tool, float(wait))
    elif op == "invoke_agent":
        _agent_increments(s, a, out)
    return out


def _agent_increments(s: SpanRecord, a: Mapping[str, object], out: list[tuple[Key, float]]) -> None:
    """A turn's (the session's root invoke_agent) or a subagent's counts."""

    def inc(name: str, *labels: str, value: float = 1.0) -> None:
        out.append((_key(name, labels), value))

    if s.parent_span_id is None and a.get(GEN_AI_AGENT_NAME) == "claude-code":
        outcome = str(a.get(CLAUDE_CODE_TURN_OUTCOME, "incomplete"))
        inc("ccotel_turns", outcome)
        if outcome == "interrupted":
            inc("ccotel_user_interrupts")
        if outcome == "killed":
            inc("ccotel_killed_turns")
        if a.get(CLAUDE_CODE_TURN_LOST_TOOLS):
            # resumed on a branch without a call that never got its result: memory lost
            inc("ccotel_session_resets", "orphaned_tool_use", "transcript")
        if a.get(CLAUDE_CODE_TURN_STALLED):
            fate = {"completed": "recovered", "interrupted": "recovered"}.get(outcome, outcome)
            inc("ccotel_stalled_turns", fate)
    else:
        inc("ccotel_subagents", str(a.get(GEN_AI_AGENT_NAME, "subagent")))
    _compactions(s, inc)


def _compactions(s: SpanRecord, inc: Callable[..., None]) -> None:
    for e in s.events:
        if e.name == CLAUDE_CODE_COMPACTION:
            inc("ccotel_compactions", str(e.attributes.get(CLAUDE_CODE_COMPACTION_TRIGGER, "unknown")))
