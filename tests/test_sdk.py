"""ccotel.sdk on the real CLI's captured streams and transcripts (both versions of the matrix),
through the Agent SDK's own message parser: every message finds its transcript line by uuid and,
with the uuids taken away, by its content signature alone; lines flushed late are waited for, a
bounded time; a resumed or synced session's history is never taken for a new message; unclaimed
lines wait in a bounded queue; the live spans have the ids the sidecar's pipeline gives.
The same with the real SDK driving the real CLI: tests/e2e/test_live_sdk.py."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from ccotel.export.memory_sink import MemorySink
from ccotel.read.parse_time import parse_timestamp
from ccotel.run.pipeline import Options, Pipeline
from ccotel.sdk import Observer, raw_of, wanted_of
from ccotel.sources.sdk_match import Matcher, Wanted, content_signature, normalise
from tests.harness.fixtures import Fixture, list_fixtures, load_fixture
from tests.support.fixtures import missing_component

try:
    import claude_agent_sdk
except ImportError:  # pragma: no cover - the test extra installs it
    claude_agent_sdk = None

from tests.support.sdk_transcripts import line_index, sdk_messages


@pytest.fixture(autouse=True)
def _sdk_installed() -> None:
    if claude_agent_sdk is None:
        missing_component("claude-agent-sdk is not installed: pip install -e '.[test]'")


def _run(coro: Any) -> Any:
    return anyio.run(lambda: coro)


async def _observe(obs: Observer, messages: list[Any]) -> list[Any]:
    async def gen() -> Any:
        for m in messages:
            yield m
    return [m async for m in obs.wrap(gen())]


def _messages(fx: Fixture, strip_uuids: bool = False) -> list[Any]:
    out = []
    for run in fx.runs:
        for m in sdk_messages(run["records"]):
            if strip_uuids:
                m = _strip_one(m)
            out.append(m)
    return out


def _strip_one(m: Any) -> Any:
    """The message without its uuid (assistant and user messages; a compact boundary keeps the
    one in its data: it has no content to match by)."""
    return dataclasses.replace(m, uuid=None) if type(m).__name__ in ("AssistantMessage", "UserMessage") else m


def _uuid(m: Any) -> str | None:
    wanted = wanted_of(m)
    return None if wanted is None else wanted.uuid


def _expected(fx: Fixture) -> list[tuple[int, str]]:
    """(position, uuid) of every message that has a transcript line, from the stream's uuids."""
    index = line_index(fx.config_dir)
    return [(i, u) for i, m in enumerate(_messages(fx)) if (u := _uuid(m)) is not None and u in index]


ALL = list_fixtures()


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("strip", [False, True], ids=["uuid", "signature"])
def test_every_message_finds_its_line(name: str, strip: bool) -> None:
    """Every assistant and user message of every captured stream gets the transcript line with
    its uuid; without the uuids (a CLI that gives the stream others) the content signature in the
    agent context finds the very same line. Messages no line stands for get None."""
    fx = load_fixture(name)
    index = line_index(fx.config_dir)
    expected = dict(_expected(fx))
    assert expected, "a stream with no message that has a line proves nothing"
    obs = Observer(roots=[str(fx.config_dir)], traces=None, clock=lambda: 0, raw_timeout_s=0.01)
    got = _run(_observe(obs, _messages(fx, strip_uuids=strip)))
    for i, m in enumerate(got):
        if i in expected:
            assert m.raw == index[expected[i]], (name, i, type(m).__name__)
            assert raw_of(m) is m.raw
        else:
            assert m.raw is None, (name, i, type(m).__name__)
    stats = obs.stats
    assert stats.unmatched == 0
    by_content = sum(1 for i in expected if type(got[i]).__name__ != "SystemMessage") if strip else 0
    assert (stats.by_signature, stats.by_uuid) == (by_content, len(expected) - by_content)


def test_raw_fields_users_asked_for() -> None:
    """What the stream lacks is on .raw: the parent chain, timestamps, sidechain and agent ids,
    the final usage (the stream has the start-of-stream snapshot), toolUseResult."""
    fx = load_fixture("s03_parallel_subagents", version="2.1.330")
    obs = Observer(roots=[str(fx.config_dir)], traces=None, clock=lambda: 0, raw_timeout_s=0.01)
    got = _run(_observe(obs, _messages(fx)))
    sub = [m for m in got if getattr(m, "parent_tool_use_id", None) and m.raw is not None]
    assert sub and all(m.raw["isSidechain"] is True and m.raw["agentId"] for m in sub)
    agents = {m.parent_tool_use_id: m.raw["agentId"] for m in sub}
    assert len(set(agents.values())) == 2  # two parallel subagents, each its own file
    for m in got:
        if type(m).__name__ == "AssistantMessage":
            assert m.usage["output_tokens"] == 1  # the stream's snapshot
            assert m.raw["message"]["usage"]["output_tokens"] > 1  # the final figure
            assert parse_timestamp(m.raw["timestamp"]) and "parentUuid" in m.raw
    results = [m for m in got if m.raw is not None and isinstance(m.raw.get("toolUseResult"), dict)
               and "agentId" in m.raw["toolUseResult"]]
    assert {m.raw["toolUseResult"]["agentId"] for m in results} == set(agents.values())


