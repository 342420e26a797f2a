"""Generate a Claude Code-shaped transcript corpus of a given size, with its exact expected totals.

    python -m bench.corpus --out /tmp/ccotel-bench/1GB --size 1GB --seed 1

Layout (a Claude config dir, docs/format.md section 1):
  <out>/projects/<mangled-cwd>/<session>.jsonl
  <out>/projects/<mangled-cwd>/<session>/subagents/agent-<17 hex>.jsonl   (+ agent-<id>.meta.json)
  <out>/expected.json                                                       what ccotel must report

Shapes (2.1.x, compact JSON with the real files' separators, docs/format.md sections 2-6):
- one API response = one line per content block (thinking, text, each tool_use), same message.id and
  requestId, usage repeated on every line, output_tokens small on the early lines and final on the last;
- tool_use -> tool_result pairs written between the block lines (the next block line is parented on
  the result), with ``toolUseResult`` metadata; result sizes are heavy-tailed (Pareto) up to MBs;
- parallel subagents: several ``Agent`` tool_uses in one response, one subagent file each (with its
  meta.json: agentType/description/toolUseId/spawnDepth), the results (``toolUseResult.agentId``)
  after all of them; a few subagents spawn a nested one (spawnDepth 2);
- dead branches: a turn killed during a tool call leaves an orphaned tool_use, and the resume prompt
  is parented on the line before it;
- thinking blocks, hook progress lines, isMeta reminders, queue-operation and last-prompt lines.

Every number in expected.json is counted while writing: per session the tokens (input, output,
cache creation, cache read, once per API response with its final usage), API calls (= chat spans),
tool calls (= execute_tool spans, orphans included), turns (= root spans), subagents
(= invoke_agent subagent spans) and their sum, the span count. Deterministic by seed.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import re
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import orjson

__all__ = ["GENERATOR_VERSION", "SHAPES", "generate", "parse_size", "load_expected", "LiveAppender", "iso"]

GENERATOR_VERSION = 4
CC_VERSION = "2.1.39"
# shape="2.1.330": the lines Claude Code 2.1.330 writes (tests/fixtures/2.1.330): attachments in the
# chain between a prompt and its first response (environment, skill_listing, prompt_snapshot of
# 4-60 KB, ...), an api-request-shape line (~40 KB, the system prompt and tools) at the start of
# every file, an api-request-blob and an api-request line before each response (named by the
# assistant lines' requestRef), tools-used, atis-latch and cost-state lines; and many small
# subagent files (more turns spawn, more agents each, short subagents).
# shape="agents": the 2.1.330 lines with most of the bytes in small subagent files (most turns spawn
# up to 8 agents of one or two calls each; with a small session mean, ~2,000 files in 200 MB).
SHAPES = ("2.1.39", "2.1.330", "agents")
BASE_MS = 1_748_736_000_000  # 2025-06-01T00:00:00Z: old enough that every turn is finished

MODELS = ("claude-opus-4-6", "claude-opus-4-6", "claude-opus-4-6", "claude-sonnet-4-5-20250929")
SUBAGENT_MODELS = ("claude-haiku-4-5-20251001", "claude-sonnet-4-5-20250929")
AGENT_TYPES = ("general-purpose", "Explore", "Plan")
TOOLS = ("Bash", "Read", "Read", "Grep", "Edit", "Glob")
_B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_WORDS = (
    "def class return import from self value result item items config path file data error "
    "for in if else elif while try except with as None True False async await yield lambda "
    "session turn span trace token usage cache input output model message request response "
    "parse tail assemble export pipeline record entry offset line bytes buffer chunk state "
    "→ é ü 测试 ✓ {} [] () : , . = == != <= >= + - * / % # \" ' \\ \t"
).split(" ")

# Probabilities and sizes (chosen to look like the real transcripts in shared/realdata).
P_THINKING = 0.45
P_TEXT = 0.5
P_SPAWN = 0.10  # a turn runs parallel subagents
P_NESTED = 0.15  # a subagent spawns one of its own
P_KILL = 0.04  # a turn is killed during a tool call (dead branch + resume)
P_TOOL_ERROR = 0.04
P_HOOK = 0.3
P_META = 0.1
RESULT_MIN = 250
RESULT_ALPHA = 1.0
RESULT_CAP = 4 << 20

dumps = orjson.dumps


def parse_size(text: str) -> int:
    """'1GB' -> 10**9, '20MB', '512KiB', '4096' -> bytes."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(?:([kKmMgGtT])(i?)[bB]?|[bB]?)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 1GB, 20MB, 512KiB)")
    unit = (m.group(2) or "").upper()
    base = 1024 if m.group(3) else 1000
    return int(float(m.group(1)) * base ** " KMGT".index(unit or " "))


