"""Backfill the real-CLI fixtures into a real Phoenix server over OTLP and read the spans back.

The expected tree comes from the fake API's ground truth (what it really sent), not from
ccotel's parser: one chat span per API response with its exact usage, one tool span per
tool_use under its chat span, subagents under their Agent/Task tool span, the orphan in ERROR.
"""

from __future__ import annotations

from collections import Counter

import pytest

from ccotel.export.sinks import ExportQueue, OtlpSink
from ccotel.run.pipeline import Options, Pipeline
from ccotel.spans.content import ContentPolicy
from tests.harness.fixtures import list_fixtures, load_fixture
from tests.support.fixtures import phoenix  # noqa: F401

pytestmark = pytest.mark.phoenix

TASK_TOOLS = {"Task", "Agent"}


def export_fixture(name: str, server, protocol: str = "http/protobuf", content: ContentPolicy | None = None) -> int:
    fx = load_fixture(name)
    endpoint = server.otlp_http_endpoint if protocol == "http/protobuf" else server.otlp_grpc_endpoint
    env = {
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint,
        "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={project_of(name, protocol)}",
    }
    queue = ExportQueue(OtlpSink(env))
    pipeline = Pipeline(Options(roots=(str(fx.config_dir),), content=content), emit=queue.submit)
    pipeline.backfill(close_all=True)
    assert queue.close(timeout_s=60), "Phoenix did not take every span"
    assert queue.failures == 0
    return pipeline.stats.spans


def project_of(name: str, protocol: str) -> str:
    return f"{name}-{'grpc' if protocol == 'grpc' else 'http'}"


def api_responses(fx) -> list[dict]:
    """Responses the fake API sent that Claude Code wrote into the transcripts."""
    return [r for r in fx.ground_truth if r.get("endpoint") == "messages" and r.get("matched")
            and r.get("status") == 200 and r.get("expect_in_transcript", True)]


def check_tree(name: str, spans: list[dict]) -> None:
    fx = load_fixture(name)
    by_id = {s["span_id"]: s for s in spans}
    assert len(by_id) == len(spans), "a span id was stored twice"
    # every parent is there, and every trace has exactly one root: the turn
    for s in spans:
        assert s["parent_id"] is None or s["parent_id"] in by_id, s["name"]
    roots = Counter(s["trace_id"] for s in spans if s["parent_id"] is None)
    assert set(roots.values()) == {1}
    assert {by_id[s["span_id"]]["trace_id"] for s in spans} == set(roots)
    for s in spans:
        if s["parent_id"] is None:
            assert s["name"] == "invoke_agent claude-code"
            assert s["attributes"]["gen_ai.conversation.id"] in fx.session_ids
            # what tells turns apart in Phoenix's list: the project (metadata column and filter); the
            # prompt (the input column) only with content capture, which export_fixture does not ask
            a = s["attributes"]
            assert a["metadata.project"] == a["claude_code.project"] == a["claude_code.cwd"].rsplit("/", 1)[-1]
            assert "input.value" not in a

    chats = {s["attributes"]["gen_ai.response.id"]: s for s in spans
             if s["name"].startswith("chat") and s["status_code"] != "ERROR"
             and not s["attributes"].get("claude_code.advisor")}
    sent = api_responses(fx)
    assert sorted(chats) == sorted(r["message_id"] for r in sent), "one chat span per API response"
    # an advisor consulted during a response: a chat span of its own model under that response's span
    advisors = [s for s in spans if s["attributes"].get("claude_code.advisor")]
    expected = [(r["message_id"], it) for r in sent for it in r.get("iterations") or []
                if it.get("type") == "advisor_message"]
    assert len(advisors) == len(expected)
    for mid, it in expected:
        found = [s for s in advisors if s["parent_id"] == chats[mid]["span_id"]]
        assert len(found) == 1 and found[0]["name"] == f"chat {it['model']}"
        assert found[0]["attributes"]["gen_ai.usage.output_tokens"] == it["output_tokens"]
        assert found[0]["attributes"]["claude_code.usage.input_tokens"] == it["input_tokens"]
    main_conversations = {r["conversation"] for r in sent if r["assistant_turns_in_request"] == 0
                          and not any(r["conversation"] == o.get("agent_prompt") for o in sent)}
    for r in sent:
        span = chats[r["message_id"]]
        a, u = span["attributes"], r["usage"]
        assert span["name"] == f"chat {r['model']}"
        assert a["gen_ai.usage.output_tokens"] == u["output_tokens"]
        assert a["gen_ai.usage.input_tokens"] == (u["input_tokens"] + u["cache_read_input_tokens"]
                                                  + u["cache_creation_input_tokens"])
        assert a["gen_ai.usage.cache_read.input_tokens"] == u["cache_read_input_tokens"]
        assert a["gen_ai.usage.cache_creation.input_tokens"] == u["cache_creation_input_tokens"]
        assert a["claude_code.usage.input_tokens"] == u["input_tokens"]
        assert a["claude_code.request_id"] == r["request_id"]
        assert a["gen_ai.provider.name"] == "anthropic"
        assert span["span_kind"] in ("LLM", "CLIENT", "UNKNOWN")
        parent = by_id[span["parent_id"]]
        assert parent["name"].startswith("invoke_agent")
        for block in r["blocks"]:
            if block["type"] != "tool_use":
                continue
            tools = [s for s in spans if s["name"].startswith("execute_tool")
                     and s["attributes"]["gen_ai.tool.call.id"] == block["id"]]
            assert len(tools) == 1, f"one tool span for {block['id']}"
            tool = tools[0]
            assert tool["name"] == f"execute_tool {block['name']}"
            assert tool["parent_id"] == span["span_id"]
            assert tool["trace_id"] == span["trace_id"]
    # subagent chats hang under invoke_agent {type} under the Agent/Task tool span that spawned them
    for r in sent:
        span = chats[r["message_id"]]
        parent = by_id[span["parent_id"]]
        if parent["parent_id"] is None:
            continue
        tool = by_id[parent["parent_id"]]
        assert tool["name"].split(" ", 1)[1] in TASK_TOOLS, tool["name"]
        assert parent["attributes"].get("claude_code.agent_id")
    assert main_conversations  # the scenario had a main conversation