def test_system_messages_have_no_line() -> None:
    fx = load_fixture("s04_background_subagent", version="2.1.330")
    got = _run(_observe(Observer(roots=[str(fx.config_dir)], traces=None, clock=lambda: 0), _messages(fx)))
    kinds = {type(m).__name__ for m in got if m.raw is None}
    assert {"SystemMessage", "ResultMessage", "TaskStartedMessage"} <= kinds
    assert all(m.raw is not None for m in got if type(m).__name__ in ("AssistantMessage", "UserMessage"))


# -- the flush race -------------------------------------------------------------------------


class _LateWriter:
    """Writes a fixture's transcript lines into an empty root a few at a time, each time the
    observer waits: the CLI flushing its transcript after the message reached the SDK."""

    def __init__(self, fx: Fixture, dest: Path, per_wait: int) -> None:
        self.todo: list[tuple[Path, bytes]] = []
        for src in fx.transcripts:
            target = dest / "projects" / src.relative_to(fx.projects_dir)
            target.parent.mkdir(parents=True, exist_ok=True)
            meta = src.with_name(src.name[: -len(".jsonl")] + ".meta.json")
            if meta.exists():
                shutil.copy(meta, target.with_name(meta.name))
            self.todo += [(target, line) for line in src.read_bytes().splitlines(keepends=True)]
        self.todo.sort(key=lambda t: parse_timestamp(json.loads(t[1]).get("timestamp")) or 0)
        self.per_wait = per_wait
        self.waits = 0

    async def sleep(self, seconds: float) -> None:
        self.waits += 1
        self._write_some()
        await anyio.lowlevel.checkpoint()

    def _write_some(self) -> None:
        for target, line in self.todo[: self.per_wait]:
            with open(target, "ab") as f:
                f.write(line)
        del self.todo[: self.per_wait]


@pytest.mark.parametrize("version", ["2.1.197", "2.1.330", "2.1.332"])
def test_flush_race_lines_written_after_their_message(tmp_path: Path, version: str) -> None:
    """No line is on disk when its message arrives; the bounded retry reads the lines as they are
    written (subagent files and meta.json included) and every message gets its own line."""
    fx = load_fixture("s03_parallel_subagents", version=version)
    writer = _LateWriter(fx, tmp_path, per_wait=2)
    obs = Observer(roots=[str(tmp_path)], traces=None, clock=lambda: 0, raw_timeout_s=30.0,
                   sleep=writer.sleep)
    got = _run(_observe(obs, _messages(fx)))
    index = line_index(fx.config_dir)
    expected = dict(_expected(fx))
    assert [i for i, m in enumerate(got) if m.raw is not None] == sorted(expected)
    assert all(got[i].raw == index[u] for i, u in expected.items())
    assert obs.stats.after_retry >= 3 and obs.stats.unmatched == 0 and writer.waits > 0


def test_retry_is_bounded(tmp_path: Path) -> None:
    """A line that never comes costs at most raw_timeout_s; once the session's transcript has
    not appeared at all (not persisted), later messages do not wait."""
    fx = load_fixture("s01_bash_tool", version="2.1.330")
    messages = _messages(fx)
    obs = Observer(roots=[str(tmp_path)], traces=None, raw_timeout_s=0.3)
    t0 = time.monotonic()
    got = _run(_observe(obs, messages))
    took = time.monotonic() - t0
    assert all(m.raw is None for m in got)
    assert 0.3 <= took < 1.0, took  # one full wait, then none
    assert obs.stats.unmatched == sum(1 for m in messages if wanted_of(m) is not None)


# -- resumed sessions: history is not matched -----------------------------------------------


def _split_resume_fixture(tmp_path: Path) -> tuple[Fixture, Path, bytes, bytes, list[Any], list[Any]]:
    """s02 (2.1.330): run 1, then run 2 resuming it in the same file. The file as it was after
    run 1 (the synced copy) and the lines run 2 appended."""
    fx = load_fixture("s02_resume_two_turns", version="2.1.330")
    (main,) = fx.main_transcripts
    lines = main.read_bytes().splitlines(keepends=True)
    enqueues = [i for i, ln in enumerate(lines) if b'"operation":"enqueue"' in ln]
    cut = enqueues[1]  # run 2 starts with its own enqueue
    target = tmp_path / "projects" / main.relative_to(fx.projects_dir)
    target.parent.mkdir(parents=True)
    run1, run2 = (sdk_messages(r["records"]) for r in fx.runs)
    return fx, target, b"".join(lines[:cut]), b"".join(lines[cut:]), run1, run2


