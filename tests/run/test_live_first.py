"""History never delays the present (issue 31): a turn appended to a live session while ``ccotel run``
is still catching up on a large history is exported before the catch-up ends.

A real ``ccotel run`` subprocess catches up on a ~150 MB generated history (bench/corpus.py, its
files dated a day back, one session written just now: the live one) in ccotel run itself
(``--workers 0``), with one worker process beside it (the default) and with two. Once the catch-up
is under way a turn is appended to the live session; its tool span must reach the loopback OTLP
receiver while the catch-up is still running (the log does not say "caught up" yet, and history
spans are still to come). Then every span arrives exactly once (the corpus's own count plus the live
turn's), and the metrics count the live turn and no history (tokens equal the appended turn's).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.run.test_signals import wait_until
from tests.support.otlp import OtlpReceiver

CORPUS = Path(tempfile.gettempdir()) / "ccotel-test-corpus" / "live-first-150MB"
DAY_S = 86_400
# the live turn: LiveAppender's call (input 3, cache creation 10, cache read 100, output 7) and the
# final answer's (final_answer: input 5, cache read 110, output 4)
LIVE_TOKENS = 239.0


@pytest.fixture(scope="module")
def corpus() -> tuple[Path, dict]:
    from bench.corpus import ensure

    doc = ensure(str(CORPUS), 150_000_000, seed=12, session_mean=2_000_000, projects=6)
    return CORPUS, doc["totals"]


def private_copy(shared: Path, into: Path) -> Path:
    """The corpus as this test's own tree: hard links to the shared files (the generated corpus
    is made once), so the tests can run side by side (pytest -n) without one's append, or the
    truncate that undid it, landing in another's live session."""
    for src in shared.rglob("*"):
        dst = into / src.relative_to(shared)
        if src.is_dir():
            dst.mkdir(parents=True, exist_ok=True)
        elif src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(src, dst)
            except OSError:  # another filesystem
                shutil.copy2(src, dst)
    return into


def own_file(path: str) -> None:
    """``path`` (a hard link to the shared corpus) as a copy of its own, to be appended to."""
    tmp = path + ".own"
    shutil.copy2(path, tmp)
    os.replace(tmp, path)


def last_session(root: Path) -> tuple[str, str, str]:
    """(path, session id, cwd) of the session read last in time order (the newest lines): what a
    catch-up oldest first reaches at its very end."""
    from ccotel.read.discover import find, session_groups
    from ccotel.records import FileKind

    groups = session_groups(find((str(root),), None, {}))
    main = next(tf for _r, tf in groups[-1] if tf.kind is FileKind.MAIN)
    with open(main.path, "rb") as f:
        for line in f:
            d = orjson.loads(line)
            if d.get("cwd"):
                return main.path, d["sessionId"], d["cwd"]
    raise AssertionError("no cwd in " + main.path)


def final_answer(app, parent: str) -> bytes:
    """The assistant's final answer (end_turn) after a LiveAppender's tool result."""
    a = app._env(parent, "assistant")
    a["message"] = {"model": "claude-opus-4-6", "id": "msg_livefirst_final", "type": "message", "role": "assistant",
                    "content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "stop_sequence": None,
                    "usage": {"input_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 110,
                              "output_tokens": 4}}
    a["requestId"] = "req_livefirst_final"
    return orjson.dumps(a) + b"\n"


def append_live_turn(rx: OtlpReceiver, proc: subprocess.Popen, path: str, sid: str, cwd: str,
                     tool_id: str) -> tuple[Any, bytes, float]:
    """A prompt, its tool_use and the tool_result appended to ``path`` as Claude Code writes them;
    waits for the tool's span. Returns the appender, the tool_result line (the final answer's
    parent) and the monotonic time of the append."""
    from bench.corpus import LiveAppender

    app = LiveAppender(path, sid, cwd, seed=tool_id)
    data, line = app.start(tool_id)
    with open(path, "ab") as f:
        f.write(data)
    time.sleep(0.05)
    result = app.result(tool_id, line)
    with open(path, "ab") as f:
        f.write(result)
    appended = time.monotonic()
    assert wait_until(lambda: any(s["attributes"].get("gen_ai.tool.call.id") == tool_id for s in rx.spans)
                      or proc.poll() is not None, 300, 0.01), "no live span"
    return app, result, appended


