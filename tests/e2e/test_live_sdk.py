"""ccotel.sdk with the real Claude Agent SDK driving the real CLI (the matrix's versions selected by
CCOTEL_CLAUDE_VERSIONS, through ``cli_path``) against the scripted fake API: every message that has
a transcript line gets that line as ``.raw`` (checked against the files read as plain JSON), and the
spans the observer exports have the ids the sidecar's pipeline builds from the same transcripts.
Foreground and background subagents, a resume (through ClaudeSDKClient, spans exported while it is
still connected), a resume of a synced copy on another "machine" (matched by content alone: the
new turn repeats the old texts), and the flush race widened by a mirror that lets each line
through 0.25 s late."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from ccotel import sdk as ccotel_sdk
from ccotel.export.memory_sink import MemorySink
from ccotel.run.pipeline import Options, Pipeline
from ccotel.sdk import Observer, wanted_of
from tests.harness.fakeapi import FakeAPI, Message, Rule, text
from tests.harness.install import claude_binary, install, selected_versions
from tests.harness.runner import Sandbox
from tests.harness.scenarios import SCENARIOS, api_tag, bash, usage_for
from tests.support.fixtures import missing_component
from tests.support.sdk_transcripts import DelayedMirror, LiveSidecar, copy_projects, line_index

try:
    import claude_agent_sdk
except ImportError:  # pragma: no cover - the test extra installs it
    claude_agent_sdk = None

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def _sdk_installed() -> None:
    """Skipped locally without the SDK; a failure in CI (tests.support.fixtures' policy)."""
    if claude_agent_sdk is None:
        missing_component("claude-agent-sdk is not installed: pip install -e '.[test]'")

VERSIONS = selected_versions()


def _options(sandbox: Sandbox, api: FakeAPI, version: str, **kw: Any) -> Any:
    binary = claude_binary(version) or install(version=version)
    return claude_agent_sdk.ClaudeAgentOptions(
        cli_path=str(binary), cwd=str(sandbox.cwd), env=sandbox.env(api.base_url),
        allowed_tools=["Bash", "Agent"], **kw)


def _check_raw(messages: list[Any], config_dir: Path) -> int:
    """Every message with a transcript line has it as .raw; the others have None. Returns how
    many had one."""
    index = line_index(config_dir)
    had = 0
    for m in messages:
        wanted = wanted_of(m)
        if wanted is not None and wanted.uuid in index:
            assert m.raw == index[wanted.uuid], type(m).__name__
            had += 1
        else:
            assert m.raw is None, type(m).__name__
    assert had == sum(1 for m in messages if wanted_of(m) is not None)  # no message without its line
    return had


def _ids(spans: Any) -> set[tuple[int, int, int | None, str]]:
    return {(s.trace_id, s.span_id, s.parent_span_id, s.name) for s in spans}


def _check_spans(sink: MemorySink, config_dir: Path, since_ns: int) -> None:
    """The observer's spans are the sidecar's for the turns since the observer started (and the
    sidecar reading everything from offset 0 has them too, with the same ids)."""
    since: list[Any] = []
    Pipeline(Options(roots=(str(config_dir),), since_ns=since_ns), emit=since.extend).backfill(close_all=True)
    everything: list[Any] = []
    Pipeline(Options(roots=(str(config_dir),)), emit=everything.extend).backfill(close_all=True)
    assert sink.spans and _ids(sink.spans) == _ids(since)
    assert _ids(sink.spans) <= _ids(everything)


async def _collect(messages: AsyncIterator[Any]) -> list[Any]:
    return [m async for m in messages]


def _hex(spans: Any) -> set[tuple[str, str, str | None, str]]:
    return {(f"{s.trace_id:032x}", f"{s.span_id:016x}",
             None if s.parent_span_id is None else f"{s.parent_span_id:016x}", s.name) for s in spans}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("scenario,prompt", [
    ("s03_parallel_subagents", "S03 main: start two helper agents in parallel"),
    ("s04_background_subagent", "S04 main: start one background helper agent"),
], ids=["foreground", "background"])
def test_live_subagents(scenario: str, prompt: str, version: str, claude_cli: Path, tmp_path: Path) -> None:
    """ccotel.sdk.query while ``ccotel run`` watches the same config dir: the subagents' messages
    get their lines from the subagent files (found through meta.json and toolUseResult.agentId),
    and the observer's spans are exactly the ones the live sidecar exports.

    Foreground, they are also what a backfill of the files gives. Background, not: the helper
    reports ~2.5 s after the turn's final answer, when both live readers have closed the turn
    (1 s of quiet), so its notification's answer is a trace of its own; read in one go, the
    backfill puts it in the turn's trace (the pipeline's rule, assemble.py, not the SDK's)."""
    from tests.support.otlp import OtlpReceiver

    sc = SCENARIOS[scenario]
    sandbox = Sandbox.create(base=tmp_path, version=version)
    sink = MemorySink()
    with FakeAPI(api_tag(sc, version) + "_sdk", sc.rules(version=version), tmp_path / "gt.jsonl") as api, \
            OtlpReceiver() as receiver:
        sidecar = LiveSidecar(sandbox.config_dir, tmp_path / "state", receiver.endpoint)
        try:
            options = _options(sandbox, api, version)
            t0 = time.time_ns()
            got = anyio.run(_collect, ccotel_sdk.query(prompt=prompt, options=options, traces=sink))
            live = receiver.wait_for(len(sink.spans), timeout_s=20)
        finally:
            stderr = sidecar.stop()
    assert type(got[-1]).__name__ == "ResultMessage" and not got[-1].is_error
    assert _check_raw(got, sandbox.config_dir) >= 6
    sub = [m for m in got if getattr(m, "parent_tool_use_id", None) and m.raw is not None]
    metas = {json.loads(p.read_text())["toolUseId"]: p.name.split(".")[0][len("agent-"):]
             for p in sandbox.projects_dir.rglob("*.meta.json")}
    assert sub and all(m.raw["agentId"] == metas[m.parent_tool_use_id] and m.raw["isSidechain"] for m in sub)
    names = [s.name for s in sink.spans]
    assert names.count("invoke_agent general-purpose") == (2 if scenario.startswith("s03") else 1)
    mine = _hex(sink.spans)
    theirs = {(s["trace_id"], s["span_id"], s["parent_span_id"], s["name"]) for s in receiver.spans}
    assert len(live) == len(receiver.spans) == len(sink.spans) and mine == theirs, stderr[-2000:]
    if scenario.startswith("s03"):
        _check_spans(sink, sandbox.config_dir, t0)


# -- resumes -----------------------------------------------------------------------------------

TAG = "SDK-R resumed session"


def _repeating_rules() -> list[Rule]:
    """Three turns of one session (run, resume, resume of a synced copy), each answering with the
    same texts: only the tool ids differ, so the content signature of a new message also fits a
    line of an earlier turn."""
    rules = []
    for turn in range(3):
        rules += [
            Rule(f"r{turn}.bash", Message([text("Checking the same thing."), bash("echo same", "Print same")],
                                          usage_for(15, 2 * turn)), first_user=TAG, turns=2 * turn),
            Rule(f"r{turn}.final", Message([text("Done: it printed same.")], usage_for(15, 2 * turn + 1)),
                 first_user=TAG, turns=2 * turn + 1),
        ]
    return rules


def _mangled(cwd: Path) -> str:
    return re.sub(r"[^A-Za-z0-9]", "-", str(cwd))


async def _client_turn(options: Any, prompt: str, obs: Observer, sink: MemorySink) -> tuple[list[Any], int]:
    """One turn through ClaudeSDKClient; returns its messages and how many spans the observer had
    exported while the client was still connected."""
    async with claude_agent_sdk.ClaudeSDKClient(options) as client:
        await client.query(prompt)
        got = [m async for m in obs.wrap(client.receive_response())]
        await anyio.to_thread.run_sync(_wait_for_turn_span, sink)
        return got, len(sink.spans)


def _wait_for_turn_span(sink: MemorySink, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not any(s.parent_span_id is None for s in sink.spans) and time.monotonic() < deadline:
        time.sleep(0.05)


async def _strip_uuids(messages: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for m in messages:
        yield dataclasses.replace(m, uuid=None) if type(m).__name__ in ("AssistantMessage", "UserMessage") else m


@pytest.mark.parametrize("version", VERSIONS)
def test_live_resume_and_synced_copy(version: str, claude_cli: Path, tmp_path: Path) -> None:
    """Run 1; run 2 resumes it through ClaudeSDKClient (its spans are out while the client is
    connected); run 3 resumes a synced copy of the files on another "machine" (another HOME and
    cwd, the files copied into its project directory, read there from offset 0). Each run's
    messages get the lines that run wrote, never an earlier turn's, also when matched by content
    alone; each run's spans are the sidecar's for its turn."""
    here = Sandbox.create(base=tmp_path, version=version)
    there = Sandbox.create(base=tmp_path, version=version)
    with FakeAPI("sdkr_" + version.replace(".", ""), _repeating_rules(), tmp_path / "gt.jsonl") as api:
        first = anyio.run(_collect, ccotel_sdk.query(prompt=f"{TAG}: turn one", options=_options(here, api, version),
                                                     traces=None))
        session_id = first[-1].session_id
        _check_raw(first, here.config_dir)

        options = _options(here, api, version, resume=session_id)
        sink = MemorySink()
        obs = Observer(options, traces=sink, poll_interval_s=0.05)
        second, live_spans = anyio.run(_client_turn, options, f"{TAG}: turn two", obs, sink)
        assert obs.close()
        assert live_spans > 0  # the turn's spans were exported before the client disconnected
        assert _check_raw(second, here.config_dir) >= 4
        _check_spans(sink, here.config_dir, obs.start_ns)

        # the synced copy: the other machine's files, where its cwd's project directory is here
        copied = copy_projects(here.config_dir, there.config_dir, project_dir=_mangled(there.cwd))
        (main_copy,) = [p for p in copied if p.name == f"{session_id}.jsonl"]
        old_uuids = set(line_index(there.config_dir))
        options = _options(there, api, version, resume=session_id)
        sink = MemorySink()
        by_uuid = Observer(options, traces=sink)
        by_content = Observer(options, traces=None)
        third = anyio.run(_collect, by_content.wrap(_strip_uuids(
            by_uuid.wrap(claude_agent_sdk.query(prompt=f"{TAG}: turn three", options=options)))))
        assert by_uuid.close()
    assert type(third[-1]).__name__ == "ResultMessage" and not third[-1].is_error, third[-1]
    assert main_copy.stat().st_size > 0
    index = line_index(there.config_dir)
    new_uuids = set(index) - old_uuids
    matched = [m for m in third if wanted_of(m) is not None]
    assert len(matched) >= 4
    for m in matched:
        assert m.raw is not None and m.raw["uuid"] in new_uuids, m  # the new turn's lines only
    assert by_content.stats.by_signature == len(matched) and by_content.stats.history_skipped > 0
    texts = [m.raw["message"]["content"][0].get("text") for m in matched if type(m).__name__ == "AssistantMessage"]
    assert "Done: it printed same." in texts  # a text every earlier turn wrote too
    _check_spans(sink, there.config_dir, by_uuid.start_ns)


# -- the flush race ------------------------------------------------------------------------------


async def _note_absent(messages: AsyncIterator[Any], root: Path, absent: list[str]) -> AsyncIterator[Any]:
    """Passes the SDK's messages on, noting those whose line is not in ``root``'s files yet when
    the observer is handed them."""
    async for m in messages:
        wanted = wanted_of(m)
        if wanted is not None and wanted.uuid not in line_index(root):
            absent.append(str(wanted.uuid))
        yield m


@pytest.mark.parametrize("version", VERSIONS)
def test_live_flush_race(version: str, claude_cli: Path, tmp_path: Path) -> None:
    """Every line reaches the files the observer reads 0.25 s after the CLI wrote it (itself
    10-400 ms after the SDK had the message): messages arrive before their lines, and the bounded
    retry finds each one. (Messages that waited in the SDK's buffer meanwhile find theirs at once:
    the delay does not add up.) The spans, read from the same late files, are the sidecar's."""
    sc = SCENARIOS["s03_parallel_subagents"]
    sandbox = Sandbox.create(base=tmp_path, version=version)
    mirror = tmp_path / "mirror"
    sink = MemorySink()
    absent: list[str] = []
    with FakeAPI(api_tag(sc, version) + "_sdkf", sc.rules(version=version), tmp_path / "gt.jsonl") as api, \
            DelayedMirror(sandbox.config_dir, mirror, delay_s=0.25) as late:
        options = _options(sandbox, api, version)
        obs = Observer(options, roots=[str(mirror)], traces=sink, raw_timeout_s=1.0)
        got = anyio.run(_collect, obs.wrap(_note_absent(claude_agent_sdk.query(
            prompt="S03 main: start two helper agents in parallel", options=options), mirror, absent)))
        late.drain()
        assert obs.close()
    wanted = sum(1 for m in got if wanted_of(m) is not None)
    assert _check_raw(got, sandbox.config_dir) == wanted  # every one matched, to its own line
    assert len(absent) >= 3 and obs.stats.unmatched == 0
    assert 1 <= obs.stats.after_retry <= len(absent)
    _check_spans(sink, mirror, obs.start_ns)