def _strip(messages: list[Any]) -> list[Any]:
    return [_strip_one(m) for m in messages]


@dataclasses.dataclass
class _Options:  # what Observer reads of ClaudeAgentOptions
    resume: str | None = None
    env: dict[str, str] = dataclasses.field(default_factory=dict)


def test_synced_copy_resumed_matches_new_lines_only(tmp_path: Path) -> None:
    """A resumed session whose file was synced from another machine is read from offset 0: its
    old lines (even with timestamps that look new: the other machine's clock) are history, never
    taken for a new message, also when only the content signature is there to match by."""
    fx, target, old, new, run1, run2 = _split_resume_fixture(tmp_path)
    target.write_bytes(old)
    sid = fx.session_ids[0]
    obs = Observer(_Options(resume=sid), roots=[str(tmp_path)], traces=None, clock=lambda: 0, raw_timeout_s=0.05)
    with open(target, "ab") as f:
        f.write(new)
    index = line_index(fx.config_dir)

    # run 1's messages presented again, without uuids: their lines are history
    again = _run(_observe(obs, _strip(run1)))
    assert all(m.raw is None for m in again)
    assert obs.stats.history_skipped > 0 and obs.stats.by_signature == 0
    # run 2's messages, by signature alone: run 2's lines
    got = _run(_observe(obs, _strip(run2)))
    matched = [(m, orig) for m, orig in zip(got, run2, strict=True) if wanted_of(orig) is not None]
    assert matched and all(m.raw == index[_uuid(orig)] for m, orig in matched)
    new_uuids = {json.loads(ln)["uuid"] for ln in new.splitlines() if b'"uuid"' in ln}
    assert all(m.raw["uuid"] in new_uuids for m, _ in matched)


def test_history_by_timestamp_without_resume_option(tmp_path: Path) -> None:
    """Without ``resume`` (``continue_conversation``: the id is not known up front), lines older
    than the observer's start are history."""
    fx, target, old, new, run1, run2 = _split_resume_fixture(tmp_path)
    target.write_bytes(old + new)
    start = parse_timestamp(json.loads(new.splitlines()[0])["timestamp"])  # run 2's first line
    assert start is not None
    obs = Observer(roots=[str(tmp_path)], traces=None, clock=lambda: start, raw_timeout_s=0.05)
    assert all(m.raw is None for m in _run(_observe(obs, _strip(run1))))
    got = _run(_observe(obs, _strip(run2)))
    assert sum(m.raw is not None for m in got) == sum(wanted_of(m) is not None for m in run2)


# -- the bounded queue and the signature -----------------------------------------------------


def test_unclaimed_lines_wait_in_a_bounded_queue() -> None:
    fx = load_fixture("s03_parallel_subagents", version="2.1.330")
    matcher = Matcher([str(fx.config_dir)], 0, max_unmatched=5)
    matcher.watch(fx.session_ids[0])
    matcher.refresh()
    read_order = [*fx.main_transcripts, *sorted(fx.subagent_transcripts)]  # as SessionFiles lists them
    conversation = [o for p in read_order for o in fx.lines(p)
                    if o.get("type") in ("user", "assistant", "system") and "uuid" in o]
    assert matcher.stats.queued == 5
    assert matcher.stats.evicted == len(conversation) - 5
    last, first = conversation[-1], conversation[0]
    assert matcher.take(Wanted(last["type"], last["uuid"], None, None)) == last  # the newest stayed
    assert matcher.take(Wanted(first["type"], first["uuid"], None, None), final=True) is None  # let go


def test_unclaimed_lines_are_bounded_in_bytes_too() -> None:
    """Lines can be large (s09: thinking and a big tool output, up to 57 KB a line): the queue is
    bounded in bytes as well; a line larger than the bound alone stays only while it is the newest."""
    fx = load_fixture("s09_thinking_big_output", version="2.1.330")
    bound = 32 << 10
    matcher = Matcher([str(fx.config_dir)], 0, max_unmatched_bytes=bound)
    matcher.watch(fx.session_ids[0])
    matcher.refresh()
    lines = [ln for p in fx.transcripts for ln in p.read_bytes().splitlines()]
    conversation = [json.loads(ln) for ln in lines if json.loads(ln).get("type") in ("user", "assistant", "system")]
    big = [o for o, ln in zip(conversation, [ln for ln in lines if json.loads(ln).get("type") in
                                             ("user", "assistant", "system")], strict=True) if len(ln) > bound]
    assert big and matcher.stats.evicted >= len(big) - 1 and matcher.stats.queued > 0
    assert matcher._held_bytes <= bound or matcher.stats.queued == 1
    for o in big:
        if o is not conversation[-1]:
            assert matcher.take(Wanted(o["type"], o["uuid"], None, None), final=True) is None