def metric_sum(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_run(rx: OtlpReceiver, log: Path, root: Path, state: Path, port: int, workers: int | None,
              *more: str) -> subprocess.Popen:
    """``ccotel run`` on ``root`` (its catch-up in parallel from 1 MB), exporting to ``rx``, serving
    its metrics on ``port``, its log in ``log``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = rx.endpoint
    return subprocess.Popen(
        [sys.executable, "-m", "ccotel", "run", "--root", str(root), "--state-dir", str(state),
         *([] if workers is None else ["--workers", str(workers)]), "--parallel-min-mb", "1",
         "--metrics-addr", f"127.0.0.1:{port}", "--no-status", *more],
        env=env, stdout=subprocess.DEVNULL, stderr=open(log, "w"))


@pytest.mark.parametrize("workers", [0, None, 2], ids=["1process", "default", "2workers"])
def test_a_live_turn_is_exported_while_the_history_is_still_caught_up(corpus, tmp_path, workers):
    shared, totals = corpus
    root = private_copy(shared, tmp_path / "history")
    files = [p for p in root.rglob("*") if p.is_file()]
    old = time.time() - DAY_S
    for p in files:  # history, as a first start finds it
        os.utime(p, (old, old))
    path, sid, cwd = last_session(root)
    own_file(path)  # appended to below: this test's alone
    os.utime(path)  # the session being written now
    port = free_port()
    log = tmp_path / "run.log"
    with OtlpReceiver() as rx:
        proc = start_run(rx, log, root, tmp_path / "state", port, workers)
        try:
            assert wait_until(lambda: len(rx.spans) >= 200 or proc.poll() is not None, 120), "no spans arrived"
            assert "caught up" not in log.read_text(), "the catch-up ended before the append: inconclusive"
            written_ns = time.time_ns()
            app, result, appended = append_live_turn(rx, proc, path, sid, cwd, "toolu_livefirst_000001")
            took = time.monotonic() - appended
            text, arrived = log.read_text(), len(rx.spans)
            print(f"\n{workers} worker(s): live span {took:.2f} s after the append, {arrived} of "
                  f"{totals['spans']} history spans arrived by then")
            assert "caught up" not in text, f"the live span waited for the catch-up ({took:.2f} s)"
            assert arrived < totals["spans"], "the live span came after the whole history"
            # the final answer: the turn ends after its quiet (1 s) and is exported, still while catching up
            with open(path, "ab") as f:
                f.write(final_answer(app, orjson.loads(result)["uuid"]))

            def turn_span() -> bool:
                return any(s["parent_span_id"] is None and s["start_ns"] >= written_ns - 5_000_000_000
                           for s in rx.spans)

            assert wait_until(lambda: turn_span() or proc.poll() is not None, 300, 0.02), "no turn span"
            took, arrived = time.monotonic() - appended, len(rx.spans)
            print(f"{workers} worker(s): the turn's span {took:.2f} s after the append, {arrived} spans by then")
            assert "caught up" not in log.read_text(), "the live turn waited for the catch-up"
            assert arrived < totals["spans"], f"the live turn came after the whole history ({took:.2f} s)"
            assert wait_until(lambda: "caught up" in log.read_text() or proc.poll() is not None, 600, 0.2)
            assert wait_until(lambda: len(rx.spans) > totals["spans"] or proc.poll() is not None, 120, 0.1)
            time.sleep(1.0)  # nothing more comes
            spans = rx.spans
            ids = Counter(s["span_id"] for s in spans)
            assert max(ids.values()) == 1, f"{sum(n - 1 for n in ids.values())} duplicates"
            # who read the history: ccotel run itself (0), one worker beside it (its default,
            # whatever the cores), or two
            read_by = re.search(r"catching up on [0-9.]+ MB in (\d+) process", log.read_text())
            assert (int(read_by.group(1)) if read_by else 0) == (1 if workers is None else workers)
            live = [s for s in spans if s["start_ns"] >= written_ns - 5_000_000_000]
            assert len(spans) - len(live) == totals["spans"], f"{len(spans) - len(live)} history spans"
            assert len(live) == 4, [s["name"] for s in live]  # the live turn: its own, 2 chat, 1 tool span
            # the metrics count the live turn and no history (19,235 tool calls, 14,859 API calls)
            assert metric_sum(port, "ccotel_tool_calls_total") == 1
            assert metric_sum(port, "ccotel_api_calls_total") == 2
            assert metric_sum(port, "ccotel_tokens_total") == LIVE_TOKENS
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def project_totals(doc_sessions: dict, projects: set[str]) -> dict[str, int]:
    out: Counter[str] = Counter()
    for s in doc_sessions.values():
        if s["project"] in projects:
            out.update({k: s[k] for k in ("spans", "tool_calls", "api_calls")})
    return dict(out)


def split_history(shared: Path, tmp_path: Path) -> tuple[Path, Path, set[str], set[str]]:
    """The corpus as a private tree holding its first two projects (what ccotel first runs on) and
    the others aside (``aside/projects``: written while it was stopped); every file a day old."""
    root = private_copy(shared, tmp_path / "history")
    projects = sorted(p.name for p in (root / "projects").iterdir())
    aside = tmp_path / "written-while-stopped"
    (aside / "projects").mkdir(parents=True)
    for name in projects[2:]:
        os.rename(root / "projects" / name, aside / "projects" / name)
    old = time.time() - DAY_S
    for p in [*root.rglob("*"), *aside.rglob("*")]:
        os.utime(p, (old, old))
    return root, aside, set(projects[:2]), set(projects[2:])


def run_until_caught_up(root: Path, state: Path, workers: int, spans: int, log: Path) -> int:
    """``ccotel run`` until it has caught up and ``spans`` spans arrived, then stopped (SIGTERM, exit
    0): how many spans it sent."""
    with OtlpReceiver() as rx:
        proc = start_run(rx, log, root, state, free_port(), workers)
        try:
            assert wait_until(lambda: "caught up" in log.read_text() or proc.poll() is not None, 300, 0.1)
            assert wait_until(lambda: len(rx.spans) >= spans or proc.poll() is not None, 120, 0.1)
        finally:
            proc.terminate()
            assert proc.wait(timeout=30) == 0
        return len(rx.spans)


def bring_back(root: Path, aside: Path, projects: set[str]) -> None:
    for name in projects:  # written while ccotel was stopped
        os.rename(aside / "projects" / name, root / "projects" / name)


@pytest.mark.parametrize("workers,touched", [(0, True), (2, True), (2, False)],
                         ids=["1process", "2workers", "2workers-resumed"])
def test_a_restart_follows_its_live_session_while_it_catches_up_on_a_backlog(corpus, tmp_path, workers, touched):
    """``ccotel run`` stopped while Claude Code went on writing (other projects' sessions, a day's
    worth): started again, it follows the session it had followed before while it reads that
    backlog (``touched``: written just before the start), or one written again only once the
    catch-up is under way (a day-old session resumed). The backlog and the live turn count (this
    is no first start), each once."""
    from bench.corpus import load_expected

    shared, _totals = corpus
    doc = load_expected(str(shared))
    assert doc is not None
    root, aside, first, later = split_history(shared, tmp_path)
    path, sid, cwd = last_session(root)  # the session followed before the stop, read to its end
    own_file(path)
    state = tmp_path / "state"
    before, backlog = project_totals(doc["sessions"], first), project_totals(doc["sessions"], later)
    assert run_until_caught_up(root, state, workers, before["spans"], tmp_path / "run.log") == before["spans"]
    bring_back(root, aside, later)
    if touched:
        os.utime(path)
    log2 = tmp_path / "restart.log"
    with OtlpReceiver() as rx:
        port = free_port()
        proc = start_run(rx, log2, root, state, port, workers)
        try:
            assert wait_until(lambda: len(rx.spans) >= 200 or proc.poll() is not None, 120), "no spans arrived"
            assert "caught up" not in log2.read_text(), "the catch-up ended before the append: inconclusive"
            app, result, appended = append_live_turn(rx, proc, path, sid, cwd, "toolu_liverestart_00001")
            took, arrived = time.monotonic() - appended, len(rx.spans)
            print(f"\n{workers} worker(s), restart: live span {took:.2f} s after the append, {arrived} of "
                  f"{backlog['spans']} backlog spans arrived by then")
            assert "caught up" not in log2.read_text(), f"the live span waited for the backlog ({took:.2f} s)"
            assert arrived < backlog["spans"], "the live span came after the whole backlog"
            with open(path, "ab") as f:  # the final answer: the turn ends after its quiet (1 s)
                f.write(final_answer(app, orjson.loads(result)["uuid"]))
            assert wait_until(lambda: "caught up" in log2.read_text() or proc.poll() is not None, 300, 0.2)
            # the backlog, and the live turn: its own span, 2 chat spans, 1 tool span
            assert wait_until(lambda: len(rx.spans) >= backlog["spans"] + 4 or proc.poll() is not None, 120, 0.1)
            time.sleep(1.0)  # nothing more comes
            ids = Counter(s["span_id"] for s in rx.spans)
            assert max(ids.values()) == 1, f"{sum(n - 1 for n in ids.values())} duplicates"
            assert len(rx.spans) == backlog["spans"] + 4
            assert metric_sum(port, "ccotel_tool_calls_total") == backlog["tool_calls"] + 1
            assert metric_sum(port, "ccotel_api_calls_total") == backlog["api_calls"] + 2
        finally:
            proc.terminate()
            proc.wait(timeout=10)


LONG = Path(tempfile.gettempdir()) / "ccotel-test-corpus" / "live-first-long-88MB"


def test_a_long_live_session_is_followed_once_its_worker_has_read_it(corpus, tmp_path):
    """A session written just now and longer than ccotel run reads first itself (LIVE_MAX_BYTES:
    long sessions reach 100 MB and more) is its worker's first part, and followed as soon as that
    part is done, while the rest of the history is still read: a turn appended once the worker has
    read it is exported then, not once every worker has ended."""
    from bench.corpus import ensure
    from ccotel.run.livefirst import LIVE_MAX_BYTES

    long_doc = ensure(str(LONG), None, sessions=1, seed=15, session_mean=90_000_000, projects=1)
    assert long_doc["totals"]["bytes"] > LIVE_MAX_BYTES
    shared, totals = corpus
    history, long_root = private_copy(shared, tmp_path / "history"), private_copy(LONG, tmp_path / "long")
    old = time.time() - DAY_S
    for p in [*history.rglob("*"), *long_root.rglob("*")]:
        os.utime(p, (old, old))
    path, sid, cwd = last_session(long_root)
    own_file(path)
    os.utime(path)  # the session being written now
    port, log = free_port(), tmp_path / "run.log"
    expected = totals["spans"] + long_doc["totals"]["spans"]
    with OtlpReceiver() as rx:
        proc = start_run(rx, log, history, tmp_path / "state", port, 2, "--root", str(long_root))
        try:
            def long_read() -> bool:  # the long session's spans have arrived: its worker has read it
                n = sum(1 for s in rx.spans if s["attributes"].get("session.id") == sid)
                return n >= 0.98 * long_doc["totals"]["spans"]

            assert wait_until(lambda: long_read() or proc.poll() is not None, 300, 0.05), "the long session's spans"
            assert "caught up" not in log.read_text(), "the catch-up ended before the append: inconclusive"
            app, result, appended = append_live_turn(rx, proc, path, sid, cwd, "toolu_livelong_0000001")
            took, arrived = time.monotonic() - appended, len(rx.spans)
            print(f"\nlong live session: its span {took:.2f} s after the append, {arrived} of {expected} spans by then")
            assert "caught up" not in log.read_text(), f"the long live session waited for the catch-up ({took:.2f} s)"
            # not held until every worker had ended: a good share of the history was still to come
            assert arrived < 0.95 * expected, f"the long live session waited for the workers ({took:.2f} s)"
            with open(path, "ab") as f:
                f.write(final_answer(app, orjson.loads(result)["uuid"]))
            assert wait_until(lambda: "caught up" in log.read_text() or proc.poll() is not None, 600, 0.2)
            assert wait_until(lambda: len(rx.spans) >= expected + 4 or proc.poll() is not None, 120, 0.1)
            time.sleep(1.0)  # nothing more comes
            ids = Counter(s["span_id"] for s in rx.spans)
            assert max(ids.values()) == 1, f"{sum(n - 1 for n in ids.values())} duplicates"
            assert len(rx.spans) == expected + 4
            assert metric_sum(port, "ccotel_tool_calls_total") == 1  # a first start: the live turn alone
            assert metric_sum(port, "ccotel_tokens_total") == LIVE_TOKENS
        finally:
            proc.terminate()
            proc.wait(timeout=10)


@pytest.mark.parametrize("workers", [0, 2], ids=["1process", "2workers"])
def test_a_session_forked_while_a_restart_catches_up_counts_its_copied_calls_once(corpus, tmp_path, workers):
    """A session of the backlog (read by a catch-up worker) copied into a new file under a new
    sessionId while ccotel run catches up after a restart (Claude Code writes such copies: its whole
    history, then the new turns): the copy's calls are the original's, counted and sent once; the
    new turn counts."""
    from bench.corpus import load_expected

    shared, _totals = corpus
    doc = load_expected(str(shared))
    assert doc is not None
    root, aside, first, later = split_history(shared, tmp_path)
    original, sid, cwd = last_session(aside)  # a session of the backlog
    original = str(root / Path(original).relative_to(aside))
    state = tmp_path / "state"
    run_until_caught_up(root, state, 2, project_totals(doc["sessions"], first)["spans"], tmp_path / "run.log")
    bring_back(root, aside, later)
    backlog = project_totals(doc["sessions"], later)
    log, port = tmp_path / "restart.log", free_port()
    with OtlpReceiver() as rx:
        proc = start_run(rx, log, root, state, port, workers)
        try:
            fork_during_catch_up(rx, proc, log, original, sid, cwd, f"{workers} worker(s), restart")
            # the backlog counts (no first start); the fork's copy of it not again, its turn once
            expect_once(rx, port, backlog["spans"] + 4, backlog["tool_calls"] + 1, backlog["api_calls"] + 2)
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def test_a_session_forked_during_a_first_catch_up_counts_only_its_new_turn(corpus, tmp_path):
    """The same on a first start: the fork's copied history is history (not counted, sent once
    with its original); its new turn is live."""
    shared, totals = corpus
    root = private_copy(shared, tmp_path / "history")
    old = time.time() - DAY_S
    for p in root.rglob("*"):
        os.utime(p, (old, old))
    original, sid, cwd = last_session(root)
    log, port = tmp_path / "run.log", free_port()
    with OtlpReceiver() as rx:
        proc = start_run(rx, log, root, tmp_path / "state", port, 2)
        try:
            fork_during_catch_up(rx, proc, log, original, sid, cwd, "2 worker(s), first start")
            expect_once(rx, port, totals["spans"] + 4, 1, 2)
            assert metric_sum(port, "ccotel_tokens_total") == LIVE_TOKENS
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def fork_during_catch_up(rx: OtlpReceiver, proc: subprocess.Popen, log: Path, original: str, sid: str, cwd: str,
                         label: str) -> None:
    """Once the catch-up is under way: ``original`` copied into a new session file (Claude Code
    creates it, then writes the copy with the new sessionId), a turn written there, its final
    answer; then waits for the end of the catch-up."""
    fork_sid = "0f0f0f0f-1111-4222-8333-444455556666"
    fork = os.path.join(os.path.dirname(original), fork_sid + ".jsonl")
    assert wait_until(lambda: len(rx.spans) >= 200 or proc.poll() is not None, 120), "no spans arrived"
    assert "caught up" not in log.read_text(), "the catch-up ended before the fork: inconclusive"
    with open(original, "rb") as f:
        copy = f.read().replace(f'"sessionId":"{sid}"'.encode(), f'"sessionId":"{fork_sid}"'.encode())
    open(fork, "wb").close()
    time.sleep(0.5)  # ccotel run sees the empty file before its lines
    with open(fork, "ab") as f:
        f.write(copy)
    app, result, appended = append_live_turn(rx, proc, fork, fork_sid, cwd, "toolu_livefork_00000001")
    took, caught_up = time.monotonic() - appended, "caught up" in log.read_text()
    print(f"\n{label}, fork: its live span {took:.2f} s after the append "
          f"({'after' if caught_up else 'before'} the catch-up ended)")
    with open(fork, "ab") as f:
        f.write(final_answer(app, orjson.loads(result)["uuid"]))
    assert wait_until(lambda: "caught up" in log.read_text() or proc.poll() is not None, 300, 0.2)


def expect_once(rx: OtlpReceiver, port: int, spans: int, tool_calls: int, api_calls: int) -> None:
    """Every span once, and the metrics' counts."""
    assert wait_until(lambda: len(rx.spans) >= spans, 120, 0.1)
    time.sleep(1.5)  # nothing more comes
    ids = Counter(s["span_id"] for s in rx.spans)
    assert max(ids.values()) == 1, f"{sum(n - 1 for n in ids.values())} duplicates"
    assert metric_sum(port, "ccotel_tool_calls_total") == tool_calls
    assert metric_sum(port, "ccotel_api_calls_total") == api_calls
    assert len(rx.spans) == spans