def iso(ms: int) -> str:
    secs, msec = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{msec:03d}Z"


@dataclass
class SessionTotals:
    project: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_tokens: int = 0
    cache_read_tokens: int = 0
    api_calls: int = 0
    tool_calls: int = 0
    turns: int = 0
    subagents: int = 0
    orphaned_tools: int = 0
    error_tools: int = 0
    files: int = 0
    lines: int = 0
    bytes: int = 0

    @property
    def spans(self) -> int:
        return self.turns + self.api_calls + self.tool_calls + self.subagents

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["spans"] = self.spans
        return d


class _File:
    def __init__(self, path: str, totals: SessionTotals) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.path = path
        self.f = open(path, "wb", buffering=1 << 20)
        self.totals = totals
        totals.files += 1

    def write(self, obj: dict[str, Any]) -> None:
        b = dumps(obj) + b"\n"
        self.f.write(b)
        self.totals.lines += 1
        self.totals.bytes += len(b)

    def close(self) -> None:
        self.f.close()


class _Thread:
    """One conversation chain in one file: the main session, or a subagent."""

    def __init__(self, gen: _SessionGen, file: _File, agent_id: str | None, t_ms: int, model: str,
                 depth: int = 0) -> None:
        self.gen = gen
        self.file = file
        self.agent_id = agent_id
        self.t = t_ms
        self.model = model
        self.depth = depth
        self.last: str | None = None
        self.ctx = gen.rng.randint(6_000, 20_000)  # cached context: grows along the conversation
        self.prev_of_last: str | None = None  # parent of the last assistant line written
        self.new_shape = gen.corpus.shape != "2.1.39"
        self.shape_written = False  # 2.1.330: an api-request-shape line opens each file

    def stamp(self, lo: int = 20, hi: int = 1500) -> str:
        self.t += self.gen.rng.randint(lo, hi)
        return iso(self.t)

    def envelope(self, parent: str | None, typ: str) -> dict[str, Any]:
        g = self.gen
        d: dict[str, Any] = {
            "parentUuid": parent, "isSidechain": self.agent_id is not None, "userType": "external",
            "cwd": g.cwd, "sessionId": g.sid, "version": g.version, "gitBranch": g.branch, "slug": g.slug,
        }
        if self.agent_id is not None:
            d["agentId"] = self.agent_id
        d["type"] = typ
        return d

    def write(self, d: dict[str, Any], lo: int = 20, hi: int = 1500) -> str:
        uuid = self.gen.uuid()
        d["uuid"] = uuid
        d["timestamp"] = self.stamp(lo, hi)
        self.file.write(d)
        self.last = uuid
        return uuid

    # -- lines -------------------------------------------------------------------

    def prompt(self, text: str, parent: str | None) -> str:
        d = self.envelope(parent, "user")
        d["message"] = {"role": "user", "content": text}
        if self.agent_id is None:
            d["permissionMode"] = "default"
        uuid = self.write(d, 500, 30_000)
        if self.new_shape:
            self.attachments()
        return uuid

    # -- 2.1.330 lines -------------------------------------------------------------

    def _plain(self, d: dict[str, Any]) -> None:
        """A line outside the conversation tree (no uuid), stamped now."""
        d["sessionId"] = self.gen.sid
        if self.agent_id is not None:
            d["agentId"] = self.agent_id
        self.file.write(d)

    def attachments(self) -> None:
        """What 2.1.330 writes between a prompt and the first response, in the parentUuid chain."""
        g, rng = self.gen, self.gen.rng
        first = not self.shape_written
        kinds: list[tuple[str, int]] = [("environment", 1_300), ("model", 650)]
        if first:
            kinds += [("deferred_tools_delta", 1_100), ("agent_listing_delta", 3_700), ("skill_listing", 13_500),
                      ("session_context", 250), ("remote_session_change", 1_100)]
        kinds += [("date", 350), ("prompt_snapshot", min(60_000, int(3_500 * (1.0 - rng.random()) ** -0.8)))]
        for kind, size in kinds:
            d = self.envelope(self.last, "attachment")
            body: dict[str, Any] = {"type": kind, "content": g.prose(size)}
            d["attachment"] = body
            if kind != "prompt_snapshot":
                d["rendered"] = [{"content": "<system-reminder>\n" + g.prose(min(size, 200)) + "\n</system-reminder>"}]
                d["renderedRole"] = "system"
            self.write(d, 1, 5)

    def api_request(self) -> str:
        """The request lines before a response: the shape (once a file), a blob, the api-request."""
        g, rng = self.gen, self.gen.rng
        shape_hash = f"{rng.getrandbits(256):064x}"
        if not self.shape_written:
            self.shape_written = True
            self._plain({"type": "api-request-shape", "shapeHash": shape_hash, "timestamp": iso(self.t),
                         "version": g.version, "shape": {"system": [g.prose(rng.randint(20_000, 34_000))],
                                                         "tools": [{"name": t, "description": g.prose(900)}
                                                                   for t in TOOLS]}})
        blob = f"{rng.getrandbits(256):064x}"
        self._plain({"type": "api-request-blob", "hash": blob, "message": {
            "role": "user", "content": [{"type": "text", "text": g.prose(min(11_000, int(
                250 * (1.0 - rng.random()) ** -0.7)))}]}})
        req_id = self.gen.uuid()
        self.t += rng.randint(300, 9000)
        self._plain({"type": "api-request", "id": req_id, "timestamp": iso(self.t), "version": g.version,
                     "querySource": "repl_main_thread" if self.agent_id is None else "agent:custom",
                     "shapeHash": shape_hash, "params": {"model": self.model, "max_tokens": 32_000,
                                                         "betas": ["claude-code-20250219"]},
                     "keep": 0, "tail": [blob], "requestDigest": f"{rng.getrandbits(256):064x}"})
        if rng.random() < 0.3:
            self._plain({"type": "tools-used", "tools": [rng.choice(TOOLS)]})
            self._plain({"type": "atis-latch", "atis": ""})
        return req_id

    def cost_state(self) -> None:
        """Claude Code's running cost of this process, after a turn (cumulative per model)."""
        g = self.gen
        g.cost_usd += g.rng.random() * 0.5
        self._plain({"type": "cost-state", "totalCostUSD": g.cost_usd, "totalAPIDuration": self.t - g.start_ms,
                     "totalToolDuration": 0, "totalLinesAdded": 0, "totalLinesRemoved": 0,
                     "totalDuration": self.t - g.start_ms, "startTime": g.start_ms,
                     "modelUsage": {self.model: {"inputTokens": g.totals.input_tokens,
                                                 "outputTokens": g.totals.output_tokens,
                                                 "cacheReadInputTokens": g.totals.cache_read_tokens,
                                                 "cacheCreationInputTokens": g.totals.cache_creation_tokens,
                                                 "costUSD": g.cost_usd}},
                     "hasUnknownModelCost": False})

    def meta_reminder(self) -> str:
        d = self.envelope(self.last, "user")
        d["message"] = {"role": "user", "content": [{"type": "text", "text": "<system-reminder>\n" +
                                                      self.gen.text(self.gen.rng.randint(100, 600)) +
                                                      "\n</system-reminder>"}]}
        d["isMeta"] = True
        return self.write(d, 1, 5)

    def api_call(self, blocks: list[tuple[str, Any]], final_stop: str | None) -> list[tuple[str, str, str, Any]]:
        """One API response, one line per block. Tool results of ('tool', name) blocks are written
        right after their tool_use line (2.1.x interleaving); ('agent', input) and ('orphan', name)
        blocks get none here: returned as (tool_id, name, line_uuid, input)."""
        g, rng, totals = self.gen, self.gen.rng, self.gen.totals
        msg_id = "msg_01" + g.b62(22)
        req_id = "req_011C" + g.b62(20)
        inp = rng.choice((1, 1, 1, 2, 3, 3, 6, 8, 10, rng.randint(10, 4000)))
        creation = rng.randint(50, 8000) if rng.random() < 0.8 else rng.randint(8000, 60_000)
        read = self.ctx
        self.ctx += creation + rng.randint(0, 3000)
        if self.ctx > 180_000:
            self.ctx = rng.randint(15_000, 40_000)  # a compaction happened, say
        final_out = rng.randint(20, 1200) if rng.random() < 0.9 else rng.randint(1200, 16_000)
        early_out = min(final_out, rng.randint(1, 30))
        totals.api_calls += 1
        totals.input_tokens += inp
        totals.output_tokens += final_out
        totals.cache_creation_tokens += creation
        totals.cache_read_tokens += read
        pending: list[tuple[str, str, str, Any]] = []
        request_ref = self.api_request() if self.new_shape else None
        parent = self.last
        n = len(blocks)
        for i, (kind, arg) in enumerate(blocks):
            last = i == n - 1
            if kind == "thinking":
                block: dict[str, Any] = {"type": "thinking", "thinking": g.prose(rng.randint(80, 3000)),
                                         "signature": g.b62(rng.randint(200, 900))}
            elif kind == "text":
                block = {"type": "text", "text": g.prose(rng.randint(30, 1500))}
            else:
                tool_id = "toolu_01" + g.b62(22)
                if kind == "agent":
                    name, tool_input = "Agent", arg
                else:
                    name, tool_input = arg, g.tool_input(arg)
                block = {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input,
                         "caller": {"type": "direct"}}
            usage = {
                "input_tokens": inp, "cache_creation_input_tokens": creation, "cache_read_input_tokens": read,
                "cache_creation": {"ephemeral_5m_input_tokens": creation, "ephemeral_1h_input_tokens": 0},
                "output_tokens": final_out if last else early_out, "service_tier": "standard",
                "inference_geo": "global",
            }
            d = self.envelope(parent, "assistant")
            d["message"] = {"model": self.model, "id": msg_id, "type": "message", "role": "assistant",
                            "content": [block], "stop_reason": final_stop if last else None,
                            "stop_sequence": None, "usage": usage}
            d["requestId"] = req_id
            if request_ref is not None:
                usage["output_tokens_details"] = {"thinking_tokens": 0}
                usage["iterations"] = []
                usage["speed"] = "standard"
                d.update({"apiBlockIndex": i, "requestRef": request_ref, "requestedModel": self.model,
                          "effort": "medium", "madeBy": "model"})
            self.prev_of_last = parent
            line = self.write(d, 300 if i == 0 else 50, 9000 if i == 0 else 900)
            parent = line
            if kind in ("tool", "agent", "orphan"):
                totals.tool_calls += 1
                if kind == "tool":
                    if rng.random() < P_HOOK:
                        self.hook_progress(line, tool_id, name)
                    parent = self.tool_result(tool_id, name, line)
                elif kind == "agent":
                    pending.append((tool_id, name, line, tool_input))
                else:
                    totals.orphaned_tools += 1
                    pending.append((tool_id, name, line, tool_input))
        self.last = parent
        return pending

    def hook_progress(self, parent: str, tool_id: str, name: str) -> None:
        d = self.envelope(parent, "progress")
        d["data"] = {"type": "hook_progress", "hookEvent": "PostToolUse", "hookName": f"PostToolUse:{name}",
                     "command": "callback"}
        d["parentToolUseID"] = tool_id
        d["toolUseID"] = tool_id
        self.write(d, 1, 20)

    def tool_result(self, tool_id: str, name: str, tool_line: str) -> str:
        g, rng = self.gen, self.gen.rng
        d = self.envelope(tool_line, "user")
        if rng.random() < P_TOOL_ERROR:
            g.totals.error_tools += 1
            msg = f"<tool_use_error>{g.prose(rng.randint(40, 300))}</tool_use_error>"
            d["message"] = {"role": "user", "content": [{"type": "tool_result", "content": msg,
                                                          "is_error": True, "tool_use_id": tool_id}]}
            d["toolUseResult"] = "Error: " + msg[17:80]
        else:
            size = g.result_size()
            body = g.text(size)
            if name == "Edit":
                content = f"The file {g.path()} has been updated. Here's the result of running `cat -n`."
                tur: Any = {"filePath": g.path(), "oldString": body[:200], "newString": body[:220],
                            "originalFile": body, "structuredPatch": [], "userModified": False,
                            "replaceAll": False}
            elif name == "Read":
                content = body
                tur = {"type": "text", "file": {"filePath": g.path(), "content": body,
                                                "numLines": body.count("\n") + 1, "startLine": 1,
                                                "totalLines": body.count("\n") + 1}}
            elif name in ("Grep", "Glob"):
                content = body
                tur = {"mode": "files_with_matches", "filenames": [g.path() for _ in range(3)], "numFiles": 3}
            else:
                content = body
                tur = {"stdout": body, "stderr": "", "interrupted": False, "isImage": False,
                       "noOutputExpected": False}
            d["message"] = {"role": "user", "content": [{"tool_use_id": tool_id, "type": "tool_result",
                                                          "content": content}]}
            d["toolUseResult"] = tur
        d["sourceToolAssistantUUID"] = tool_line
        return self.write(d, 30, 8000)

    def agent_result(self, tool_id: str, tool_line: str, agent_id: str, agent_type: str, prompt: str,
                     answer: str, started_ms: int, last_usage: dict[str, int], tool_uses: int) -> str:
        d = self.envelope(tool_line, "user")
        total = sum(last_usage.values())
        text2 = (f"agentId: {agent_id} (use SendMessage with to: '{agent_id}' to continue this agent)\n"
                 f"<usage>subagent_tokens: {total}\ntool_uses: {tool_uses}\nduration_ms: {self.t - started_ms}</usage>")
        d["message"] = {"role": "user", "content": [{"tool_use_id": tool_id, "type": "tool_result", "content": [
            {"type": "text", "text": answer}, {"type": "text", "text": text2}]}]}
        d["toolUseResult"] = {
            "status": "completed", "prompt": prompt, "agentId": agent_id, "agentType": agent_type,
            "content": [{"type": "text", "text": answer}], "totalDurationMs": self.t - started_ms,
            "totalTokens": total, "totalToolUseCount": tool_uses, "usage": last_usage,
        }
        d["sourceToolAssistantUUID"] = tool_line
        return self.write(d, 5, 200)

    def system_turn_duration(self, ms: int) -> None:
        d = self.envelope(self.last, "system")
        d["subtype"] = "turn_duration"
        d["durationMs"] = ms
        d["isMeta"] = False
        self.write(d, 1, 30)