def test_signature_rules() -> None:
    assert normalise("  a\n\tb  c ") == "a b c"
    long_a, long_b = "x" * 200 + "tail one", "x" * 200 + "tail two"
    assert content_signature(long_a) == content_signature([{"type": "text", "text": long_b}])  # first 200
    assert content_signature("one  two") == content_signature([{"type": "text", "text": "one two\n"}])
    assert content_signature([{"type": "thinking", "thinking": "one"}]) != content_signature("one")
    assert content_signature([{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}]) == "tool_use:toolu_1"
    assert content_signature([{"type": "tool_result", "tool_use_id": "toolu_1"}]) == "tool_result:toolu_1"
    assert content_signature([]) is None


def test_sdk_messages_take_an_attribute() -> None:
    """The SDK's message classes are plain dataclasses (not frozen, not slotted): ``.raw`` is set
    on the SDK's own objects. If a later SDK slots them, pairs() still hands the lines out."""
    for cls in (claude_agent_sdk.AssistantMessage, claude_agent_sdk.UserMessage, claude_agent_sdk.SystemMessage,
                claude_agent_sdk.ResultMessage):
        assert not hasattr(cls, "__slots__") and not cls.__dataclass_params__.frozen  # type: ignore[union-attr]

    @dataclasses.dataclass(slots=True)
    class Slotted:
        uuid: str
        content: str = "hi"
        parent_tool_use_id: None = None

    Slotted.__name__ = "UserMessage"

    async def pairs(obs: Observer) -> list[Any]:
        async def gen() -> Any:
            yield Slotted("u1")
        return [p async for p in obs.pairs(gen())]

    fx = load_fixture("s01_bash_tool", version="2.1.330")
    (pair,) = _run(pairs(Observer(roots=[str(fx.config_dir)], traces=None, raw_timeout_s=0.01)))
    assert pair[1] is None and not hasattr(pair[0], "raw")


# -- live spans --------------------------------------------------------------------------------


def _ids(spans: Any) -> set[tuple[int, int, int | None, str]]:
    return {(s.trace_id, s.span_id, s.parent_span_id, s.name) for s in spans}


@pytest.mark.parametrize("name", ["2.1.330-s03_parallel_subagents", "2.1.330-s04_background_subagent",
                                  "2.1.330-s05_nested_subagent", "s03_parallel_subagents",
                                  "2.1.332-s03_parallel_subagents", "2.1.332-s04_background_subagent"])
def test_spans_have_the_sidecars_ids(name: str) -> None:
    """The observer's spans (the real pipeline in its thread, then closed) have the ids and
    parents the sidecar's pipeline builds from the same transcripts."""
    fx = load_fixture(name)
    sink = MemorySink()
    obs = Observer(roots=[str(fx.config_dir)], traces=sink, clock=lambda: 0, raw_timeout_s=0.01, poll_interval_s=0.01)
    _run(_observe(obs, _messages(fx)))
    assert obs.close(timeout_s=5.0)
    sidecar: list[Any] = []
    Pipeline(Options(roots=(str(fx.config_dir),)), emit=sidecar.extend).backfill(close_all=True)
    assert len(sink.spans) == len(sidecar) and _ids(sink.spans) == _ids(sidecar)


def test_spans_of_a_resumed_session_are_its_new_turns(tmp_path: Path) -> None:
    """Resumed: the turns before the observer started are not exported again; the new turn's
    spans are the sidecar's."""
    fx, target, old, new, _run1, run2 = _split_resume_fixture(tmp_path)
    target.write_bytes(old + new)
    start = parse_timestamp(json.loads(new.splitlines()[0])["timestamp"])  # run 2's first line
    assert start is not None
    sink = MemorySink()
    obs = Observer(roots=[str(tmp_path)], traces=sink, clock=lambda: start, raw_timeout_s=0.01)
    _run(_observe(obs, run2))
    assert obs.close(timeout_s=5.0)
    sidecar: list[Any] = []
    Pipeline(Options(roots=(str(tmp_path),)), emit=sidecar.extend).backfill(close_all=True)
    roots = [s for s in sidecar if s.parent_span_id is None]
    assert len(roots) == 2  # two turns in the file
    new_trace = max(roots, key=lambda s: s.start_ns).trace_id
    assert sink.spans and _ids(sink.spans) == _ids(s for s in sidecar if s.trace_id == new_trace)
