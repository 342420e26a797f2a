"""Plain-JSON checks of what Claude Code wrote against the fake API's ground truth.

No ccotel code is used here on purpose: these checks are the independent reading that ccotel's
parser is later compared with. Each check returns a list of problems (strings); empty means OK.

:class:`Evidence` is what a check looks at; it is built from a live
:class:`~tests.harness.scenarios.ScenarioResult` (:func:`evidence_from_result`) or from a
committed fixture (:meth:`tests.harness.fixtures.Fixture.evidence`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .install import OLDEST

__all__ = ["Evidence", "TranscriptFile", "read_jsonl", "transcript_files", "check_ground_truth",
           "check_tool_pairs", "check_scenario", "SCENARIO_CHECKS", "evidence_from_result"]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every JSON object of a JSONL file (blank lines skipped; a bad line raises)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out


@dataclass
class TranscriptFile:
    path: Path
    rel: str  # relative to the config dir
    lines: list[dict[str, Any]]

    @property
    def is_subagent(self) -> bool:
        return "/subagents/" in self.rel

    @property
    def agent_id(self) -> str | None:
        name = self.path.name
        if self.is_subagent and name.startswith("agent-") and name.endswith(".jsonl"):
            return name[len("agent-"):-len(".jsonl")]
        return None

    @property
    def meta(self) -> dict[str, Any] | None:
        p = self.path.with_name(self.path.name[:-len(".jsonl")] + ".meta.json")
        return json.loads(p.read_text()) if p.exists() else None


def transcript_files(config_dir: Path) -> list[TranscriptFile]:
    root = config_dir / "projects"
    return [TranscriptFile(p, p.relative_to(config_dir).as_posix(), read_jsonl(p))
            for p in sorted(root.rglob("*.jsonl"))] if root.is_dir() else []


@dataclass
class Evidence:
    """Everything a check may look at."""

    name: str
    config_dir: Path
    ground_truth: list[dict[str, Any]]
    runs: list[dict[str, Any]]  # {label, returncode, killed, timed_out, records: [stream-json dicts]}
    notes: dict[str, Any] = field(default_factory=dict)
    snapshots: dict[str, Path] = field(default_factory=dict)  # label -> config-dir-like root
    version: str = OLDEST  # the Claude Code version that wrote it

    @property
    def newer(self) -> bool:
        """Written by a version after 2.1.197 (the behaviours this file tells apart changed there)."""
        return self.version != OLDEST

    @property
    def files(self) -> list[TranscriptFile]:
        return transcript_files(self.config_dir)

    def assistant_lines(self) -> list[tuple[TranscriptFile, dict[str, Any]]]:
        return [(f, ln) for f in self.files for ln in f.lines if ln.get("type") == "assistant"]

    def gt_messages(self) -> list[dict[str, Any]]:
        return [r for r in self.ground_truth if r.get("endpoint") == "messages"]

    def gt_by_rule(self, rule: str) -> list[dict[str, Any]]:
        return [r for r in self.gt_messages() if r.get("rule") == rule]

    def main_files(self) -> list[TranscriptFile]:
        return [f for f in self.files if not f.is_subagent]

    def subagent_files(self) -> list[TranscriptFile]:
        return [f for f in self.files if f.is_subagent]


def evidence_from_result(result: Any) -> Evidence:
    """Evidence from a live ScenarioResult."""
    runs = [{"label": label, "returncode": r.returncode, "killed": r.killed, "timed_out": r.timed_out,
             "records": r.records} for label, r in result.runs]
    snaps_root = result.sandbox.root / "snapshots"
    snaps = {p.name: p for p in sorted(snaps_root.iterdir())} if snaps_root.is_dir() else {}
    return Evidence(name=result.scenario.name, config_dir=result.sandbox.config_dir,
                    ground_truth=read_jsonl(result.ground_truth), runs=runs, notes=result.notes, snapshots=snaps,
                    version=result.sandbox.version)


# --------------------------------------------------------------------------- generic checks

USAGE_KEYS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def check_ground_truth(ev: Evidence) -> list[str]:
    """Every delivered ground-truth response is in the transcripts with the same ids, usage, model,
    stop_reason and content blocks; every real (non-synthetic) transcript message is in the ground truth."""
    problems: list[str] = []
    by_id: dict[str, list[tuple[TranscriptFile, dict[str, Any]]]] = {}
    for f, ln in ev.assistant_lines():
        mid = (ln.get("message") or {}).get("id")
        by_id.setdefault(mid, []).append((f, ln))
    gt_ids = {r["message_id"]: r for r in ev.gt_messages() if r.get("message_id")}

    for r in ev.gt_messages():
        if r.get("status") != 200:
            if r.get("message_id") and r["message_id"] in by_id:
                problems.append(f"error response {r['seq']} has a message id in the transcripts")
            continue
        mid = r["message_id"]
        lines = by_id.get(mid, [])
        if not r.get("expect_in_transcript", True):
            if lines:
                problems.append(f"{mid} ({r['rule']}) was expected NOT to be recorded, found {len(lines)} lines")
            continue
        if not r.get("matched"):
            continue  # side calls: the CLI may or may not record them
        if not lines:
            problems.append(f"{mid} ({r['rule']}) not found in any transcript")
            continue
        where = {f.rel for f, _ in lines}
        # Replays of a message into a resumed session stay in one file here; more files is a finding.
        if len(where) != 1:
            problems.append(f"{mid} appears in several files: {sorted(where)}")
        blocks = []
        for f, ln in lines:
            msg = ln["message"]
            if ln.get("requestId") != r["request_id"]:
                problems.append(f"{mid}: requestId {ln.get('requestId')!r} != {r['request_id']!r} ({f.rel})")
            usage = msg.get("usage") or {}
            got = {k: usage.get(k) for k in USAGE_KEYS}
            if got != r["usage"]:
                problems.append(f"{mid}: usage {got} != ground truth {r['usage']}")
            cc = usage.get("cache_creation") or {}
            if sum(cc.get(k, 0) for k in ("ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens")) \
                    != r["usage"]["cache_creation_input_tokens"]:
                problems.append(f"{mid}: cache_creation {cc} does not add up to cache_creation_input_tokens")
            if msg.get("model") != r["model"]:
                problems.append(f"{mid}: model {msg.get('model')!r} != {r['model']!r}")
            if r.get("iterations") and usage.get("iterations") != r["iterations"]:
                problems.append(f"{mid}: usage.iterations {usage.get('iterations')} != ground truth {r['iterations']}")
            if "requestedModel" in ln and r.get("requested_model") and ln["requestedModel"] != r["requested_model"]:
                problems.append(f"{mid}: requestedModel {ln['requestedModel']!r} != requested {r['requested_model']!r}")
            if msg.get("stop_reason") != r["stop_reason"]:
                problems.append(f"{mid}: stop_reason {msg.get('stop_reason')!r} != {r['stop_reason']!r}")
            for b in msg.get("content") or []:
                blocks.append({k: v for k, v in (("type", b.get("type")), ("id", b.get("id")),
                                                 ("name", b.get("name"))) if v is not None})
        if blocks != r["blocks"]:
            problems.append(f"{mid}: blocks {blocks} != ground truth {r['blocks']}")
        if len({ln['uuid'] for _, ln in lines}) != len(lines):
            problems.append(f"{mid}: duplicate uuids")

    for mid, lines in by_id.items():
        msg = lines[0][1]["message"]
        if msg.get("model") == "<synthetic>":
            continue
        if mid not in gt_ids:
            problems.append(f"transcript message {mid} is not in the ground truth")
    return problems


def tool_uses(ev: Evidence) -> dict[str, tuple[TranscriptFile, dict[str, Any], dict[str, Any]]]:
    out = {}
    for f, ln in ev.assistant_lines():
        for b in (ln.get("message") or {}).get("content") or []:
            if b.get("type") == "tool_use":
                out[b["id"]] = (f, ln, b)
    return out


def tool_results(ev: Evidence) -> dict[str, list[tuple[TranscriptFile, dict[str, Any], dict[str, Any]]]]:
    out: dict[str, list] = {}
    for f in ev.files:
        for ln in f.lines:
            if ln.get("type") != "user":
                continue
            content = (ln.get("message") or {}).get("content")
            if not isinstance(content, list):
                continue
            for b in content:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    out.setdefault(b["tool_use_id"], []).append((f, ln, b))
    return out


def check_tool_pairs(ev: Evidence, orphans: set[str] = frozenset()) -> list[str]:
    """Every tool_use has exactly one tool_result in the same file (except the expected ``orphans``),
    and ``sourceToolAssistantUUID`` names the tool_use line."""
    problems = []
    uses, results = tool_uses(ev), tool_results(ev)
    for tid, (f, ln, _b) in uses.items():
        res = results.get(tid, [])
        if tid in orphans:
            if res:
                problems.append(f"{tid} should be an orphan but has {len(res)} tool_result(s)")
            continue
        if len(res) != 1:
            problems.append(f"tool_use {tid} has {len(res)} tool_results")
            continue
        rf, rln, _ = res[0]
        if rf.rel != f.rel:
            problems.append(f"tool_result of {tid} is in {rf.rel}, tool_use in {f.rel}")
        if rln.get("sourceToolAssistantUUID") != ln["uuid"]:
            problems.append(f"{tid}: sourceToolAssistantUUID {rln.get('sourceToolAssistantUUID')} != {ln['uuid']}")
    for tid in results:
        if tid not in uses:
            problems.append(f"tool_result for unknown tool_use {tid}")
    for tid in orphans:
        if tid not in uses:
            problems.append(f"expected orphan {tid} not found")
    return problems


def check_common(ev: Evidence) -> list[str]:
    """Line-level invariants of 2.1.197 transcripts."""
    problems = []
    if not ev.files:
        return ["no transcript files"]
    session_ids = {ln.get("sessionId") for f in ev.main_files() for ln in f.lines if ln.get("sessionId")}
    for f in ev.files:
        uuids = [ln["uuid"] for ln in f.lines if "uuid" in ln]
        if len(uuids) != len(set(uuids)):
            problems.append(f"{f.rel}: duplicate uuid")
        known = set(uuids)
        for ln in f.lines:
            if "uuid" not in ln:
                continue
            p = ln.get("parentUuid")
            if p is not None and p not in known:
                problems.append(f"{f.rel}: parentUuid {p} of {ln['uuid']} not in the file")
            if f.is_subagent:
                if ln.get("isSidechain") is not True or ln.get("agentId") != f.agent_id:
                    problems.append(f"{f.rel}: line {ln['uuid']} lacks isSidechain/agentId")
                if ln.get("sessionId") not in session_ids:
                    problems.append(f"{f.rel}: sessionId {ln.get('sessionId')} is not the parent's")
            elif ln.get("isSidechain") is not False:
                problems.append(f"{f.rel}: main line {ln['uuid']} has isSidechain {ln.get('isSidechain')}")
        if f.is_subagent:
            meta = f.meta
            if meta is None:
                problems.append(f"{f.rel}: no meta.json")
            first = next((ln for ln in f.lines if "uuid" in ln), None)
            if first is None or first.get("type") != "user" or first.get("parentUuid") is not None:
                problems.append(f"{f.rel}: first line is not a root user line")
    return problems


# --------------------------------------------------------------------------- scenario checks


def _main_human_prompts(f: TranscriptFile) -> list[dict[str, Any]]:
    return [ln for ln in f.lines
            if ln.get("type") == "user" and isinstance((ln.get("message") or {}).get("content"), str)
            and not ln.get("isMeta") and not ln.get("isCompactSummary")]


def _tool_ids(ev: Evidence, rule: str) -> list[str]:
    return [b["id"] for r in ev.gt_by_rule(rule) for b in r["blocks"] if b["type"] == "tool_use"]


def _result_line(ev: Evidence, tool_id: str) -> dict[str, Any] | None:
    res = tool_results(ev).get(tool_id) or []
    return res[0][1] if res else None


def _one(items: list[Any], what: str, problems: list[str]) -> Any:
    if len(items) != 1:
        problems.append(f"expected exactly one {what}, got {len(items)}")
        return None
    return items[0]


def _check_s01(ev: Evidence) -> list[str]:
    p: list[str] = []
    tid = _one(_tool_ids(ev, "s01.bash"), "Bash tool_use", p)
    ln = _result_line(ev, tid) if tid else None
    if ln is None or (ln.get("toolUseResult") or {}).get("stdout") != "hello":
        p.append("Bash result is not 'hello'")
    _one(ev.main_files(), "main transcript", p)
    return p


def _check_s02(ev: Evidence) -> list[str]:
    p: list[str] = []
    f = _one(ev.main_files(), "session file (resume appends to it)", p)
    if f is not None:
        prompts = [ln["message"]["content"] for ln in _main_human_prompts(f)]
        if prompts != [x for x in prompts if x.startswith("S02")] or len(prompts) != 2:
            p.append(f"expected the two S02 prompts, got {prompts}")
    if len({r["session_id"] for r in _results(ev)}) != 1:
        p.append("the two runs should report one session id")
    return p


def _results(ev: Evidence) -> list[dict[str, Any]]:
    return [r for run in ev.runs for r in run["records"] if r.get("type") == "result"]


def _check_agents(ev: Evidence, spawn_rule: str, depth: int) -> tuple[list[str], dict[str, TranscriptFile]]:
    """Each Agent tool_use of ``spawn_rule`` has a subagent file whose meta names it; returns tool id -> file."""
    p: list[str] = []
    by_tool: dict[str, TranscriptFile] = {}
    metas = {f.meta.get("toolUseId"): f for f in ev.subagent_files() if f.meta}
    for tid in _tool_ids(ev, spawn_rule):
        f = metas.get(tid)
        if f is None:
            p.append(f"no subagent meta.json with toolUseId {tid}")
            continue
        by_tool[tid] = f
        meta = f.meta or {}
        if meta.get("spawnDepth") != depth or meta.get("agentType") != "general-purpose":
            p.append(f"{f.rel}: meta {meta} (expected spawnDepth {depth}, general-purpose)")
        res = _result_line(ev, tid) or {}
        # Main file: toolUseResult.agentId. Subagent files carry no toolUseResult on success (2.1.197):
        # there the id is only in the tool_result text ("agentId: <id> (use SendMessage ...").
        tur = res.get("toolUseResult")
        if isinstance(tur, dict) and "agentId" in tur:
            got = tur["agentId"]
        else:
            m = re.search(r"agentId: (\w+)", json.dumps((res.get("message") or {}).get("content")))
            got = m.group(1) if m else None
        if got != f.agent_id:
            p.append(f"Agent result {tid}: agentId {got} != file {f.agent_id}")
        first = f.lines[0]
        use = tool_uses(ev)[tid][2]
        if first.get("message", {}).get("content") != use["input"]["prompt"]:
            p.append(f"{f.rel}: first line is not the Agent prompt")
    return p, by_tool


def _check_s03(ev: Evidence) -> list[str]:
    p, by_tool = _check_agents(ev, "s03.main.spawn", 1)
    if len(ev.subagent_files()) != 2:
        p.append(f"expected 2 subagent files, got {len(ev.subagent_files())}")
    expected = {"S03-ALPHA": {"s03.alpha.bash", "s03.alpha.final"}, "S03-BETA": {"s03.beta.bash", "s03.beta.final"}}
    for f in by_tool.values():
        ids = {(ln.get("message") or {}).get("id") for ln in f.lines if ln.get("type") == "assistant"}
        tag = "S03-ALPHA" if "S03-ALPHA" in f.lines[0]["message"]["content"] else "S03-BETA"
        want = {r["message_id"] for rule in expected[tag] for r in ev.gt_by_rule(rule)}
        if ids != want:
            p.append(f"{f.rel}: message ids {ids} != {want}")
    # parallel: both subagents' first API requests were answered before either finished
    seqs = {r["rule"]: r["seq"] for r in ev.gt_messages()}
    if not (seqs.get("s03.alpha.bash", 99) < seqs.get("s03.beta.final", 0)
            and seqs.get("s03.beta.bash", 99) < seqs.get("s03.alpha.final", 0)):
        p.append(f"subagents did not overlap: {seqs}")
    # foreground (2.1.330: run_in_background false): the main file's result is the finished agent's
    for tid in by_tool:
        tur = (_result_line(ev, tid) or {}).get("toolUseResult") or {}
        if tur.get("status") != "completed":
            p.append(f"Agent result {tid}: status {tur.get('status')!r}, expected 'completed' (foreground)")
    return p


def _check_s04(ev: Evidence) -> list[str]:
    p, by_tool = _check_agents(ev, "s04.main.spawn", 1)
    tid = _one(_tool_ids(ev, "s04.main.spawn"), "background Agent call", p)
    if tid:
        tur = (_result_line(ev, tid) or {}).get("toolUseResult") or {}
        if tur.get("status") != "async_launched" or tur.get("isAsync") is not True:
            p.append(f"background Agent result: {tur.get('status')}, isAsync {tur.get('isAsync')}")
        use = tool_uses(ev).get(tid)
        if ev.newer and use is not None and "run_in_background" in use[2]["input"]:
            p.append("2.1.330 s04 should launch with the default (no run_in_background in the input)")
        meta = by_tool[tid].meta if tid in by_tool else None
        if ev.newer and (meta or {}).get("requestShape") != "background":
            p.append(f"2.1.330 background agent meta.json requestShape {(meta or {}).get('requestShape')!r}")
    main = _one(ev.main_files(), "main file", p)
    if main is not None and tid in by_tool:
        after = [ln for ln in main.lines if (ln.get("message") or {}).get("id") in
                 {r["message_id"] for r in ev.gt_by_rule("s04.main.after_launch")}]
        sub_last = [ln for ln in by_tool[tid].lines if ln.get("type") == "assistant"][-1]
        if not after or not sub_last["timestamp"] > after[-1]["timestamp"]:
            p.append("the background subagent did not finish after the main turn's answer")
        notes = [ln for ln in main.lines if ln.get("type") == "user" and
                 "<task-notification>" in json.dumps((ln.get("message") or {}).get("content"))]
        if len(notes) != 1:
            p.append(f"expected one <task-notification> user line, got {len(notes)}")
    return p


def _check_s05(ev: Evidence) -> list[str]:
    p, outer = _check_agents(ev, "s05.main.spawn", 1)
    p2, inner = _check_agents(ev, "s05.outer.spawn", 2)
    p += p2
    for tid in _tool_ids(ev, "s05.outer.spawn"):
        f = tool_uses(ev).get(tid, (None,))[0]
        if f is None or not outer or f.rel != next(iter(outer.values())).rel:
            p.append("the inner Agent tool_use is not in the outer subagent's file")
    if len(ev.subagent_files()) != 2:
        p.append(f"expected 2 subagent files, got {len(ev.subagent_files())}")
    return p


def _check_s06(ev: Evidence) -> list[str]:
    """2.1.197: the orphan stays a dead branch; the resumed prompt is parented on the line before it.
    2.1.330: the resume repairs it: an is_error tool_result "[Tool call interrupted: ...]" (toolDenialKind
    "interrupted"), then a <synthetic> "No response requested." line with madeBy "other", and the resumed
    prompt chains on that line. Both: the killed run left the tool_use without result (snapshot after_kill)."""
    p: list[str] = []
    orphan = _one(_tool_ids(ev, "s06.t1.sleep"), "sleep tool_use", p)
    if orphan is None:
        return p
    f, orphan_line, _ = tool_uses(ev)[orphan]
    prompts = [ln for ln in _main_human_prompts(f) if ln["message"]["content"].startswith("S06 second")]
    second = _one(prompts, "resumed S06 prompt", p)
    if not ev.newer:
        p += check_tool_pairs(ev, {orphan})
        children = [ln for ln in f.lines if ln.get("parentUuid") == orphan_line["uuid"]]
        if children:
            p.append(f"orphan line has children: {[c['uuid'] for c in children]}")
        if second is not None and second.get("parentUuid") != orphan_line.get("parentUuid"):
            p.append("the resumed prompt is not parented on the line before the orphaned tool_use")
    else:
        p += check_tool_pairs(ev)
        res = tool_results(ev).get(orphan, [])
        if len(res) != 1:
            p.append(f"the killed tool call has {len(res)} tool_results after the resume (expected the repair)")
        else:
            _, rln, rb = res[0]
            if rb.get("is_error") is not True or not str(rb.get("content")).startswith("[Tool call interrupted"):
                p.append(f"repair tool_result: is_error {rb.get('is_error')}, content {str(rb.get('content'))[:60]!r}")
            if rln.get("parentUuid") != orphan_line["uuid"]:
                p.append("the repair tool_result is not parented on the killed tool_use line")
            synth = [ln for ln in f.lines if ln.get("parentUuid") == rln["uuid"]]
            s_ln = _one(synth, "line after the repair tool_result", p)
            if s_ln is not None:
                msg = s_ln.get("message") or {}
                if (s_ln.get("type"), msg.get("model"), s_ln.get("madeBy")) != ("assistant", "<synthetic>", "other") \
                        or msg.get("content") != [{"type": "text", "text": "No response requested."}]:
                    p.append(f"after the repair: {s_ln.get('type')} {msg.get('model')} madeBy {s_ln.get('madeBy')}")
                if any(v for k, v in (msg.get("usage") or {}).items() if k in USAGE_KEYS):
                    p.append("the synthetic repair line has non-zero usage")
                if second is not None and second.get("parentUuid") != s_ln["uuid"]:
                    p.append("the resumed prompt is not parented on the synthetic 'No response requested.' line")
    runs = {r["label"]: r for r in ev.runs}
    if not runs.get("run1_killed", {}).get("killed"):
        p.append("run 1 was not killed")
    snap = ev.snapshots.get("after_kill")
    if snap is None:
        p.append("no after_kill snapshot")
    else:
        snap_lines = [json.loads(x) for q in sorted((snap / "projects").rglob("*.jsonl"))
                      for x in q.read_text().splitlines() if x.strip()]
        if any(b.get("tool_use_id") == orphan for ln in snap_lines if ln.get("type") == "user"
               for b in ((ln.get("message") or {}).get("content") or []) if isinstance(b, dict)):
            p.append("after the kill the tool_use already had a tool_result")
        sessions = sorted((snap / "sessions").glob("*.json"))
        if len(sessions) != 1:
            p.append(f"after the kill, expected one sessions/<pid>.json, got {len(sessions)}")
        else:
            content = json.loads(sessions[0].read_text())
            if content.get("sessionId") != orphan_line["sessionId"] or f"{content.get('pid')}.json" != sessions[0].name:
                p.append(f"stale sessions file does not name the session: {content}")
            left = sorted(q.name for q in (ev.config_dir / "sessions").glob("*.json")) \
                if (ev.config_dir / "sessions").is_dir() else []
            # 2.1.197: the next CLI start deletes the stale file; 2.1.330 leaves it (and its .key) there.
            want = [sessions[0].name] if ev.newer else []
            if left != want:
                p.append(f"sessions/ after the clean resume run: {left}, expected {want}")
    return p


def _check_s07(ev: Evidence) -> list[str]:
    """400: 2.1.197 sends one request; 2.1.330 retries a 400 with fewer betas (6 requests seen), then
    writes one <synthetic> isApiErrorMessage line naming the last one's request id. 529 then 200:
    2.1.197 leaves no trace in the transcript; 2.1.330 writes a system/api_error line per retry."""
    p: list[str] = []
    errs = ev.gt_by_rule("s07.a.400")
    if not ev.newer:
        _one(errs, "400 response", p)
    elif not errs:
        p.append("no 400 response")
    synth = [ln for _, ln in ev.assistant_lines() if ln.get("isApiErrorMessage")]
    s = _one(synth, "isApiErrorMessage line", p)
    if s is not None and errs:
        if s.get("requestId") != errs[-1]["request_id"] or s.get("apiErrorStatus") != 400:
            p.append(f"API error line: requestId {s.get('requestId')} status {s.get('apiErrorStatus')}")
        if s["message"]["model"] != "<synthetic>":
            p.append("API error line is not <synthetic>")
    err529 = _one(ev.gt_by_rule("s07.b.529"), "529 response", p)
    retries = [r for run in ev.runs for r in run["records"] if r.get("subtype") == "api_retry"]
    r = _one(retries, "stream-json api_retry", p)
    if r is not None and r.get("error_status") != 529:
        p.append(f"api_retry error_status {r.get('error_status')}")
    api_errors = [ln for f in ev.files for ln in f.lines
                  if ln.get("type") == "system" and ln.get("subtype") == "api_error"]
    if not ev.newer and api_errors:
        p.append(f"2.1.197 wrote {len(api_errors)} system/api_error lines")
    if ev.newer:
        a = _one(api_errors, "system/api_error line (2.1.330)", p)
        if a is not None and err529 is not None and ((a.get("error") or {}).get("status"), (a.get("error") or {}).get(
                "requestId"), a.get("retryAttempt")) != (529, err529["request_id"], 1):
            p.append(f"system/api_error line: {a.get('error')} attempt {a.get('retryAttempt')}")
    if not ev.gt_by_rule("s07.b.ok"):
        p.append("no success after the 529")
    return p


def _check_s08(ev: Evidence) -> list[str]:
    p: list[str] = []
    tid = _one(_tool_ids(ev, "s08.bash_fail"), "failing Bash call", p)
    res = tool_results(ev).get(tid or "", [])
    if not res or res[0][2].get("is_error") is not True:
        p.append("the failing Bash call's tool_result is not is_error: true")
    return p


def _check_s09(ev: Evidence) -> list[str]:
    p: list[str] = []
    thinking = [b for _, ln in ev.assistant_lines() for b in ln["message"]["content"] if b.get("type") == "thinking"]
    if len(thinking) != 2 or not all(b.get("signature") for b in thinking):
        p.append(f"expected 2 signed thinking blocks, got {len(thinking)}")
    tid = _one(_tool_ids(ev, "s09.think_bash"), "seq tool_use", p)
    ln = _result_line(ev, tid) if tid else None
    tur = (ln or {}).get("toolUseResult") or {}
    size = tur.get("persistedOutputSize")
    if not isinstance(size, int) or size < 1_000_000:
        p.append(f"persistedOutputSize {size!r}")
    stored = [q for q in (ev.config_dir / "projects").rglob("tool-results/*") if q.is_file()]
    f = _one(stored, "tool-results file", p)
    if f is not None and f.stat().st_size != size:
        p.append(f"tool-results file has {f.stat().st_size} bytes, persistedOutputSize {size}")
    return p


def _check_s10(ev: Evidence) -> list[str]:
    p: list[str] = []
    f = _one(ev.main_files(), "session file", p)
    if f is None:
        return p
    boundary = _one([ln for ln in f.lines if ln.get("subtype") == "compact_boundary"], "compact_boundary", p)
    if boundary is not None:
        uuids = {ln.get("uuid") for ln in f.lines}
        if boundary.get("parentUuid") is not None or boundary.get("logicalParentUuid") not in uuids:
            p.append("compact_boundary: parentUuid not null or logicalParentUuid does not resolve")
        if (boundary.get("compactMetadata") or {}).get("trigger") != "manual":
            p.append("compact trigger is not manual")
    _one([ln for ln in f.lines if ln.get("isCompactSummary")], "isCompactSummary line", p)
    if ev.gt_by_rule("s10.compact.summary") == []:
        p.append("the compaction request never reached the fake API")
    return p


def _check_s11(ev: Evidence) -> list[str]:
    p: list[str] = []
    texts = [json.dumps(ln["message"]["content"]) for f in ev.main_files() for ln in f.lines
             if ln.get("type") == "user"]
    for marker in ("[Request interrupted by user for tool use]", "[Request interrupted by user]\""):
        if not any(marker in t for t in texts):
            p.append(f"no user line with {marker}")
    tid = _one(_tool_ids(ev, "s11.t1.sleep"), "interrupted sleep", p)
    res = tool_results(ev).get(tid or "", [])
    if not res or res[0][2].get("is_error") is not True or res[0][1].get("toolUseResult") != "User rejected tool use":
        p.append("the interrupted tool's result is not an is_error 'User rejected tool use'")
    return p


def _check_s12(ev: Evidence) -> list[str]:
    """Auto compaction: a compact_boundary with trigger "auto" between the tool result and the final
    answer, the summary request reached the API, and the answer came from the compacted conversation."""
    p: list[str] = []
    f = _one(ev.main_files(), "session file", p)
    if f is None:
        return p
    boundary = _one([ln for ln in f.lines if ln.get("subtype") == "compact_boundary"], "compact_boundary", p)
    if boundary is not None:
        if boundary.get("parentUuid") is not None:
            p.append("compact_boundary parentUuid is not null")
        if (boundary.get("compactMetadata") or {}).get("trigger") != "auto":
            p.append(f"compact trigger {(boundary.get('compactMetadata') or {}).get('trigger')!r}, expected 'auto'")
    _one([ln for ln in f.lines if ln.get("isCompactSummary")], "isCompactSummary line", p)
    _one(ev.gt_by_rule("s12.compact.summary"), "auto-compaction request", p)
    final = _one(ev.gt_by_rule("s12.t1.final"), "answer after the compaction", p)
    if final is not None and boundary is not None:
        after = [ln for ln in f.lines if (ln.get("message") or {}).get("id") == final["message_id"]]
        if not after or after[0]["timestamp"] < boundary["timestamp"]:
            p.append("the final answer is not after the compact_boundary")
    return p


def _check_s13(ev: Evidence) -> list[str]:
    """The advisor: one response holds server_tool_use(advisor) + advisor_tool_result blocks, its
    usage.iterations has an advisor_message with the advisor's model (not the response's) and tokens."""
    p: list[str] = []
    r = _one(ev.gt_by_rule("s13.advise_bash"), "advisor response", p)
    if r is None:
        return p
    adv = [it for it in r.get("iterations") or [] if it.get("type") == "advisor_message"]
    a = _one(adv, "advisor_message iteration in the ground truth", p)
    if a is not None:
        if a.get("model") != r["request"].get("advisor_model") or a.get("model") == r["model"]:
            p.append(f"advisor model {a.get('model')!r}: request offered {r['request'].get('advisor_model')!r}, "
                     f"response model {r['model']!r}")
    lines = [ln for _, ln in ev.assistant_lines() if (ln.get("message") or {}).get("id") == r["message_id"]]
    kinds = [b.get("type") for ln in lines for b in ln["message"]["content"]]
    if "server_tool_use" not in kinds or "advisor_tool_result" not in kinds:
        p.append(f"advisor blocks missing from the transcript: {kinds}")
    for ln in lines:
        if (ln["message"].get("usage") or {}).get("iterations") != r.get("iterations"):
            p.append("a line of the advisor response lacks the ground truth's usage.iterations")
            break
    if ev.newer and any(ln.get("advisorModel") != r["request"].get("advisor_model") for ln in lines):
        p.append(f"2.1.330 advisorModel on the lines: {sorted({str(ln.get('advisorModel')) for ln in lines})}")
    return p


def _check_s14(ev: Evidence) -> list[str]:
    """Run 1: the response model differs from the requested one. Run 2: three 529s on the main model,
    then the request goes to the --fallback-model, which answers."""
    p: list[str] = []
    a = _one(ev.gt_by_rule("s14.a.other_model"), "other-model response", p)
    if a is not None:
        if a["model"] == a.get("requested_model"):
            p.append("run 1: response model equals the requested model")
        lines = [ln for _, ln in ev.assistant_lines() if (ln.get("message") or {}).get("id") == a["message_id"]]
        if not lines or any(ln["message"].get("model") != a["model"] for ln in lines):
            p.append("run 1: the transcript does not carry the response's model")
        if ev.newer and any(ln.get("requestedModel") != a.get("requested_model") for ln in lines):
            p.append("run 1: requestedModel missing or wrong on 2.1.330 lines")
    e529 = ev.gt_by_rule("s14.b.529")
    if len(e529) != 3:
        p.append(f"expected three 529s, got {len(e529)}")
    fb = _one(ev.gt_by_rule("s14.b.fallback"), "fallback response", p)
    if fb is not None and e529:
        if fb.get("requested_model") == e529[0]["request"]["model"]:
            p.append(f"run 2: the fallback request still asked for {fb.get('requested_model')!r}")
    notices = [ln for f in ev.files for ln in f.lines if ln.get("subtype") == "model_fallback"]
    if ev.newer:
        n = _one(notices, "system/model_fallback line (2.1.330)", p)
        if n is not None and fb is not None and n.get("fallbackModel") != fb.get("requested_model"):
            p.append(f"model_fallback names {n.get('fallbackModel')!r},"
                     f" the request asked {fb.get('requested_model')!r}")
    return p


SCENARIO_CHECKS: dict[str, Callable[[Evidence], list[str]]] = {
    "s01_bash_tool": _check_s01,
    "s02_resume_two_turns": _check_s02,
    "s03_parallel_subagents": _check_s03,
    "s04_background_subagent": _check_s04,
    "s05_nested_subagent": _check_s05,
    "s06_kill_orphan_resume": _check_s06,
    "s07_api_errors": _check_s07,
    "s08_failing_tool": _check_s08,
    "s09_thinking_big_output": _check_s09,
    "s10_compact": _check_s10,
    "s11_interrupt": _check_s11,
    "s12_auto_compact": _check_s12,
    "s13_advisor": _check_s13,
    "s14_model_fallback": _check_s14,
}


def check_scenario(ev: Evidence) -> list[str]:
    """All checks for one scenario: common invariants, ground truth, tool pairs, scenario specifics."""
    problems = check_common(ev) + check_ground_truth(ev)
    if ev.name != "s06_kill_orphan_resume":  # s06 checks its pairs with the orphan excluded
        problems += check_tool_pairs(ev)
    specific = SCENARIO_CHECKS.get(ev.name)
    if specific is not None:
        problems += specific(ev)
    for run in ev.runs:
        if run.get("timed_out"):
            problems.append(f"run {run['label']} timed out")
    return problems