class _SessionGen:
    def __init__(self, corpus: _Corpus, index: int, budget: int) -> None:
        self.corpus = corpus
        self.rng = corpus.rng
        self.sid = self.uuid()
        p = self.rng.randrange(corpus.projects)
        self.cwd = f"/home/dev/work/project-{p:02d}"
        self.project = re.sub(r"[^A-Za-z0-9]", "-", self.cwd)
        self.branch = self.rng.choice(("main", "main", "feature/otel", "fix/tail"))
        self.slug = "-".join(self.rng.choice(_WORDS[:40]) for _ in range(3))
        self.totals = SessionTotals(self.project)
        self.version = CC_VERSION if corpus.shape == "2.1.39" else "2.1.330"
        self.cost_usd = 0.0
        self.budget = budget
        # A small session (the 10,000-file idle root): short turns, small results.
        self.result_cap = RESULT_CAP if budget >= 50_000 else max(budget // 8, RESULT_MIN)
        self.mean_calls = 5.0 if budget >= 50_000 else 1.0
        self.start_ms = BASE_MS + index * 1_800_000 + self.rng.randint(0, 600_000)
        self.dir = os.path.join(corpus.out, "projects", self.project)

    # -- random material ------------------------------------------------------------

    def uuid(self) -> str:
        h = f"{self.corpus.rng.getrandbits(128):032x}"
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) & 3]}{h[17:20]}-{h[20:]}"

    def b62(self, n: int) -> str:
        return "".join(self.rng.choices(_B62, k=n))

    def text(self, n: int) -> str:
        return self.corpus.slice(n)

    def prose(self, n: int) -> str:
        return self.corpus.slice(n, prose=True)

    def path(self) -> str:
        return f"{self.cwd}/src/{self.rng.choice(_WORDS[:30])}/{self.rng.choice(_WORDS[:40])}.py"

    def result_size(self) -> int:
        u = self.rng.random()
        return min(self.result_cap, int(RESULT_MIN * (1.0 - u) ** (-1.0 / RESULT_ALPHA)))

    def tool_input(self, name: str) -> dict[str, Any]:
        rng = self.rng
        if name == "Bash":
            return {"command": f"cd {self.cwd} && {rng.choice(('pytest -q', 'git status', 'ls -la', 'make'))}",
                    "description": self.prose(rng.randint(10, 60))}
        if name == "Read":
            return {"file_path": self.path()}
        if name == "Edit":
            return {"file_path": self.path(), "old_string": self.text(rng.randint(20, 400)),
                    "new_string": self.text(rng.randint(20, 400))}
        if name == "Grep":
            return {"pattern": rng.choice(_WORDS[:40]), "path": self.cwd, "output_mode": "files_with_matches"}
        return {"pattern": "**/*.py", "path": self.cwd}

    # -- structure --------------------------------------------------------------------

    def tool_blocks(self, k: int) -> list[tuple[str, Any]]:
        rng = self.rng
        blocks: list[tuple[str, Any]] = []
        if rng.random() < P_THINKING:
            blocks.append(("thinking", None))
        if rng.random() < P_TEXT:
            blocks.append(("text", None))
        blocks.extend(("tool", rng.choice(TOOLS)) for _ in range(k))
        return blocks

    def final_blocks(self) -> list[tuple[str, Any]]:
        return ([("thinking", None)] if self.rng.random() < P_THINKING else []) + [("text", None)]

    def run(self) -> SessionTotals:
        rng = self.rng
        main_file = _File(os.path.join(self.dir, f"{self.sid}.jsonl"), self.totals)
        main = _Thread(self, main_file, None, self.start_ms, rng.choice(MODELS))
        resume_parent: str | None = None
        first = True
        try:
            while first or resume_parent is not None or (
                    self.totals.bytes < self.budget and self.corpus.room() > 0):
                resume_parent = self.turn(main, None if first else (resume_parent or main.last))
                first = False
            main_file.write({"type": "last-prompt", "lastPrompt": "continue", "leafUuid": main.last,
                             "sessionId": self.sid})
        finally:
            main_file.close()
        return self.totals

    def turn(self, main: _Thread, parent: str | None) -> str | None:
        """One turn; returns the resume parent if the turn was killed (dead branch), else None."""
        rng = self.rng
        self.totals.turns += 1
        for op in ("enqueue", "dequeue"):
            main.t += 1
            q: dict[str, Any] = {"type": "queue-operation", "operation": op, "timestamp": iso(main.t),
                                 "sessionId": self.sid}
            if op == "enqueue":
                q["content"] = "please " + self.prose(rng.randint(20, 300))
            main.file.write(q)
        main.prompt("please " + self.prose(rng.randint(20, 600)), parent)
        if rng.random() < P_META:
            main.meta_reminder()
        start = main.t
        n_calls = 1 + min(int(rng.expovariate(1 / self.mean_calls)), 40)
        spawn_at = rng.randrange(n_calls) if rng.random() < self.corpus.p_spawn else -1
        killed = rng.random() < P_KILL
        for i in range(n_calls):
            if i == spawn_at:
                self.spawn(main, rng.randint(1, self.corpus.max_agents))
            else:
                main.api_call(self.tool_blocks(rng.choice((1, 1, 1, 1, 2, 2, 3))), "tool_use")
        if killed:
            blocks = ([("text", None)] if rng.random() < 0.5 else []) + [("orphan", rng.choice(TOOLS))]
            main.api_call(blocks, None)
            # the resume prompt hangs on the line before the orphaned tool_use (docs/format.md section 7)
            resume = main.prev_of_last
            main.t += rng.randint(60_000, 3_600_000)  # the process was dead for a while
            return resume
        main.api_call(self.final_blocks(), "end_turn")
        main.system_turn_duration(main.t - start)
        if main.new_shape:
            main.cost_state()
        return None

    def spawn(self, parent: _Thread, n: int) -> None:
        """One response with n parallel Agent tool_uses, their subagent files, then the results."""
        rng = self.rng
        inputs = []
        for _ in range(n):
            agent_type = rng.choice(AGENT_TYPES)
            inputs.append({"description": self.prose(rng.randint(10, 40)),
                           "prompt": self.prose(rng.randint(100, 2000)), "subagent_type": agent_type})
        blocks: list[tuple[str, Any]] = [("text", None)] + [("agent", i) for i in inputs]
        pending = parent.api_call(blocks, "tool_use")
        results = []
        t0 = parent.t
        for tool_id, _name, line, tool_input in pending:
            results.append(self.subagent(parent, tool_id, line, tool_input, t0))
        parent.t = max(r[0] for r in results) + rng.randint(5, 200)
        rng.shuffle(results)  # they finish in any order
        for _end, tool_id, line, agent_id, agent_type, prompt, answer, last_usage, uses in results:
            parent.agent_result(tool_id, line, agent_id, agent_type, prompt, answer, t0, last_usage, uses)

    def subagent(self, parent: _Thread, tool_id: str, tool_line: str, tool_input: dict[str, Any],
                 t0: int) -> tuple[Any, ...]:
        rng = self.rng
        agent_id = "a" + f"{rng.getrandbits(64):016x}"
        depth = parent.depth + 1
        self.totals.subagents += 1
        sub_dir = os.path.join(self.dir, self.sid, "subagents")
        f = _File(os.path.join(sub_dir, f"agent-{agent_id}.jsonl"), self.totals)
        with open(os.path.join(sub_dir, f"agent-{agent_id}.meta.json"), "wb") as meta:
            meta.write(dumps({"agentType": tool_input["subagent_type"], "description": tool_input["description"],
                              "toolUseId": tool_id, "spawnDepth": depth}))
        th = _Thread(self, f, agent_id, t0 + rng.randint(5, 100), rng.choice(SUBAGENT_MODELS), depth)
        try:
            th.prompt(tool_input["prompt"], None)
            uses = 0
            nested_at = rng.randrange(6) if depth == 1 and rng.random() < P_NESTED else -1
            for i in range(rng.randint(1, self.corpus.max_sub_calls)):
                if i == nested_at:
                    self.spawn(th, 1)
                    uses += 1
                    continue
                k = rng.choice((1, 1, 2))
                th.api_call(self.tool_blocks(k), "tool_use")
                uses += k
            before = self.totals.input_tokens, self.totals.output_tokens, \
                self.totals.cache_creation_tokens, self.totals.cache_read_tokens
            th.api_call([("text", None)], "end_turn")
            last_usage = {
                "input_tokens": self.totals.input_tokens - before[0],
                "cache_creation_input_tokens": self.totals.cache_creation_tokens - before[2],
                "cache_read_input_tokens": self.totals.cache_read_tokens - before[3],
                "output_tokens": self.totals.output_tokens - before[1],
            }
        finally:
            f.close()
        answer = self.prose(rng.randint(50, 1500))
        return (th.t, tool_id, tool_line, agent_id, tool_input["subagent_type"], tool_input["prompt"], answer,
                last_usage, uses)


