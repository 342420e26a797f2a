"""The Grafana dashboards under dashboards/: importable JSON, and every query has data from a live run.

Fast checks (nothing installed): the committed JSON equals what dashboards/generate.py writes; every
dashboard is valid, has unique panel ids, names no datasource uid (only ``${datasource}``, and the trace
links only ``${tempo}`` / ``${jaeger}``), uses only metric and label names ccotel/metrics.py defines;
the missing-transcript panel draws the alert's threshold; the trace links are Explore URLs whose label
placeholders the panel's query provides.

The e2e check: a real ccotel follows the real Claude Code CLI (the harness' scripted fake API) while a
real Prometheus scrapes it; the run is set up so that every kind of event happens (subagents, a
kill mid-tool and resume, API errors, a failing tool, auto compaction, a model nobody prices, a tool
slow enough to stall, a ghost session, a future line type and a malformed line, an orchestrator log
with a reset, an abort and a watchdog kill, a backend that rejects a batch and refuses another, a
full disk under the state dir). Then every target of every panel, with Grafana's variables filled
in as Grafana would, is sent to Prometheus as the range query Grafana sends: it must parse and
return at least one series (the exceptions are listed with their reason); the stats of events in
the time range must equal what the run did; and each trace link must find spans the backend got.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

try:
    import tests.support  # noqa: F401
except ModuleNotFoundError:  # plain `pytest` does not put the repo root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ccotel.metrics.counters import METRICS, Metrics  # noqa: E402
from tests.support import prometheus as prom  # noqa: E402
from tests.support.fixtures import missing_component  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "dashboards"
NEW_BOARDS = ("ccotel-operations.json", "ccotel-usage.json", "ccotel-health.json")
PROM_DS = {"type": "prometheus", "uid": "${datasource}"}


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ccotel_dashboards_generate", DASHBOARDS / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def boards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))}


def all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


@dataclass(frozen=True)
class Query:
    board: str
    panel: dict[str, Any]
    target: dict[str, Any]

    @property
    def where(self) -> str:
        return f"{self.board} / {self.panel['title']} / {self.target['refId']}"


def queries(only: tuple[str, ...] | None = None) -> list[Query]:
    return [Query(name, panel, target)
            for name, board in boards().items() if only is None or name in only
            for panel in all_panels(board["panels"]) for target in panel.get("targets", [])]


# ---- what ccotel/metrics.py defines -----------------------------------------------------------


def contract() -> tuple[set[str], set[str]]:
    """(series names, label names) ccotel exposes, read from ccotel/metrics.py."""
    names = {"up", "ccotel_build_info"}
    labels = {"le", "job", "instance", "version"}
    for name, spec in METRICS.items():
        if spec.kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        else:
            names.add(f"{name}_total")
        labels |= set(spec.labels)
    # the gauges: Metrics._gauges names each one with its help text
    names |= set(re.findall(r'"(ccotel_\w+)"', inspect.getsource(Metrics._gauges)))
    return names, labels


def test_contract_reader_sees_the_gauges() -> None:
    names, _ = contract()
    assert {"ccotel_ingest_lag_seconds", "ccotel_export_queue_spans", "ccotel_files_watched",
            "ccotel_stalled_turns_open", "ccotel_checkpoint_pending", "ccotel_start_time_seconds",
            "ccotel_last_export_success_timestamp_seconds", "ccotel_tokens_total",
            "ccotel_tool_duration_seconds_bucket"} <= names


# ---- fast checks ---------------------------------------------------------------------------------


def test_committed_json_is_what_generate_writes() -> None:
    gen = generator()
    built = gen.build()
    assert sorted(built) == sorted(NEW_BOARDS)
    for name, board in built.items():
        assert (DASHBOARDS / name).read_text() == gen.render(board), \
            f"{name} is out of date: run python dashboards/generate.py"


def _datasource_refs(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "datasource":
                yield f"{path}.{k}", v
            yield from _datasource_refs(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _datasource_refs(v, f"{path}[{i}]")


def test_dashboards_are_importable_and_name_no_datasource_uid() -> None:
    gen = generator()
    uids = set()
    for name, board in boards().items():
        assert board["title"] and board["uid"] not in uids, name
        uids.add(board["uid"])
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
        if name in NEW_BOARDS:
            assert board["schemaVersion"] == gen.SCHEMA_VERSION
            assert variables["tempo"]["type"] == "datasource" and variables["tempo"]["query"] == "tempo"
            assert variables["jaeger"]["type"] == "datasource" and variables["jaeger"]["query"] == "jaeger"
            assert variables["service"]["query"] == "ccotel"
        else:
            assert board["schemaVersion"] >= 36
        assert variables["instance"]["datasource"] == PROM_DS
        panels = list(all_panels(board["panels"]))
        ids = [p["id"] for p in panels]
        assert len(ids) == len(set(ids)), f"{name}: panel ids must be unique"
        for panel in panels:
            grid = panel["gridPos"]
            assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, (name, panel["title"])
            if panel["type"] == "row":
                continue
            assert panel["type"] in ("timeseries", "stat", "table"), (name, panel["title"])
            assert panel["datasource"] == PROM_DS and panel["targets"], (name, panel["title"])
            assert panel.get("description"), (name, panel["title"])
            refs = [t["refId"] for t in panel["targets"]]
            assert len(refs) == len(set(refs)), (name, panel["title"])
            assert all(t["datasource"] == PROM_DS and t["expr"].strip() for t in panel["targets"])
        for where, ref in _datasource_refs(board):
            uid = ref.get("uid") if isinstance(ref, dict) else ref
            assert uid in ("${datasource}", "-- Grafana --"), f"{name}{where}: hard-coded datasource {ref!r}"
        # the trace links name their data source by variable too
        for url in _link_urls(board):
            for pane in _panes(url).values():
                assert pane["datasource"] in ("${tempo}", "${jaeger}"), url
                for q in pane["queries"]:
                    assert q["datasource"]["uid"] == pane["datasource"], url


def test_queries_use_only_metrics_and_labels_ccotel_defines() -> None:
    names, labels = contract()
    used: set[str] = set()
    for q in queries():
        found = prom.promql_metric_names(q.target["expr"])
        assert found, f"{q.where}: no metric in {q.target['expr']!r}"
        assert found <= names, f"{q.where}: not defined in ccotel/metrics.py: {found - names}"
        assert prom.promql_label_names(q.target["expr"]) <= labels, q.where
        if q.board in NEW_BOARDS:
            used |= found
    # the three dashboards together show every metric the sidecar (`ccotel run`) serves; `ccotel relay`'s
    # counters (ccotel_relay_*) come from a process of its own per `claude -p` run, not from the sidecar
    shown = {re.sub(r"_(bucket|sum|count)$", "", n) for n in used}
    defined = {re.sub(r"_(bucket|sum|count)$", "", n) for n in names if not n.startswith("ccotel_relay_")}
    assert defined - shown == set()


def test_missing_transcript_panel_draws_the_alert_threshold() -> None:
    alerts = (DASHBOARDS / "ccotel-alerts.yml").read_text()
    rule = alerts.split("- alert: CcotelMissingTranscriptResets", 1)[1].split("- alert:", 1)[0]
    threshold = float(re.search(r"\* 3600 > ([0-9.]+)", rule).group(1))  # type: ignore[union-attr]
    board = boards()["ccotel-operations.json"]
    (panel,) = [p for p in all_panels(board["panels"]) if p["title"].startswith("Missing-transcript resets per")]
    defaults = panel["fieldConfig"]["defaults"]
    assert defaults["custom"]["thresholdsStyle"]["mode"] == "line"
    assert {"color": "red", "value": threshold} in defaults["thresholds"]["steps"]
    expr = panel["targets"][0]["expr"]
    # the same quantity as the alert: the 15m rate of both spellings, per hour, by instance and source
    assert "[15m]" in expr and "* 3600" in expr and 'reason=~"missing[_-]transcript"' in expr
    assert "sum by (instance, source)" in expr and "sum by (instance, source)" in rule


# ---- trace links -------------------------------------------------------------------------------------


def _link_urls(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        url = node.get("url")
        if isinstance(url, str) and url.startswith("/explore"):
            yield url
        for v in node.values():
            yield from _link_urls(v)
    elif isinstance(node, list):
        for v in node:
            yield from _link_urls(v)


def _panes(url: str, values: dict[str, str] | None = None) -> dict[str, Any]:
    """The Explore panes of a link, with ``${...}`` placeholders filled in from ``values`` (percent-encoded,
    as Grafana does for data links) or left as they are."""
    if values is not None:
        url = re.sub(r"\$\{([^}]+)\}", lambda m: urllib.parse.quote(values.get(m.group(1), m.group(0)), safe=""),
                     url)
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    assert query["schemaVersion"] == ["1"], url
    return dict(json.loads(query["panes"][0]))


_TRACEQL_COND = re.compile(r'span\.([\w.]+) = ("(?:[^"\\]|\\.)*"|true|false|-?\d+)|status = error')


@dataclass(frozen=True)
class SpanFilter:
    """A TraceQL filter of a trace link, as conditions on a span."""

    attrs: tuple[tuple[str, Any], ...]
    error: bool

    @staticmethod
    def parse(traceql: str) -> SpanFilter:
        body = re.fullmatch(r'\{ resource\.service\.name = "([^"]*)"((?: && [^|]+)?) \} '
                            r'\| select\(span\.session\.id\)', traceql)
        assert body, traceql
        attrs, error = [], False
        for cond in body.group(2).split(" && ")[1:]:
            m = _TRACEQL_COND.fullmatch(cond)
            assert m, (traceql, cond)
            if m.group(0) == "status = error":
                error = True
            else:
                attrs.append((m.group(1), json.loads(m.group(2))))
        return SpanFilter(tuple(attrs), error)

    def matches(self, span: dict[str, Any]) -> bool:
        if self.error and span["status"] != 2:  # STATUS_CODE_ERROR
            return False
        return all(span["attributes"].get(k) == v for k, v in self.attrs)


def test_trace_links_are_explore_urls_the_panel_can_fill() -> None:
    for name in NEW_BOARDS:
        board = boards()[name]
        top = list(_link_urls(board["links"]))
        assert len(top) == 2  # Tempo and Jaeger, all ccotel traces
        tempo = _panes(top[0])["traces"]["queries"][0]
        assert tempo["queryType"] == "traceql"
        assert tempo["query"] == '{ resource.service.name = "${service}" } | select(span.session.id)'
        jaeger = _panes(top[1])["traces"]["queries"][0]
        assert jaeger["queryType"] == "search" and jaeger["service"] == "${service}"
        for panel in all_panels(board["panels"]):
            links = panel.get("fieldConfig", {}).get("defaults", {}).get("links", [])
            grouped = set().union(*(prom.promql_label_names(t["expr"]) for t in panel.get("targets", [])))
            for link in links:
                assert link["title"].split(":")[0] in ("Tempo", "Jaeger") and link["targetBlank"]
                for label in re.findall(r"\$\{__field\.labels\.(\w+)\}", link["url"]):
                    assert label in grouped, (name, panel["title"], label)
                pane = _panes(link["url"])["traces"]
                assert pane["range"] == {"from": "${__from}", "to": "${__to}"}
                q = pane["queries"][0]
                if q["queryType"] == "traceql":
                    SpanFilter.parse(q["query"])  # a filter the e2e test can evaluate
                else:
                    assert q["service"] == "${service}"
                    assert all(re.fullmatch(r"[\w.]+=\S+", t) for t in q.get("tags", "").split()), q


# ---- Grafana's variables ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TimeRange:
    """What Grafana computes for a panel: the dashboard range and the intervals derived from it."""

    start: float
    end: float
    scrape_interval_s: float = 1.0  # the Prometheus data source's "Scrape interval" setting
    max_data_points: int = 1000  # about a panel's width in pixels

    @property
    def interval_s(self) -> int:
        # $__interval: the range over the data points, never below the scrape interval (whole seconds here)
        return max(math.ceil(self.scrape_interval_s), math.ceil((self.end - self.start) / self.max_data_points))

    @property
    def rate_interval_s(self) -> int:
        # $__rate_interval = max($__interval + scrape interval, 4 * scrape interval)
        return max(self.interval_s + math.ceil(self.scrape_interval_s), math.ceil(4 * self.scrape_interval_s))

    @property
    def range_s(self) -> int:
        return round(self.end - self.start)


def regex_escape(value: str) -> str:
    """How Grafana's Prometheus data source writes a multi-value variable's value into a regex matcher."""
    return re.sub(r"([\\^$*+?.()|\[\]{}])", r"\\\\\1", value)


def interpolate(expr: str, tr: TimeRange, variables: dict[str, str]) -> str:
    builtins = {"__rate_interval": f"{tr.rate_interval_s}s", "__interval": f"{tr.interval_s}s",
                "__range": f"{tr.range_s}s", "__range_s": str(tr.range_s)}
    values = {**builtins, **variables}

    def fill(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        assert name in values, f"unknown variable ${name} in {expr!r}"
        return values[name]

    out = re.sub(r"\$\{(\w+)\}|\$(\w+)", fill, expr)
    assert "$" not in out, out
    return out


def test_interpolate_like_grafana() -> None:
    tr = TimeRange(1000.0, 1120.0)
    assert (tr.interval_s, tr.rate_interval_s, tr.range_s) == (1, 4, 120)
    wide = TimeRange(0.0, 86400.0, scrape_interval_s=15)
    assert (wide.interval_s, wide.rate_interval_s) == (87, 102)
    expr = 'sum(rate(x{instance=~"$instance"}[$__rate_interval])) + increase(x[${__range}]) offset $__range'
    assert interpolate(expr, tr, {"instance": regex_escape("127.0.0.1:9477")}) == \
        'sum(rate(x{instance=~"127\\\\.0\\\\.0\\\\.1:9477"}[4s])) + increase(x[120s]) offset 120s'
    with pytest.raises(AssertionError, match="unknown variable"):
        interpolate("x[$nope]", tr, {})


# ---- e2e: a live run -------------------------------------------------------------------------------

#: Targets that can honestly return no series in the run below: (board, panel title, refId) -> reason.
NO_DATA: dict[tuple[str, str, str], str] = {
    ("ccotel-health.json", "Label values folded into other (last hour)", "A"):
        "the run has fewer distinct tools, models and agent types than --max-label-values keeps: nothing folds "
        "(tests/metrics/test_label_cap.py drives 3,000 names through the pipeline and reads the series)",
    ("ccotel-usage.json", "Tokens corrected by a later snapshot (last hour)", "A"):
        "the real CLI writes each call's final usage where ccotel reads it first (tests/run/test_usage_correction.py "
        "feeds a later, larger copy live and reads the counter)",
    ("ccotel-usage.json", "Calls without their envelope (last hour)", "A"):
        "Claude Code writes every envelope field (tests/rules/test_peer_cases.py reads lines without them)",
    **{("ccotel-usage.json", title, ref): "no hooks in this run: tests/e2e/test_live_hooks.py drives them with the "
       "real CLI and reads these metrics" for title, ref in (
        ("Sessions ended by reason (last hour)", "A"), ("Permission wait percentiles", "A"),
        ("Permission wait percentiles", "B"), ("Hook events by event and kind (last hour)", "A"))},
}
#: Trace links that honestly find no span of the run: (board, panel title, link title) -> reason.
LINKS_WITHOUT_SPANS: dict[tuple[str, str, str], str] = {
    ("ccotel-health.json", "Format drift (last hour)", "Tempo: spans of this Claude Code version"):
        "the drift is a line of a future version the test writes; no conversation of that version exists",
    ("ccotel-operations.json", "User interrupts (per minute)", "Tempo: interrupted turns"):
        "the run interrupts no turn (s11 would add 15 s; tests/e2e/test_live_cli.py covers interrupts)",
}
#: Trace links that may or may not find a span, by a race of the run: (board, panel, link) -> reason.
_KILL_RACE = ("s06's SIGKILLed turn is exported 'killed' when ccotel sees the dead pid before the resume, "
              "else 'orphaned'; and its Bash call 'orphaned' first or only 'repaired on resume'")
LINKS_MAYBE_WITHOUT_SPANS: dict[tuple[str, str, str], str] = {
    ("ccotel-operations.json", "Orphaned tool calls by tool (last hour)", "Tempo: this tool's orphaned calls"):
        _KILL_RACE,
    ("ccotel-operations.json", "Orphaned tool calls by tool (last hour)",
     "Tempo: this tool's calls repaired on resume"): _KILL_RACE,
    ("ccotel-operations.json", "Killed turns (last hour)", "Tempo: killed turns"): _KILL_RACE,
    ("ccotel-operations.json", "Killed turns", "Tempo: killed turns"): _KILL_RACE,
}

LOG_LINES = [
    "[agent/cli-backend] cli session reset: provider=claude-cli reason=missing-transcript",
    "claude live session close: provider=claude-cli model=claude-opus reason=abort",
    "decision=candidate_failed reason=timeout detail=CLI produced no output for 180s and was terminated.",
]
FUTURE_VERSION = "2.9.0-dashboard-test"
UNPRICED_MODEL = "glm-4.7"
STALL_TIMEOUT_S = 4
SLOW_TOOL_S = 9


def _start_ccotel(root: Path, state: Path, endpoint: str, port: int, log: Path,
                  registry: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = endpoint
    return subprocess.Popen(
        [sys.executable, "-m", "ccotel", "run", "--root", str(root), "--state-dir", str(state),
         "--metrics-addr", f"127.0.0.1:{port}", "--orchestrator-log", f"{log}=openclaw",
         "--registry", str(registry), "--registry-kill-grace", "1",
         "--stall-timeout", str(STALL_TIMEOUT_S), "--no-status"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _registry_agents(registry: Path) -> None:
    """An orchestrator's registry, written live as one does (tests/sources/test_registry.py): an agent that
    finishes, one whose process is killed while its Status still says in-progress, and the pid file
    caught half-written once."""
    from tests.sources.test_registry import entry, md_text, write_md, write_pids

    now = time.time_ns()
    done = subprocess.Popen(["true"])
    done.wait(timeout=10)
    victim = subprocess.Popen(["sleep", "300"])
    pids = {"d-done": entry(done.pid, agent_type="reviewer"), "d-killed": entry(victim.pid, agent_type="worker")}
    (registry / ".active-pids.json").write_bytes(b'{"d-done": {"pid": ')  # mid-write: counted, read again
    time.sleep(1.0)
    write_pids(registry, pids)
    write_md(registry, "d-done", md_text("done", now - 2 * 10**9, now))
    write_md(registry, "d-killed", md_text("in-progress", now))
    time.sleep(1.0)
    victim.kill()
    victim.wait(timeout=10)


@contextlib.contextmanager
def _small_tmpfs(path: Path, size: str) -> Iterator[bool]:
    """A tmpfs at ``path`` (True), or a plain directory where mounting is not allowed (False)."""
    path.mkdir(parents=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
                          capture_output=True, text=True, check=False) if shutil.which("mount") else None
    try:
        yield done is not None and done.returncode == 0
    finally:
        if done is not None and done.returncode == 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def _fill(path: Path) -> None:
    with contextlib.suppress(OSError), open(path, "wb", buffering=0) as f:
        while True:
            f.write(b"\1" * 65536)


class _Receiver:
    """The answering OTLP/HTTP receiver: 400 for the first request (the history, at ccotel's start), 503
    for the second, 400 for the first one after ``reject_next()``, else 200; the delivered spans are
    read with their attributes."""

    def __init__(self) -> None:
        from tests.support.otlp import HttpAnswer, OtlpReceiver, status_body

        self._reject = False

        def decide(r: Any) -> Any:
            if r.n == 1 or (self._reject and r.n > 2):
                self._reject = False
                return HttpAnswer(400, status_body(3, "scripted bad request"))
            if r.n == 2:
                return HttpAnswer(503)
            return None

        self.http = OtlpReceiver(decide)

    def reject_next(self) -> None:
        self._reject = True

    def delivered_spans(self) -> list[dict[str, Any]]:
        return self.http.spans


def _custom_runs(version: str) -> list[tuple[str, list[Any], str]]:
    """Runs no harness scenario makes: (tag, rules, prompt)."""
    from tests.harness.fakeapi import Message, Rule, text
    from tests.harness.scenarios import bash, long_command, usage_for

    return [
        # a backend whose model no price table knows (Claude Code pointed at another provider)
        ("d90", [Rule("d90.other", Message([text("Answered by a self-hosted model.")], usage_for(90, 0),
                                           model=UNPRICED_MODEL), first_user="D90 ")],
         "D90 answer from a model nobody prices"),
        # a tool that runs past --stall-timeout while its process lives: a stalled turn that recovers
        ("d91", [Rule("d91.slow", Message([text("Waiting."), bash(long_command(version, SLOW_TOOL_S),
                                                                  "Wait a while")], usage_for(91, 0)),
                      first_user="D91 ", turns=0),
                 Rule("d91.final", Message([text("Done waiting.")], usage_for(91, 1)), first_user="D91 ", turns=1)],
         "D91 run a slow command with Bash"),
    ]


def _write_ghost_and_drift(projects: Path) -> None:
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    ghost = projects / "-tmp-ghost" / "0badc0de-1111-4222-8333-555555555555.jsonl"
    ghost.parent.mkdir(parents=True)
    ghost.write_text(json.dumps({"type": "user", "uuid": "g1", "parentUuid": None, "sessionId": ghost.stem,
                                 "timestamp": now, "message": {"role": "user", "content": "hello?"}}) + "\n")
    drift = projects / "-tmp-future" / "0badc0de-1111-4222-8333-666666666666.jsonl"
    drift.parent.mkdir(parents=True)
    drift.write_text(json.dumps({"type": "dashboard-test-future-line", "uuid": "f1", "version": FUTURE_VERSION,
                                 "sessionId": drift.stem, "timestamp": now}) + "\n"
                     + '{"type": "user", "uuid": "f2", broken json\n')


def _sum(p: prom.PrometheusServer, expr: str) -> float:
    res = p.query(f"sum({expr})")
    return res[0][1] if res else 0.0


def _wait_sum(p: prom.PrometheusServer, expr: str, pred: Any, timeout: float = 45) -> None:
    p.wait_for(f"sum({expr})", lambda r: bool(r) and pred(r[0][1]), timeout=timeout)


@pytest.fixture(scope="module")
def claude_cli() -> Path:
    """The newest Claude Code of the matrix, installed into tests/.node (as tests/e2e/conftest.py does)."""
    from tests.harness.install import CLAUDE_CODE_VERSION, install

    try:
        return install(version=CLAUDE_CODE_VERSION, quiet=True)
    except RuntimeError as exc:  # npm missing or the install failed: a real failure, say why
        pytest.fail(f"cannot install the Claude Code CLI for e2e tests: {exc}")


@pytest.mark.e2e
def test_every_dashboard_query_has_data_from_a_live_run(claude_cli: Path, tmp_path: Path) -> None:
    if prom.missing_reason():
        missing_component(prom.missing_reason() or "")
    from tests.harness.fakeapi import FakeAPI
    from tests.harness.fixtures import load_fixture
    from tests.harness.install import CLAUDE_CODE_VERSION
    from tests.harness.runner import Sandbox
    from tests.harness.scenarios import SCENARIOS, Context, api_tag

    version = CLAUDE_CODE_VERSION
    no_data, expected_stats = dict(NO_DATA), dict(EXPECTED_STATS)
    sandbox = Sandbox.create(base=tmp_path, version=version)
    projects = sandbox.config_dir / "projects"
    # history present before ccotel starts: exported (the first batch, which the backend rejects), not counted
    history = load_fixture("s02_resume_two_turns", version=version)
    shutil.copytree(history.config_dir / "projects", projects, dirs_exist_ok=True)
    log = tmp_path / "gateway.log"
    log.write_text("old line: cli session reset: provider=claude-cli reason=missing-transcript\n")
    port = prom.free_port()
    receiver = _Receiver()
    with _small_tmpfs(tmp_path / "statefs", "8m") as on_tmpfs, receiver.http, \
            prom.PrometheusServer(targets=[("127.0.0.1", port)], scrape_interval="1s") as p:
        state = tmp_path / "statefs" / "ccotel"
        registry = tmp_path / "registry"
        (registry / "agent-responses").mkdir(parents=True)
        (registry / ".active-pids.json").write_text("{}")
        ccotel = _start_ccotel(sandbox.config_dir, state, receiver.http.endpoint, port, log, registry)
        try:
            p.wait_for('up{job="ccotel"}', lambda r: bool(r) and r[0][1] == 1, timeout=60)
            first_up = p.query('timestamp(up{job="ccotel"})')[0][1]
            receiver.http.wait_for(1, timeout_s=30)  # the history went out, rejected and retried ones answered

            def scenario(name: str) -> None:
                s = SCENARIOS[name]
                if not s.runs_on(version):
                    return
                with FakeAPI(api_tag(s, version), s.rules(version=version), tmp_path / f"{name}.gt.jsonl") as api:
                    s.drive(Context(api=api, sandbox=sandbox))

            for name in ("s03_parallel_subagents", "s06_kill_orphan_resume", "s07_api_errors", "s12_auto_compact"):
                scenario(name)
            for tag, rules, prompt in _custom_runs(version):
                with FakeAPI(tag, rules, tmp_path / f"{tag}.gt.jsonl") as api:
                    Context(api=api, sandbox=sandbox).run(tag, prompt, allowed_tools="Bash", timeout=90)
            # a full disk under the state dir while s08 runs: checkpoint errors, held and retried
            if on_tmpfs:
                ballast = tmp_path / "statefs" / "ballast"
                _fill(ballast)
                scenario("s08_failing_tool")
                # the usage ledger's write fails first, and the checkpoints wait for its rows (nothing
                # passed in the state before the ledger holds it): counted as reason "ledger"
                _wait_sum(p, 'ccotel_checkpoint_errors_total{reason=~"disk_full|ledger"}', lambda v: v > 0)
                ballast.unlink()
                _wait_sum(p, "ccotel_checkpoint_pending", lambda v: v == 0)
            else:
                scenario("s08_failing_tool")
                why = "no tmpfs could be mounted (not root) to fill the state dir's disk"
                no_data[("ccotel-health.json", "Checkpoint errors by reason (last hour)", "A")] = why
                no_data[("ccotel-health.json", "Checkpoint errors", "A")] = why
                del expected_stats[("ccotel-health.json", "Checkpoint errors")]
            _write_ghost_and_drift(projects)
            _registry_agents(registry)
            with open(log, "a") as f:
                f.write("\n".join(LOG_LINES) + "\n")

            # everything the run did is in Prometheus
            for expr, want in [
                ('ccotel_session_resets_total{reason="missing_transcript"}', 2),
                ("ccotel_watchdog_kills_total", 1), ("ccotel_aborts_total", 1),
                ("ccotel_orphaned_tool_uses_total", 1), (f'ccotel_unpriced_calls_total{{model="{UNPRICED_MODEL}"}}', 1),
                ("ccotel_parse_errors_total", 1),
                (f'ccotel_format_unknown_total{{version="{FUTURE_VERSION}"}}', 1),
                ("ccotel_registry_killed_agents_total", 1), ("ccotel_registry_agents_total", 2),
            ]:
                _wait_sum(p, expr, lambda v, w=want: v == w)
            for expr in ('ccotel_stalled_turns_total{outcome="recovered"}', "ccotel_spans_dropped_total",
                         "ccotel_export_failures_total", "ccotel_api_errors_total", "ccotel_compactions_total",
                         "ccotel_reported_cost_usd_total", "ccotel_subagents_total",
                         # the pid file caught half-written: how many reads saw it so depends on timing
                         "ccotel_registry_bad_input_total"):
                _wait_sum(p, expr, lambda v: v > 0)
            # every turn closed (its file silent past the stall timeout) and sent: then the backend rejects
            # the batch of one more run (s01), whose spans are dropped for good
            time.sleep(STALL_TIMEOUT_S + 2)
            _wait_sum(p, "ccotel_export_queue_spans", lambda v: v == 0)
            before_drop = _sum(p, 'ccotel_spans_dropped_total{reason="bad_request"}')
            receiver.reject_next()
            scenario("s01_bash_tool")
            _wait_sum(p, 'ccotel_spans_dropped_total{reason="bad_request"}', lambda v: v > before_drop)
            time.sleep(3)  # a few more scrapes after the last event
            tr = TimeRange(first_up + 2, time.time())
            spans = receiver.delivered_spans()
            _check_every_query(p, tr, {"instance": regex_escape(f"127.0.0.1:{port}")}, spans, no_data,
                               expected_stats)
        finally:
            ccotel.send_signal(signal.SIGTERM)
            try:
                _, err = ccotel.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                ccotel.kill()
                raise
        assert "Traceback" not in err, err


#: Stats of events in the time range and what the run above did (None: at least one).
EXPECTED_STATS: dict[tuple[str, str], float | None] = {
    ("ccotel-operations.json", "Missing-transcript resets"): 2,  # the ghost session + the orchestrator's line
    ("ccotel-operations.json", "Orphaned tool calls"): 1,  # s06's Bash killed mid-tool
    ("ccotel-operations.json", "Watchdog kills"): 1,
    ("ccotel-operations.json", "Aborts"): 1,
    ("ccotel-usage.json", "Unpriced calls"): 1,
    ("ccotel-usage.json", "API errors"): None,
    ("ccotel-usage.json", "API calls"): None,
    ("ccotel-usage.json", "Tokens"): None,
    ("ccotel-usage.json", "Estimated cost"): None,
    ("ccotel-usage.json", "Claude Code's cost"): None,
    ("ccotel-health.json", "Parse errors"): 1,
    ("ccotel-health.json", "Format drift"): 1,
    ("ccotel-health.json", "Spans dropped"): None,  # s01's batch the backend rejected
    ("ccotel-health.json", "Checkpoint errors"): None,  # the full disk under the state dir
}


def _check_every_query(p: prom.PrometheusServer, tr: TimeRange, variables: dict[str, str],
                       spans: list[dict[str, Any]], no_data: dict[tuple[str, str, str], str],
                       expected_stats: dict[tuple[str, str], float | None]) -> None:
    problems, checked, stats = [], 0, 0
    for q in queries():
        expr = interpolate(q.target["expr"], tr, variables)
        key = (q.board, q.panel["title"], q.target["refId"])
        if q.target.get("instant"):
            series = [(labels, [(tr.end, v)]) for labels, v in p.query(expr, at=tr.end)]
        else:
            series = p.query_range(expr, tr.start, tr.end, step=tr.interval_s)  # raises unless status success
        checked += 1
        if not series:
            if key not in no_data:
                problems.append(f"{q.where}: no series for {expr}")
            continue
        if key in no_data:
            problems.append(f"{q.where}: listed in NO_DATA ({no_data[key]}) but has data: update the list")
        want_stat = (q.board, q.panel["title"])
        if q.panel["type"] == "stat" and want_stat in expected_stats:
            stats += 1
            last = series[0][1][-1][1]
            want = expected_stats[want_stat]
            if (want is None and not last > 0) or (want is not None and round(last) != want):
                problems.append(f"{q.where}: last value {last}, want {'> 0' if want is None else want}")
        if q.board in NEW_BOARDS:
            problems += _check_links(q, series, spans)
    if any("finds no span" in x for x in problems):
        turns = [s["attributes"] for s in spans if s["attributes"].get("gen_ai.agent.name") == "claude-code"]
        problems.append("delivered turn spans: " + "; ".join(
            f"{a.get('claude_code.turn.outcome')} calls={a.get('claude_code.turn.api_calls')} "
            f"stalled={a.get('claude_code.turn.stalled')}" for a in turns))
    assert not problems, "\n".join(problems)
    assert stats == len(expected_stats) and checked >= 80, (stats, checked)


def _check_links(q: Query, series: list[prom.RangeSeries], spans: list[dict[str, Any]]) -> list[str]:
    """Each Tempo link of the panel finds a delivered span for at least one series of this target."""
    problems = []
    maybe_found = []
    for link in q.panel["fieldConfig"]["defaults"].get("links", []):
        if not link["title"].startswith("Tempo:") or q.target["refId"] != "A":
            continue
        key = (q.board, q.panel["title"], link["title"])
        found = False
        for labels, _values in series:
            values = {"service": "ccotel", **{f"__field.labels.{k}": v for k, v in labels.items()}}
            traceql = _panes(link["url"], values)["traces"]["queries"][0]["query"]
            f = SpanFilter.parse(traceql)
            if any(f.matches(s) for s in spans):
                found = True
                break
        if key in LINKS_MAYBE_WITHOUT_SPANS:
            maybe_found.append(found)
            continue
        if found and key in LINKS_WITHOUT_SPANS:
            problems.append(f"{q.where}: {link['title']} finds spans but is listed in LINKS_WITHOUT_SPANS")
        elif not found and key not in LINKS_WITHOUT_SPANS:
            problems.append(f"{q.where}: {link['title']} finds no span ({len(spans)} delivered)")
    if maybe_found and not any(maybe_found) and q.panel["title"].startswith("Orphaned tool calls by tool"):
        problems.append(f"{q.where}: neither orphan link finds the killed Bash call")
    return problems
