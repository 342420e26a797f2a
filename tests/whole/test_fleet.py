"""Two hosts, one PostgreSQL state, one trace backend: a session moves from host A to host B.

Each host is a real ``ccotel run`` process with its own root (a Claude config dir) and host id,
sharing a throwaway PostgreSQL cluster (tests/support/postgres.py) and a loopback OTLP receiver.
Real CLI transcripts (tests/fixtures) are written line by line: the first part on A, then A's
file is copied to B (the sync) and the rest of the session is appended on B. The same with both
hosts reading one shared root at once, and with a host SIGKILLed mid-way and restarted.

Ground truth: the same writes followed by one ccotel on one host with a SQLite state (the
single-machine behaviour that is unchanged), and the span ids a clean in-process pass over the
final files builds. Asserted: every span delivered once (0 duplicate receipts), no chat span
twice, the counters (tokens, turns, resets, orphans, API and tool calls) summed over the hosts
equal to the single host's, and the report from the shared ledger on either host equal to the
single host's report.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

from ccotel.commands.report.json_doc import as_json
from ccotel.commands.report.rows import Query
from ccotel.commands.report.summary import summarize
from ccotel.commands.report.transcripts import gather
from ccotel.run.pipeline import Options, Pipeline
from ccotel.store.ledger import Ledger
from ccotel.store.postgres import PgState
from ccotel.store.postgres_ledger import open_report_ledger
from ccotel.store.sqlite import SqliteState as State
from tests.harness.fixtures import load_fixture
from tests.support.otlp import OtlpReceiver, refuse
from tests.support.postgres import PostgresServer, running_server

SCENARIOS = ("s02_resume_two_turns", "s06_kill_orphan_resume")
# What the fleet must count exactly as one host does (per-host health counters are each host's own).
COUNTED = ("ccotel_tokens", "ccotel_turns", "ccotel_session_resets", "ccotel_orphaned_tool_uses", "ccotel_api_calls",
           "ccotel_tool_calls", "ccotel_api_errors", "ccotel_killed_turns", "ccotel_subagents")


pg = pytest.fixture(scope="module", name="pg")(running_server)


# -- the session, split at a turn boundary ---------------------------------------------------


def _is_prompt(line: bytes) -> bool:
    d = json.loads(line)
    if d.get("type") != "user" or d.get("isMeta") or d.get("isSidechain") or "toolUseResult" in d:
        return False
    content = (d.get("message") or {}).get("content")
    return isinstance(content, str) or (isinstance(content, list) and not any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content))


def session(name: str) -> tuple[str, list[bytes], int]:
    """(path under the root, lines, index of the last prompt: where the session moves)."""
    root = load_fixture(name).config_dir
    files = sorted((root / "projects").rglob("*.jsonl"))
    assert len(files) == 1, files  # one main file: the scenarios chosen have no subagent files
    lines = files[0].read_bytes().splitlines(keepends=True)
    prompts = [i for i, line in enumerate(lines) if _is_prompt(line)]
    assert len(prompts) >= 2, name
    return str(files[0].relative_to(root)), lines, prompts[-1]


def write_lines(path: Path, lines: list[bytes], pause_s: float = 0.01) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    for line in lines:
        with open(path, "ab") as f:
            f.write(line)
        time.sleep(pause_s)


# -- hosts -----------------------------------------------------------------------------------


def start(root: Path, state: str, endpoint: str, host: str | None = None, *extra: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PG", "CCOTEL_"))}
    env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = endpoint
    host_args = ["--host-id", host] if host else []
    root.joinpath("projects").mkdir(parents=True, exist_ok=True)
    # stderr to a file, not a pipe nobody reads while it runs: with -v a pipe fills up (64 KB) and the
    # host blocks on its next log line (seen as spans never sent, on a busy machine)
    err = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ccotel", "run", "--root", str(root), "--state", state, *host_args,
         "--metrics-addr", "none", "--no-status", "--stall-timeout", "3600", "--workers", "1", "-v", *extra],
        env=env, stdout=subprocess.DEVNULL, stderr=err, text=True)
    _stderr[proc.pid] = err
    return proc


_stderr: dict[int, Any] = {}  # a host's stderr file, by pid


def stderr_of(proc: subprocess.Popen[str]) -> str:
    f = _stderr[proc.pid]
    f.seek(0)
    return str(f.read())


def caught_up(proc: subprocess.Popen[str], seconds: float = 30.0) -> None:
    """Until the host's first (empty) catch-up is done and it follows live (it counts from then on)."""
    time.sleep(2.5)  # an empty root: caught up within a second; the mark is committed with the next checkpoint
    assert proc.poll() is None, stderr_of(proc)