class _Corpus:
    def __init__(self, out: str, size: int | None, sessions: int | None, seed: int, session_mean: int,
                 projects: int, shape: str = "2.1.39") -> None:
        if shape not in SHAPES:
            raise ValueError(f"shape {shape!r}: one of {SHAPES}")
        self.out = out
        self.shape = shape
        small_agents = shape == "2.1.330"  # many small subagent files
        self.p_spawn = 0.35 if small_agents else 0.9 if shape == "agents" else P_SPAWN
        self.max_agents = 5 if small_agents else 8 if shape == "agents" else 3
        self.max_sub_calls = 3 if small_agents else 1 if shape == "agents" else 6
        self.size = size
        self.sessions_wanted = sessions
        self.rng = random.Random(seed)
        self.session_mean = session_mean
        self.projects = projects
        self.written = 0
        self._pool, self._prose = _make_pools(random.Random(seed ^ 0x5EED))

    def room(self) -> int:
        if self.size is None:
            return 1
        return self.size - self.written

    def slice(self, n: int, prose: bool = False) -> str:
        pool = self._prose if prose else self._pool
        if n >= len(pool):
            reps = n // len(pool) + 1
            return (pool * reps)[:n]
        o = self.rng.randrange(len(pool) - n)
        return pool[o:o + n]

    def run(self) -> dict[str, Any]:
        sessions: dict[str, SessionTotals] = {}
        i = 0
        mu = math.log(self.session_mean) - 0.5  # lognormal(sigma=1) with the wanted mean
        while True:
            if self.sessions_wanted is not None:
                if i >= self.sessions_wanted:
                    break
            elif self.room() <= 0:
                break
            budget = int(min(max(self.rng.lognormvariate(mu, 1.0), 2_000), self.session_mean * 8))
            if self.size is not None and self.sessions_wanted is None:
                budget = min(budget, max(self.room(), 2_000))
            gen = _SessionGen(self, i, budget)
            t = gen.run()
            self.written += t.bytes
            sessions[gen.sid] = t
            i += 1
        return _expected(sessions)