@pytest.fixture(scope="module")
def phoenix_per_version(phoenix):  # noqa: F811
    """A Phoenix per Claude Code version: the fake API answers each version's scenarios with the same
    message ids, so their chat span ids are equal, and Phoenix ignores a span id it already has."""
    from tests.support.phoenix import PhoenixServer

    servers = {"2.1.197": phoenix}
    yield lambda version: servers.get(version) or servers.setdefault(version, PhoenixServer().start())
    for server in servers.values():
        if server is not phoenix:
            server.stop()


@pytest.mark.parametrize("name", list_fixtures())
def test_fixture_tree_in_phoenix(phoenix_per_version, name):
    fx = load_fixture(name)
    phoenix = phoenix_per_version(fx.version)
    n = export_fixture(name, phoenix)
    spans = phoenix.wait_for_spans(n, project_of(name, "http/protobuf"), timeout=60, exact=True)
    check_tree(name, spans)
    if fx.scenario.startswith("s06"):
        killed = [s for s in spans if s["name"].startswith("execute_tool") and s["status_code"] == "ERROR"]
        assert len(killed) == 1
        # before the repair era a dead branch (orphaned); 2.1.3xx repairs it on resume (interrupted)
        repaired = killed[0]["attributes"].get("claude_code.tool.repaired") is True
        assert killed[0]["attributes"]["error.type"] == ("interrupted" if repaired else "orphaned")
        assert repaired == (fx.version != "2.1.197")
    if fx.scenario.startswith(("s03", "s05")):
        assert sum(1 for s in spans if s["name"].startswith("invoke_agent") and s["parent_id"]) >= 2


def test_grpc_export_to_a_fresh_phoenix_gives_the_same_ids(phoenix):  # noqa: F811 (installed check)
    # A fresh server: Phoenix files a trace id under the first project it saw it in and
    # ignores re-sent span ids, so the shared server cannot show a second delivery.
    from tests.support.phoenix import PhoenixServer

    name = "s03_parallel_subagents"
    with PhoenixServer() as server:
        n = export_fixture(name, server, protocol="grpc")
        spans = server.wait_for_spans(n, project_of(name, "grpc"), timeout=60, exact=True)
    check_tree(name, spans)
    expected: list = []
    Pipeline(Options(roots=(str(load_fixture(name).config_dir),)), emit=expected.extend).backfill(close_all=True)
    key = lambda s: (s["trace_id"], s["span_id"], s["parent_id"], s["name"])  # noqa: E731
    assert sorted(map(key, spans)) == sorted(
        (f"{s.trace_id:032x}", f"{s.span_id:016x}", f"{s.parent_span_id:016x}" if s.parent_span_id else None, s.name)
        for s in expected)


def test_with_content_capture_phoenix_lists_each_turn_by_its_prompt(phoenix):  # noqa: F811 (installed check)
    """Phoenix's trace list shows a root's ``input.value``: with capture, each turn's prompt as it was
    given to ``claude -p``; every root is still named ``invoke_agent claude-code``."""
    from tests.support.phoenix import PhoenixServer

    name = "s02_resume_two_turns"
    with PhoenixServer() as server:
        n = export_fixture(name, server, content=ContentPolicy())
        spans = server.wait_for_spans(n, project_of(name, "http/protobuf"), timeout=60, exact=True)
    roots = sorted((s for s in spans if s["parent_id"] is None), key=lambda s: s["start_time"])
    meta = load_fixture(name).meta
    prompts = [run["argv"][run["argv"].index("-p") + 1] for run in meta["runs"]]
    assert [r["attributes"]["input.value"] for r in roots] == prompts
    assert len(set(prompts)) == len(prompts) == 2
    assert {r["attributes"]["metadata.project"] for r in roots} == {meta["cwd"].rsplit("/", 1)[-1]}
    assert {r["name"] for r in roots} == {"invoke_agent claude-code"}