Host = subprocess.Popen[str]


def two_hosts(root_a: Path, root_b: Path, url: str, endpoint: str) -> tuple[Host, Host]:
    """Hosts A and B on one PostgreSQL state and one trace backend, both caught up (counting)."""
    a, b = start(root_a, url, endpoint, "A"), start(root_b, url, endpoint, "B")
    caught_up(a)
    caught_up(b)
    return a, b


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    err = stderr_of(proc)
    assert proc.returncode == 0, err
    return err


def kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


def wait_for(rx: OtlpReceiver, expected: set[str], seconds: float = 120.0) -> None:
    """Until every expected span arrived (at once when they do; a loaded machine can make an export
    back off for half a minute), then a little longer for any sent twice."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not expected <= {s["span_id"] for s in rx.spans}:
        time.sleep(0.2)
    time.sleep(1.5)  # anything sent twice would arrive now


def expected_span_ids(root: Path) -> set[str]:
    spans: list[Any] = []
    Pipeline(Options(roots=(str(root),)), emit=spans.extend).backfill(close_all=True)
    return {f"{s.span_id:016x}" for s in spans}


def counted(totals: dict[str, float]) -> dict[str, float]:
    """The counted series, channels added (read/delivered)."""
    out: dict[str, float] = {}
    for k, v in totals.items():
        key = k.partition(":")[2]
        if key.split("\x1f")[0] in COUNTED and v:
            out[key] = out.get(key, 0.0) + v
    return out


def fleet_counters(url: str, hosts: tuple[str, ...]) -> dict[str, float]:
    out: dict[str, float] = {}
    for host in hosts:
        st = PgState(url, host)
        for k, v in counted(st.counters()).items():
            out[k] = out.get(k, 0.0) + v
        st.close()
    return out


def session_report(options: Options, ledger: Ledger | None) -> list[dict[str, Any]]:
    assert ledger is not None
    try:
        data = gather(options, ledger, workers=1)
    finally:
        ledger.close()
    rows = as_json(summarize(data, Query(view="session")))
    return sorted(rows["sessions"], key=lambda r: r["sessionId"])


# -- the reference: one host, SQLite ------------------------------------------------------------

_truth: dict[str, tuple[dict[str, float], list[dict[str, Any]], set[str]]] = {}


def truth(name: str, tmp: Path) -> tuple[dict[str, float], list[dict[str, Any]], set[str]]:
    """Counters, session report and span ids of one ccotel on one host (SQLite) over the same writes."""
    if name not in _truth:
        rel, lines, cut = session(name)
        root, state = tmp / f"truth-{name}" / "claude", tmp / f"truth-{name}" / "state"
        with OtlpReceiver() as rx:
            proc = start(root, str(state), rx.endpoint)
            caught_up(proc)
            write_lines(root / rel, lines[:cut])
            time.sleep(2.0)
            write_lines(root / rel, lines[cut:])
            expected = expected_span_ids(root)
            wait_for(rx, expected)
            stop(proc)
            received = Counter(s["span_id"] for s in rx.spans)
        assert set(received) == expected and max(received.values()) == 1
        st = State(str(state))
        counters = counted(st.counters())
        st.close()
        rows = session_report(Options(roots=(str(root),)), Ledger.in_state_dir(str(state), (str(root),)))
        _truth[name] = (counters, rows, expected)
    return _truth[name]


def check_fleet(rx: OtlpReceiver, expected: set[str], url: str, hosts: tuple[str, ...], name: str,
                tmp: Path, roots: tuple[Path, ...]) -> None:
    received = Counter(s["span_id"] for s in rx.spans)
    duplicates = sum(c - 1 for c in received.values())
    chats = Counter(s["span_id"] for s in rx.spans if s["name"].startswith("chat "))
    want_counters, want_rows, want_ids = truth(name, tmp)
    got = fleet_counters(url, hosts)
    print(f"\n{name}: {len(expected)} spans expected, {len(received)} received, {duplicates} duplicate receipts, "
          f"{sum(chats.values())} chat spans; counters summed over {len(hosts)} hosts: "
          + ", ".join(f"{k.replace(chr(31), '/')}={v:g}" for k, v in sorted(got.items())))
    assert duplicates == 0
    assert set(received) == expected == want_ids
    assert max(chats.values()) == 1
    assert got == want_counters
    for host, root in zip(hosts, roots, strict=True):
        rows = session_report(Options(roots=(str(root),)), open_report_ledger(url, host, (str(root),)))
        assert [_figures(r) for r in rows] == [_figures(r) for r in want_rows], host


def _figures(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["sessionId"], row["inputTokens"], row["outputTokens"], row["cacheCreationTokens"],
            row["cacheReadTokens"], row["totalTokens"], round(row["totalCost"], 9))


# -- the scenarios -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SCENARIOS)
def test_session_moves_from_a_to_b(pg: PostgresServer, tmp_path: Path, name: str) -> None:
    url = pg.create_db(f"moves_{name}")
    rel, lines, cut = session(name)
    root_a, root_b = tmp_path / "a" / "claude", tmp_path / "b" / "claude"
    with OtlpReceiver() as rx:
        a, b = two_hosts(root_a, root_b, url, rx.endpoint)
        write_lines(root_a / rel, lines[:cut])  # host A answers the first questions
        time.sleep(2.0)
        (root_b / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root_a / rel, root_b / rel)  # the sync: B gets A's file ...
        write_lines(root_b / rel, lines[cut:])  # ... and the session goes on there
        expected = expected_span_ids(root_b)
        wait_for(rx, expected)
        stop(a)
        stop(b)
    check_fleet(rx, expected, url, ("A", "B"), name, tmp_path, (root_a, root_b))


@pytest.mark.parametrize("name", SCENARIOS)
def test_both_hosts_follow_one_shared_root(pg: PostgresServer, tmp_path: Path, name: str) -> None:
    """A shared file system: both hosts read the same files as they are written, at once."""
    url = pg.create_db(f"shared_{name}")
    rel, lines, cut = session(name)
    root = tmp_path / "shared" / "claude"
    with OtlpReceiver() as rx:
        a, b = two_hosts(root, root, url, rx.endpoint)
        write_lines(root / rel, lines[:cut])
        time.sleep(2.0)
        write_lines(root / rel, lines[cut:])
        expected = expected_span_ids(root)
        wait_for(rx, expected)
        stop(a)
        stop(b)
    check_fleet(rx, expected, url, ("A", "B"), name, tmp_path, (root, root))


def test_host_killed_mid_way_then_restarted(pg: PostgresServer, tmp_path: Path) -> None:
    """A is SIGKILLed while it reads the first part (spans claimed, maybe not acknowledged), the
    session moves to B, A restarts: still every span once and exact counters."""
    name = "s06_kill_orphan_resume"
    url = pg.create_db("killed")
    rel, lines, cut = session(name)
    root_a, root_b = tmp_path / "a" / "claude", tmp_path / "b" / "claude"
    with OtlpReceiver() as rx:
        a, b = two_hosts(root_a, root_b, url, rx.endpoint)
        write_lines(root_a / rel, lines[: cut // 2])
        time.sleep(0.3)
        kill(a)
        write_lines(root_a / rel, lines[cut // 2: cut])  # Claude Code goes on while ccotel is down
        (root_b / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root_a / rel, root_b / rel)
        write_lines(root_b / rel, lines[cut:])
        a = start(root_a, url, rx.endpoint, "A")
        caught_up(a)  # up before it is stopped: B may have sent everything while A still starts
        expected = expected_span_ids(root_b)
        wait_for(rx, expected)
        stop(a)
        stop(b)
    check_fleet(rx, expected, url, ("A", "B"), name, tmp_path, (root_a, root_b))


def test_connection_lost_and_regained(pg: PostgresServer, tmp_path: Path) -> None:
    """The PostgreSQL server restarts while both hosts follow a shared root: nothing is lost or
    counted twice, and the hosts go on without a restart of their own."""
    name = "s02_resume_two_turns"
    url = pg.create_db("restart")
    rel, lines, cut = session(name)
    root = tmp_path / "shared" / "claude"
    with OtlpReceiver() as rx:
        a, b = two_hosts(root, root, url, rx.endpoint)
        write_lines(root / rel, lines[:cut])
        pg.restart(down_s=1.0)  # every connection cut; the hosts see it on their next use
        write_lines(root / rel, lines[cut:])
        expected = expected_span_ids(root)
        wait_for(rx, expected)
        err_a, err_b = stop(a), stop(b)
    assert pg.password not in err_a + err_b
    check_fleet(rx, expected, url, ("A", "B"), name, tmp_path, (root, root))


def claims_by_host(url: str) -> dict[str, tuple[int, int]]:
    """host -> (claims not delivered, claims delivered)."""
    with psycopg.connect(url, autocommit=True) as c:
        rows = c.execute("SELECT h.host, count(*) FILTER (WHERE NOT k.done), count(*) FILTER (WHERE k.done) "
                         "FROM ccotel.claims k JOIN ccotel.hosts h USING (hid) GROUP BY h.host").fetchall()
    return {str(h): (int(o), int(d)) for h, o, d in rows}


def test_a_dead_hosts_claims_are_taken_over_after_its_lease(pg: PostgresServer, tmp_path: Path) -> None:
    """Host A claims every span of a session but cannot deliver them (its backend refuses); B,
    on the same shared root, holds them while A lives (A renews its lease: B sends none), and
    once A is SIGKILLed takes them over after A's lease and sends each once."""
    lease = "2"
    url = pg.create_db("lease_takeover")
    rel, lines, _cut = session("s02_resume_two_turns")
    root = tmp_path / "shared" / "claude"
    with OtlpReceiver(refuse) as down, OtlpReceiver() as rx:
        a = start(root, url, down.endpoint, "A", "--claim-lease", lease)
        caught_up(a)
        write_lines(root / rel, lines, pause_s=0.0)
        expected = expected_span_ids(root)
        deadline = time.monotonic() + 60
        while claims_by_host(url).get("A", (0, 0))[0] < len(expected) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert claims_by_host(url) == {"A": (len(expected), 0)}, stderr_of(a)
        b = start(root, url, rx.endpoint, "B", "--claim-lease", lease)
        time.sleep(float(lease) * 4)  # B caught up and holds A's spans; A is alive and renews its lease
        assert rx.spans == [], "B sent spans a live host claimed"
        assert b.poll() is None and claims_by_host(url) == {"A": (len(expected), 0)}
        kill(a)
        wait_for(rx, expected, seconds=60)
        err_b = stop(b)
    received = Counter(s["span_id"] for s in rx.spans)
    assert set(received) == expected and max(received.values()) == 1, err_b
    assert claims_by_host(url) == {"B": (0, len(expected))}
    assert "took over" in err_b