def _expected(sessions: dict[str, SessionTotals]) -> dict[str, Any]:
    keys = ("input_tokens", "output_tokens", "cache_creation_tokens", "cache_read_tokens", "api_calls",
            "tool_calls", "turns", "subagents", "orphaned_tools", "error_tools", "files", "lines", "bytes")
    totals = {k: sum(getattr(t, k) for t in sessions.values()) for k in keys}
    totals["spans"] = sum(t.spans for t in sessions.values())
    totals["sessions"] = len(sessions)
    return {"sessions": {sid: t.as_dict() for sid, t in sessions.items()}, "totals": totals}


def _make_pools(rng: random.Random) -> tuple[str, str]:
    """~1 MB of numbered code-ish lines (Read/Bash output) and ~256 KB of prose."""
    lines = []
    n = 0
    size = 0
    while size < 1 << 20:
        n += 1
        indent = " " * (4 * rng.randint(0, 3))
        body = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(0, 12)))
        line = f"{n:6d}→{indent}{body}"
        lines.append(line)
        size += len(line) + 1
    code = "\n".join(lines)
    words = [w for w in _WORDS if w.isalpha()]
    prose = " ".join(rng.choice(words) for _ in range(40_000))
    return code, prose


def generate(out: str, size: int | None = None, sessions: int | None = None, seed: int = 1,
             session_mean: int = 4_000_000, projects: int = 8, shape: str = "2.1.39") -> dict[str, Any]:
    """Write the corpus under ``out`` (which must not hold a projects/ dir yet) and
    ``out/expected.json``; returns the expected document."""
    if size is None and sessions is None:
        raise ValueError("give a size or a session count")
    if os.path.exists(os.path.join(out, "projects")):
        raise FileExistsError(f"{out}/projects exists; pick an empty dir")
    os.makedirs(out, exist_ok=True)
    t0 = time.monotonic()
    doc = _Corpus(out, size, sessions, seed, session_mean, projects, shape).run()
    doc.update({"shape": shape,
        "generator": GENERATOR_VERSION, "seed": seed, "size_target": size, "sessions_target": sessions,
        "session_mean": session_mean, "projects": projects, "generate_seconds": round(time.monotonic() - t0, 3),
    })
    with open(os.path.join(out, "expected.json"), "wb") as f:
        f.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    return doc


def load_expected(out: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(out, "expected.json"), "rb") as f:
            return orjson.loads(f.read())
    except (OSError, orjson.JSONDecodeError):
        return None


def ensure(out: str, size: int | None = None, sessions: int | None = None, seed: int = 1,
           session_mean: int = 4_000_000, projects: int = 8, shape: str = "2.1.39") -> dict[str, Any]:
    """The corpus at ``out`` made with these parameters: reused if complete, else (re)generated.
    Under a lock beside it: test processes (pytest -n) share a corpus, and one must not remove
    what another is generating."""
    import fcntl

    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(os.path.abspath(out) + ".lock", "wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure(out, size, sessions, seed, session_mean, projects, shape)


def _ensure(out: str, size: int | None, sessions: int | None, seed: int, session_mean: int, projects: int,
            shape: str) -> dict[str, Any]:
    doc = load_expected(out)
    want = {"generator": GENERATOR_VERSION, "seed": seed, "size_target": size, "sessions_target": sessions,
            "session_mean": session_mean, "projects": projects, "shape": shape}
    if doc is not None and all(doc.get(k, "2.1.39" if k == "shape" else None) == v for k, v in want.items()):
        return doc
    if os.path.isdir(out):
        import shutil

        shutil.rmtree(out)
    return generate(out, size, sessions, seed, session_mean, projects, shape)


class LiveAppender:
    """Appends Claude Code-shaped lines to a session file while ccotel runs: a new prompt, one API
    response with a tool_use, and the tool_result that completes the tool span (the timed line)."""

    def __init__(self, path: str, session_id: str, cwd: str, seed: int | str = 7) -> None:
        self.path = path
        self.sid = session_id
        self.cwd = cwd
        self.rng = random.Random(seed)
        self.n = 0

    def _uuid(self) -> str:
        h = f"{self.rng.getrandbits(128):032x}"
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-8{h[17:20]}-{h[20:]}"

    def _env(self, parent: str | None, typ: str) -> dict[str, Any]:
        return {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": self.cwd,
                "sessionId": self.sid, "version": CC_VERSION, "gitBranch": "main", "type": typ,
                "uuid": self._uuid(), "timestamp": iso(time.time_ns() // 1_000_000)}

    def start(self, tool_id: str) -> tuple[bytes, str]:
        """Prompt + assistant tool_use lines (bytes to append) and the tool_use line's uuid."""
        self.n += 1
        p = self._env(None, "user")
        p["message"] = {"role": "user", "content": f"live prompt {self.n}"}
        a = self._env(p["uuid"], "assistant")
        mid = tool_id.replace("toolu_", "msg_", 1)  # the receiver looks for the tool id alone
        a["message"] = {"model": "claude-opus-4-6", "id": mid, "type": "message", "role": "assistant",
                        "content": [{"type": "tool_use", "id": tool_id, "name": "Bash",
                                     "input": {"command": "true"}}],
                        "stop_reason": "tool_use", "stop_sequence": None,
                        "usage": {"input_tokens": 3, "cache_creation_input_tokens": 10,
                                  "cache_read_input_tokens": 100, "output_tokens": 7}}
        a["requestId"] = tool_id.replace("toolu_", "req_", 1)
        return dumps(p) + b"\n" + dumps(a) + b"\n", a["uuid"]

    def result(self, tool_id: str, tool_line: str) -> bytes:
        r = self._env(tool_line, "user")
        r["message"] = {"role": "user", "content": [{"tool_use_id": tool_id, "type": "tool_result",
                                                      "content": "ok"}]}
        r["toolUseResult"] = {"stdout": "ok", "stderr": "", "interrupted": False, "isImage": False}
        r["sourceToolAssistantUUID"] = tool_line
        return dumps(r) + b"\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.corpus", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="config dir to create (gets projects/ and expected.json)")
    ap.add_argument("--size", type=parse_size, default=None, help="total transcript bytes: 1GB, 20MB, ...")
    ap.add_argument("--sessions", type=int, default=None, help="exact number of sessions instead of a size")
    ap.add_argument("--session-size", type=parse_size, default=4_000_000, help="mean session size (4MB)")
    ap.add_argument("--projects", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--shape", choices=SHAPES, default="2.1.39",
                    help="the Claude Code version whose lines are written (2.1.330: many small subagent files; "
                         "agents: 2.1.330 lines, most bytes in small subagent files)")
    args = ap.parse_args(argv)
    if args.size is None and args.sessions is None:
        ap.error("give --size or --sessions")
    doc = generate(args.out, args.size, args.sessions, args.seed, args.session_size, args.projects, args.shape)
    t = doc["totals"]
    print(f"{t['bytes'] / 1e6:,.1f} MB in {t['files']} files ({t['sessions']} sessions, {t['subagents']} subagents),"
          f" {t['lines']:,} lines, {t['spans']:,} spans expected; {doc['generate_seconds']:.1f} s -> "
          f"{os.path.join(args.out, 'expected.json')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
